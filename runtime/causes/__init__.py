"""From an exception or an event to a cause and a rule: a device mistake, a failed download, a missing package or data."""
