"""Faults together over a long run: ``python -m bench.faults.soak``."""
