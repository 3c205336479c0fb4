"""One decision cycle on synthetic fabrics: ``python -m bench.plan.bench``."""
