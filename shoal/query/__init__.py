"""shoal.query."""
