# The two commands of the README:  make demo  and  make test.
# Each sets the machine up first (scripts/setup.sh is idempotent).
.PHONY: setup demo test lint typecheck unit bench bench-collect bench-plan bench-metrics bench-cli dist

VENV := .venv/bin

setup:
	scripts/setup.sh

demo: setup
	scripts/demo.sh

test: setup lint typecheck
	$(VENV)/pytest

lint:
	$(VENV)/ruff check ibqos bench tests scripts
	$(VENV)/ruff format --check ibqos bench tests scripts
	$(VENV)/lint-imports --no-cache

typecheck:
	$(VENV)/mypy --strict

unit: setup
	$(VENV)/pytest tests/unit

# the benchmarks and evaluations (bench/, not shipped), each run from here as a module
bench: setup
	$(VENV)/python -m bench.lab.bench

bench-collect: setup
	$(VENV)/python -m bench.collect.bench

bench-plan: setup
	$(VENV)/python -m bench.plan.bench

bench-metrics: setup
	$(VENV)/python -m bench.metrics.bench

bench-cli: setup
	$(VENV)/python -m bench.cli.startup

# sdist and wheel into dist/ (the wheel carries the units, config, dashboards, Slurm scripts)
dist: setup
	$(VENV)/python -m build --no-isolation --outdir dist .

.PHONY: eval-sim validate-sim bench-sim

eval-sim: setup
	$(VENV)/python -m bench.sim.eval --svg docs/img

validate-sim: setup
	$(VENV)/python -m bench.sim.validate

bench-sim: setup
	$(VENV)/python -m bench.sim.bench
