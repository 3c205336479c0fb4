"""The lab's own speed: ``python -m bench.lab.bench``."""
