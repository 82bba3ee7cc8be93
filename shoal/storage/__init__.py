"""shoal.storage."""
