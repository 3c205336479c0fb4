#!/usr/bin/env bash
# The demo (`make demo`): what ibqos does, watched on a simulated fabric. It is the module
# ibqos.lab.demo (its docstring says what it shows), run from the checkout's top, where it
# finds examples/, characterize/ and dashboards/, with the checkout's venv (make setup).
# About 3 minutes; IBQOS_DEMO_ROUND_S (default 12) sets the seconds between two rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m ibqos.lab.demo
