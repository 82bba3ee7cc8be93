"""shoal: OTLP in, SQL out, Delta Lake tables underneath."""

__version__ = "0.1.0"
