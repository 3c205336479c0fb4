"""Attribution against the lab's ground truth: ``python -m bench.attribution.eval``."""
