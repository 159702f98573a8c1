"""locustfiles package."""
