"""Prometheus metrics of the agent (``docs/metrics.md``).

- :mod:`~ibqos.metrics.snapshot`: what one cycle leaves for the exporter;
- :mod:`~ibqos.metrics.totals`: the snapshots' bytes added up into counters;
- :mod:`~ibqos.metrics.families`: the snapshot as metric families at scrape time;
- :mod:`~ibqos.metrics.health`: the agent's own counters, durations and info;
- :mod:`~ibqos.metrics.auth`: basic authentication, plaintext or bcrypt;
- :mod:`~ibqos.metrics.server`: the HTTP(S) endpoint.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.metrics.families import SnapshotCollector
    from ibqos.metrics.health import AgentMetrics, Counters
    from ibqos.metrics.snapshot import Snapshot, build_snapshot, level_capacities
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".families": ("SnapshotCollector",),
            ".health": ("AgentMetrics", "Counters"),
            ".snapshot": ("Snapshot", "build_snapshot", "level_capacities"),
        },
    )

__all__ = [
    "AgentMetrics",
    "Counters",
    "Snapshot",
    "SnapshotCollector",
    "build_snapshot",
    "level_capacities",
]
