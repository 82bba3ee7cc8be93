"""shoal.server."""
