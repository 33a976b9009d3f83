"""Training steps: telling them (optimizer steps, updates by hand), capping them (--max-steps), the losses' band."""
