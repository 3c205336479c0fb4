"""Byte counters beside the rate gauges: what crossed each level, lane, job and port.

The snapshot's gauges are rates of the last sweep: a scrape that is missed loses that
sweep, and PromQL's ``rate()`` cannot be used on them.  :class:`Totals` adds each fresh
snapshot's rates times the interval they cover (:attr:`Snapshot.interval_s`) into
counters that only go up, as Prometheus expects of a ``_total``: a scrape that comes late
still sees every byte, and ``rate(..._bytes_total[5m])`` averages over any window.

They are reset-safe by construction: they are sums of non-negative amounts (a rate is
never negative: :mod:`ibqos.collect.rates` takes a counter that went down as reset, and
its new value as the delta), so a switch's counter reset or OpenSM's PerfMgr clearing
counters never makes them go down.  Unknown rates (NaN) add nothing.  They start at 0
when the agent starts (Prometheus takes that as a counter reset).

What is not counted: a cycle that reuses the last rates (a job event), a sweep that
reached too few ports (its rates are set aside, ``collect.min_coverage``), and a cycle
that failed before its snapshot was published.  Their intervals are missing from the
counters, as they are from the gauges.

A job's series exist while it runs (its bytes since the agent first saw it); lanes,
levels and ports keep theirs.  Units: bytes, XmitWait ticks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, Metric

from ibqos.metrics.snapshot import Snapshot

__all__ = ["Totals", "TotalsView", "counter_families"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class TotalsView:
    """The counters as of one snapshot (a copy: later snapshots do not change it).

    Attributes:
        level_bytes: level -> bytes sent across it (CA ports at 0, uplinks above).
        level_wait_ticks: level -> PortXmitWait ticks of its ports.
        lane_bytes: (VL, level) -> bytes of the lane's jobs at the level.
        job_bytes: (job id, level) -> bytes of the running job at the level.
        port_bytes: (node GUID, port, level) -> (bytes sent, bytes received); empty
            unless ``metrics.per_port``.
    """

    level_bytes: Mapping[int, float] = field(default_factory=dict)
    level_wait_ticks: Mapping[int, float] = field(default_factory=dict)
    lane_bytes: Mapping[tuple[int, int], float] = field(default_factory=dict)
    job_bytes: Mapping[tuple[str, int], float] = field(default_factory=dict)
    port_bytes: Mapping[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)


class Totals:
    """Adds each snapshot into the counters (thread-safe; one per agent)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._level: dict[int, float] = {}
        self._wait: dict[int, float] = {}
        self._lane: dict[tuple[int, int], float] = {}
        self._job: dict[tuple[str, int], float] = {}
        self._port: dict[tuple[int, int, int], tuple[float, float]] = {}

    def add(self, snap: Snapshot) -> TotalsView:
        """Add *snap*'s bytes (if it comes from a fresh sweep) and return the counters."""
        with self._lock:
            running = {job.id for job in snap.decision.jobs}
            # an ended job's counters go with its other series: job ids are unbounded
            self._job = {k: v for k, v in self._job.items() if k[0] in running}
            dt = snap.interval_s
            for job in snap.decision.jobs:
                for level, fig in job.levels.items():
                    added = fig.bytes_per_s * dt if dt is not None else 0.0
                    _add(self._job, (job.id, level), added)
            if dt is not None:
                self._add_fresh(snap, dt)
            elif snap.ports is None:
                self._port = {}
            return TotalsView(
                dict(self._level),
                dict(self._wait),
                dict(self._lane),
                dict(self._job),
                dict(self._port),
            )

    def _add_fresh(self, snap: Snapshot, dt: float) -> None:
        for level, amount in snap.level_bytes.items():
            _add(self._level, level, amount)
        for level, amount in snap.level_wait_ticks.items():
            _add(self._wait, level, amount)
        tables = snap.decision.plan.tables
        if tables is not None:  # lanes are ibqos's only when it writes SL2VL
            for job in snap.decision.jobs:
                vl = tables.sl_to_vl[job.sl]
                for level, fig in job.levels.items():
                    _add(self._lane, (vl, level), fig.bytes_per_s * dt)
        if snap.ports is None:  # per-port series are off
            self._port = {}
        else:
            ports = snap.ports
            keys = zip(
                ports["node_guid"].tolist(),
                ports["port"].tolist(),
                ports["level"].tolist(),
                strict=True,
            )
            span = ports["interval_s"].tolist()
            sent = (ports["xmit_bytes_per_s"] * ports["interval_s"]).tolist()
            got = (ports["rcv_bytes_per_s"] * ports["interval_s"]).tolist()
            for key, s, x, r in zip(keys, span, sent, got, strict=True):
                old = self._port.get(key, (0.0, 0.0))
                if math.isfinite(s):  # a port's first reading: known, nothing yet
                    x = x if math.isfinite(x) and x > 0 else 0.0
                    r = r if math.isfinite(r) and r > 0 else 0.0
                    self._port[key] = (old[0] + x, old[1] + r)
                else:
                    self._port[key] = old


def _add(into: dict[K, float], key: K, amount: float) -> None:
    """Add *amount* to *into[key]* (starting at 0); unknown or negative amounts add 0."""
    ok = math.isfinite(amount) and amount > 0
    into[key] = into.get(key, 0.0) + (amount if ok else 0.0)


def counter_families(view: TotalsView) -> Iterator[Metric]:
    """The counters as metric families (``docs/metrics.md``, "Counters")."""
    level = CounterMetricFamily(
        "ibqos_level_traffic_bytes",
        "Bytes sent across the fat-tree level since the agent started: by CA ports at"
        " level 0, up by the level's switch uplinks above (rate() of it is the level's"
        " traffic).",
        labels=["level"],
    )
    for lv, value in sorted(view.level_bytes.items()):
        level.add_metric([str(lv)], value)
    wait = CounterMetricFamily(
        "ibqos_level_xmit_wait_ticks",
        "PortXmitWait ticks of the level's ports since the agent started.",
        labels=["level"],
    )
    for lv, value in sorted(view.level_wait_ticks.items()):
        wait.add_metric([str(lv)], value)
    lane = CounterMetricFamily(
        "ibqos_lane_traffic_bytes",
        "Bytes of the lane's jobs at the fat-tree level since the agent started (each"
        " job counted on the lane it was on at each sweep).",
        labels=["vl", "level"],
    )
    for (vl, lv), value in sorted(view.lane_bytes.items()):
        lane.add_metric([str(vl), str(lv)], value)
    job = CounterMetricFamily(
        "ibqos_job_traffic_bytes",
        "Bytes of the running job at the fat-tree level since the agent first saw it"
        " (level 0 measured, upper levels attributed).",
        labels=["job_id", "level"],
    )
    for (jid, lv), value in sorted(view.job_bytes.items()):
        job.add_metric([jid, str(lv)], value)
    yield from (level, wait)
    if view.lane_bytes:  # none while the routing engine owns SL2VL, as the lane gauges
        yield lane
    yield job
    if view.port_bytes:
        labels = ["node_guid", "port", "level"]
        sent = CounterMetricFamily(
            "ibqos_port_transmit_bytes",
            "Bytes the port sent since the agent started (PortXmitData).",
            labels=labels,
        )
        got = CounterMetricFamily(
            "ibqos_port_receive_bytes",
            "Bytes the port received since the agent started (PortRcvData).",
            labels=labels,
        )
        for (guid, port, lv), (x, r) in view.port_bytes.items():
            key = [f"0x{guid:016x}", str(port), str(lv)]
            sent.add_metric(key, x)
            got.add_metric(key, r)
        yield from (sent, got)
