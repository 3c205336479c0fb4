# The two commands of the README:  make demo  and  make test.
# Each sets the machine up first (scripts/setup.sh is idempotent).
.PHONY: setup demo test lint typecheck unit bench bench-collect bench-plan bench-metrics dist

VENV := .venv/bin

setup:
	scripts/setup.sh

demo: setup
	scripts/demo.sh

test: setup lint typecheck
	$(VENV)/pytest

lint:
	$(VENV)/ruff check ibqos tests scripts
	$(VENV)/ruff format --check ibqos tests scripts
	$(VENV)/lint-imports --no-cache

typecheck:
	$(VENV)/mypy --strict

unit: setup
	$(VENV)/pytest tests/unit

bench: setup
	$(VENV)/python scripts/bench_lab.py

bench-collect: setup
	$(VENV)/python scripts/bench_collect.py

bench-plan: setup
	$(VENV)/python scripts/bench_plan.py

bench-metrics: setup
	$(VENV)/python scripts/bench_metrics.py

# sdist and wheel into dist/ (the wheel carries the units, config, dashboards, Slurm scripts)
dist: setup
	$(VENV)/python -m build --no-isolation --outdir dist .

.PHONY: eval-sim validate-sim bench-sim

eval-sim: setup
	$(VENV)/python scripts/eval_sim.py --svg docs/img

validate-sim: setup
	$(VENV)/python scripts/validate_sim.py

bench-sim: setup
	$(VENV)/python scripts/bench_sim.py
