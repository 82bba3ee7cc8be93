"""shoal.api."""
