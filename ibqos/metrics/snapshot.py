"""What one cycle leaves for the exporter: the decision plus per-level sums of the sweep.

A :class:`Snapshot` is built once per cycle, in the agent's thread, and swapped in whole;
the exporter's thread only ever reads a complete one.  The sums over ports (a few
milliseconds at 50k ports) are done here rather than at scrape time, so a scrape formats
what is already known.

Levels follow :meth:`ibqos.fabric.model.Fabric.uplinks`: level 0 is the CA ports (injection),
level *l* >= 1 the up ports of the level-*l* switches.  Units: bytes per second, XmitWait
ticks per second, seconds since the epoch.

A snapshot made from a fresh sweep also says how many bytes (and XmitWait ticks) crossed
each level during the sweep's interval (each port's rate times its own interval), and the
interval itself, so that :mod:`ibqos.metrics.totals` can add them up into counters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.collect.rates import VL_WAIT_RATE_COLUMNS
from ibqos.fabric.model import Fabric
from ibqos.plan.report import Decision

__all__ = ["Snapshot", "build_snapshot", "level_capacities"]
#: rates columns the per-port series are made of
PORT_COLUMNS = ("node_guid", "port", "level", "xmit_bytes_per_s", "rcv_bytes_per_s")


@dataclass(frozen=True)
class Snapshot:
    """The latest cycle, as the exporter serves it.

    Attributes:
        time_s: UNIX time of the cycle, seconds.
        decision: the decision (jobs, plan, tables, unattributed traffic).
        level_traffic: level -> bytes/s its ports sent (ports that answered).
        level_capacity: level -> capacity of those ports, bytes/s (levels with uplinks).
        level_wait: level -> PortXmitWait ticks/s of those ports (ports that have it).
        vl_wait: (VL, level) -> PortVLXmitWait ticks/s; None when per-VL counters were not
            read (``collect.vl_xmit_wait`` off).
        ports: the rates columns of :data:`PORT_COLUMNS` plus ``xmit_wait_per_s`` and
            ``interval_s``, for per-port series; None unless ``metrics.per_port``.
        interval_s: seconds the rates cover (the sweep's median port interval) when the
            snapshot comes from a fresh sweep; None when it reuses earlier rates (a job
            event, a sweep that reached too few ports), which add nothing to the counters.
        level_bytes: level -> bytes its ports sent during the interval (each port's rate
            times its own interval); empty unless *interval_s*.
        level_wait_ticks: level -> PortXmitWait ticks during the interval, likewise.
    """

    time_s: float
    decision: Decision
    level_traffic: Mapping[int, float]
    level_capacity: Mapping[int, float]
    level_wait: Mapping[int, float]
    vl_wait: Mapping[tuple[int, int], float] | None
    ports: pd.DataFrame | None = None
    interval_s: float | None = None
    level_bytes: Mapping[int, float] = field(default_factory=dict)
    level_wait_ticks: Mapping[int, float] = field(default_factory=dict)


def level_capacities(fabric: Fabric) -> dict[int, float]:
    """Level -> uplink capacity, bytes per second; levels without uplinks left out."""
    out = {level: fabric.uplink_capacity_bytes_per_s(level) for level in range(fabric.height + 1)}
    return {level: cap for level, cap in out.items() if cap > 0}


def build_snapshot(
    decision: Decision,
    rates: pd.DataFrame,
    capacity: Mapping[int, float],
    time_s: float,
    *,
    per_port: bool = False,
    fresh: bool = False,
) -> Snapshot:
    """Sum the rates table per level (and per VL) for the exporter.

    Args:
        decision: the cycle's decision.
        rates: the rates table it was made from (``ibqos.collect.rates``).
        capacity: :func:`level_capacities` of the fabric.
        time_s: UNIX time of the cycle, seconds.
        per_port: keep the per-port columns for per-port series.
        fresh: *rates* come from this cycle's sweep (not reused): their bytes count.
    """
    level = rates["level"].to_numpy(dtype=np.int64)
    role = rates["role"].to_numpy(dtype=object)
    # the ports whose traffic crosses each level: CA ports at 0, up ports above
    uplink = np.where(role == "host", 0, np.where(role == "up", level, -1))
    keep = uplink >= 0
    sums = pd.DataFrame({"level": uplink[keep]})
    waits = list(VL_WAIT_RATE_COLUMNS) if VL_WAIT_RATE_COLUMNS[0] in rates.columns else []
    for col in ("xmit_bytes_per_s", "xmit_wait_per_s", *waits):
        sums[col] = rates[col].to_numpy(dtype=np.float64)[keep]
    interval = rates["interval_s"].to_numpy(dtype=np.float64)
    span = _interval(interval) if fresh else None
    if span is not None:
        sums["bytes"] = sums["xmit_bytes_per_s"].to_numpy() * interval[keep]
        sums["ticks"] = sums["xmit_wait_per_s"].to_numpy() * interval[keep]
    grouped = sums.groupby("level")
    # min_count=1: a level none of whose ports answered has no figure, not 0
    totals = grouped.sum(min_count=1)
    vl_wait = None
    if waits:
        vl_wait = {
            (vl, lv): value
            for vl, col in enumerate(waits)
            for lv, value in _finite(totals[col]).items()
        }
    ports = None
    if per_port:
        ports = rates.loc[:, [*PORT_COLUMNS, "xmit_wait_per_s", "interval_s"]].copy()
    return Snapshot(
        time_s=time_s,
        decision=decision,
        level_traffic=_finite(totals["xmit_bytes_per_s"]),
        level_capacity=dict(capacity),
        level_wait=_finite(totals["xmit_wait_per_s"]),
        vl_wait=vl_wait,
        ports=ports,
        interval_s=span,
        level_bytes=_finite(totals["bytes"]) if span is not None else {},
        level_wait_ticks=_finite(totals["ticks"]) if span is not None else {},
    )


def _interval(interval: npt.NDArray[np.float64]) -> float | None:
    """The sweep's interval, seconds: the median of its ports' own; None if none has one
    (the first sweep)."""
    known = interval[np.isfinite(interval) & (interval > 0)]
    return float(np.median(known)) if known.size else None


def _finite(series: pd.Series[float]) -> dict[int, float]:
    """Level -> value, for the finite values of a per-level series."""
    levels = series.index.to_numpy(dtype=np.int64).tolist()
    values = series.to_numpy(dtype=np.float64).tolist()
    return {lv: v for lv, v in zip(levels, values, strict=True) if math.isfinite(v)}
