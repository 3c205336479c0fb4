"""Counter collection: read every port's PMA counters (a sweep), then rates per port.

Pipeline stage 1 of ibqos (docs/design.md §5)::

    Fabric.targets() ──► Backend.sweep() ──► Sweep ──► RateTracker.update() ──► rates table

Backends: ``native`` (libibumad MADs, many in flight; the default), ``perfquery``
(infiniband-diags processes) and ``replay`` (a recorded sweep series, written by
``ibqos collect --record DIR``).
"""

from __future__ import annotations

from ibqos.collect.backends import make_backend
from ibqos.collect.loop import Collector
from ibqos.collect.portinfo import LaneCaps, read_lane_caps
from ibqos.collect.rates import RateTracker, rows_for_json
from ibqos.collect.sweep import Backend, Sweep
from ibqos.fabric.targets import Target

__all__ = [
    "Backend",
    "Collector",
    "LaneCaps",
    "RateTracker",
    "Sweep",
    "Target",
    "make_backend",
    "read_lane_caps",
    "rows_for_json",
]
