"""Prometheus remote write (1.0 and 2.0) into the ``metrics`` table: the pure codec."""

SCOPE = "prometheus.remote_write"
"""The scope name of remote-written rows; the PromQL view keeps their names as written."""
