"""The reports: text, HTML and JSON for verify, the cap, DDP and migrate reports, the progress view."""
