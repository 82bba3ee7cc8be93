"""Load generators and benchmarks for shoal."""
