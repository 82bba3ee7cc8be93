"""Prometheus remote write (1.0 and 2.0) into the ``metrics`` table: the pure codec."""
