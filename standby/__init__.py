"""standby package."""
