"""Counter collection: read every port's PMA counters (a sweep), then rates per port.

Pipeline stage 1 of ibqos (docs/design.md §5)::

    Fabric.targets() ──► Backend.sweep() ──► Sweep ──► RateTracker.update() ──► rates table

Backends: ``native`` (libibumad MADs, many in flight; the default), ``perfquery``
(infiniband-diags processes) and ``replay`` (a recorded sweep series, written by
``ibqos collect --record DIR``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.collect.backends import make_backend
    from ibqos.collect.loop import Collector
    from ibqos.collect.portinfo import LaneCaps, read_lane_caps
    from ibqos.collect.rates import RateTracker, rows_for_json
    from ibqos.collect.sweep import Backend, Sweep
    from ibqos.fabric.targets import Target
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".backends": ("make_backend",),
            ".loop": ("Collector",),
            ".portinfo": ("LaneCaps", "read_lane_caps"),
            ".rates": ("RateTracker", "rows_for_json"),
            ".sweep": ("Backend", "Sweep"),
            "ibqos.fabric.targets": ("Target",),
        },
    )

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
