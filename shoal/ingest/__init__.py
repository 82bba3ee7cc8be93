"""shoal.ingest."""
