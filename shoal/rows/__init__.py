"""shoal.rows."""
