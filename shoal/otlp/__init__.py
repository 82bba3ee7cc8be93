"""shoal.otlp: OTLP requests to Arrow tables with frozen schemas."""
