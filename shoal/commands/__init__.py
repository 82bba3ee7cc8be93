"""shoal.commands."""
