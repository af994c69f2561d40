"""The regression check: the candidate against the live release, measured side by side."""
