"""Counter collection, every method side by side: ``python -m bench.collect.bench``."""
