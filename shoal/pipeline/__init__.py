"""shoal.pipeline."""
