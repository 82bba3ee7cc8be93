"""shoal.wal."""
