"""Benchmarks and evaluations of ibqos, run from a checkout.

Not shipped: neither the wheel nor the sdist carries them (``pyproject.toml`` finds only
``ibqos*``; ``MANIFEST.in`` prunes ``bench``).  Run each from the checkout's root, with the
development environment's Python, as ``python -m bench.<area>.<name>``:

- ``bench.collect.bench``: counter sweeps of lab fabrics, every collection method;
- ``bench.plan.bench``: one decision cycle on synthetic fabrics of 1k-50k ports;
- ``bench.metrics.bench``: the exporter's scrape time and exposition size;
- ``bench.lab.bench``: the lab's start and one traffic tick, by fabric size;
- ``bench.handoff.bench``: the job-SL server under a burst of questions;
- ``bench.sim.bench``: the contention simulator's speed and a what-if;
- ``bench.sim.predict``: the tuner's steady-state prediction of its candidates;
- ``bench.sim.eval``: the QoS policies in the simulator's fluid model;
- ``bench.sim.validate``: the fluid model against the packet model;
- ``bench.sim.heldout``: the policies on generated, real-application and held-out mixes;
- ``bench.closedloop.bench``: the adaptive agent on labs with fluid contention;
- ``bench.attribution.eval``: attribution against the lab's ground truth.

Each prints Markdown tables (:mod:`bench.report`) on stdout and its progress on stderr;
the docs hold one run of each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: the checkout this package is in (its root: ``bench/``'s parent)
ROOT = Path(__file__).resolve().parents[1]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """*env* (default: this process's environment) with the checkout first on PYTHONPATH,
    so that a child ``python -m bench.…`` imports this package whatever its working
    directory (a lab's run directory, say)."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH")) if p)
    return out
