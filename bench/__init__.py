"""Benchmarks: ``python -m bench.NAME [--quick] [--json]``."""
