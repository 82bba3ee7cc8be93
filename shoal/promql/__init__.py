"""PromQL over the metrics table: the OTLP -> Prometheus view and evaluation."""
