"""The exporter's speed and size: ``python -m bench.metrics.bench``."""
