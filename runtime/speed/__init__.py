"""verify --speed: what keeps a migrated script's GPU idle, counted per step in the device run, and estimated for a named GPU."""
