"""The snapshot as Prometheus metric families, made at scrape time (``docs/metrics.md``).

:class:`SnapshotCollector` is a custom collector: every scrape yields families built from
the latest :class:`~ibqos.metrics.snapshot.Snapshot` only, so a job that ended is simply
not in the next scrape (no stale label sets to remember and delete).  The families of one
snapshot are built once and served to every scrape until the next snapshot.

Beside each rate gauge, a byte counter (:mod:`ibqos.metrics.totals`) adds up what the
snapshots measured, for ``rate()`` and for scrapes that come late.

Label sets stay bounded: levels, lanes, SLs and classes are small; jobs are one set per
running job; ports only with ``per_port``.  Unknown values (NaN) are left out.

Speed.  prometheus-client formats about 80k samples a second here (sorting and escaping
every label set of every sample), so 5k jobs on a 50k-port fabric (80k series) took a
second per scrape.  The snapshot's families are simple (gauges, fixed label names), so
:func:`exposition` writes their text format directly, once per snapshot, byte for byte as
``generate_latest`` would (a test holds the two equal), and the endpoint serves those
bytes to every scrape until the next snapshot.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ibqos.config.classes import CLASSES
from ibqos.metrics.snapshot import Snapshot
from ibqos.metrics.totals import Totals, TotalsView, counter_families
from ibqos.plan.output import lane_weights

__all__ = ["SnapshotCollector", "exposition"]

#: prometheus-client's float formatting (Go's), so the bytes match ``generate_latest``
_number = cast(Callable[[float], str], floatToGoString)


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class SnapshotCollector(Collector):
    """Serves the latest snapshot; :meth:`publish` swaps in a new one (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._totals = Totals()
        self._view = TotalsView()
        self._families: list[Metric] | None = None
        self._text: bytes | None = None
        self._om_text: dict[str, bytes] = {}

    def publish(self, snapshot: Snapshot) -> None:
        """Serve *snapshot* from the next scrape on, and add its bytes to the counters."""
        view = self._totals.add(snapshot)  # in the publisher's thread: a few ms
        with self._lock:
            self._snapshot, self._view = snapshot, view
            self._families, self._text = None, None
            self._om_text = {}

    def text(self) -> bytes:
        """The snapshot's families in the text format (b"" before the first snapshot)."""
        with self._lock:
            snapshot, text = self._snapshot, self._text
        if text is not None or snapshot is None:
            return text or b""
        text = exposition(self._built())
        with self._lock:
            if self._snapshot is snapshot:
                self._text = text
        return text

    def encoded(self, encoder: Callable[[Collector], bytes], key: str) -> bytes:
        """The snapshot's families as *encoder* writes them (OpenMetrics: the endpoint's
        slow path, on request), its ``# EOF`` line left out; once per snapshot and *key*
        (the content type)."""
        with self._lock:
            snapshot, text = self._snapshot, self._om_text.get(key)
        if text is not None or snapshot is None:
            return text or b""
        text = encoder(_Fixed(self._built())).removesuffix(b"# EOF\n")
        with self._lock:
            if self._snapshot is snapshot:
                self._om_text[key] = text
        return text

    def describe(self) -> Iterable[Metric]:
        # no up-front description: the families depend on the snapshot (and registering
        # must not call collect() before there is one)
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._built()

    def _built(self) -> list[Metric]:
        """The families of the current snapshot, built once per snapshot.

        Built and rendered outside the lock, so publish() never waits for a scrape (~1 s
        at 80k series); two scrapes at once may both build, and get the same families.
        """
        with self._lock:
            snapshot, built, view = self._snapshot, self._families, self._view
        if built is None and snapshot is not None:
            built = [*families(snapshot), *counter_families(view)]
            with self._lock:
                if self._snapshot is snapshot:
                    self._families = built
        return built or []


class _Fixed(Collector):
    """Families already built, for an encoder that takes a collector."""

    def __init__(self, built: list[Metric]) -> None:
        self._built = built

    def collect(self) -> Iterable[Metric]:
        return self._built


def exposition(metrics: Iterable[Metric]) -> bytes:
    """Gauge and counter families in the Prometheus text format (0.0.4), as
    ``generate_latest`` writes them: HELP and TYPE lines (a counter's named with its
    ``_total``), then one line per sample with its labels sorted by name.  Counters here
    have no ``_created`` samples."""
    out: list[str] = []
    escaped: dict[str, str] = {}  # label values repeat across families (job ids, levels)

    def esc(value: str) -> str:
        e = escaped.get(value)
        if e is None:
            e = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
            escaped[value] = e
        return e

    for metric in metrics:
        if metric.type not in ("gauge", "counter"):
            raise ValueError(f"{metric.name}: only gauges and counters are rendered here")
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        name = f"{metric.name}_total" if metric.type == "counter" else metric.name
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n")
        names = sorted(metric.samples[0].labels) if metric.samples else []
        for sample in metric.samples:
            labels = sample.labels
            if names:
                pairs = ",".join([f'{k}="{esc(labels[k])}"' for k in names])
                out.append(f"{sample.name}{{{pairs}}} {_number(sample.value)}\n")
            else:
                out.append(f"{sample.name} {_number(sample.value)}\n")
    return "".join(out).encode()


def families(snap: Snapshot) -> list[Metric]:
    """Every snapshot family of *snap* (``docs/metrics.md``, "The snapshot")."""
    out: list[Metric] = [
        GaugeMetricFamily(
            "ibqos_snapshot_timestamp_seconds",
            "UNIX time of the decision cycle the snapshot series come from.",
            value=snap.time_s,
        )
    ]
    out += _levels(snap)
    out += _lanes(snap)
    out += _jobs(snap)
    out += _sharing(snap)
    if snap.ports is not None:
        out += _ports(snap)
    return out


def _levels(snap: Snapshot) -> list[Metric]:
    traffic = _gauge(
        "ibqos_level_traffic_bytes_per_second",
        "Measured traffic crossing the fat-tree level: sent by CA ports at level 0, sent up"
        " by the level's switch uplinks above, bytes per second.",
        ["level"],
    )
    capacity = _gauge(
        "ibqos_level_capacity_bytes_per_second",
        "Capacity of the level's ports (CA ports at 0, switch uplinks above), one direction,"
        " bytes per second.",
        ["level"],
    )
    unattributed = _gauge(
        "ibqos_level_unattributed_bytes_per_second",
        "Uplink traffic at the level that no running job accounts for, bytes per second.",
        ["level"],
    )
    residual = _gauge(
        "ibqos_level_attribution_residual_ratio",
        "How far the jobs' flows fitted through OpenSM's routes are from the level's link"
        " counters: sum of |fitted - counted| over what they counted (absent without routes).",
        ["level"],
    )
    wait = _gauge(
        "ibqos_level_xmit_wait_ticks_per_second",
        "PortXmitWait of the level's ports summed: ticks per second in which they had data"
        " to send but no credits.",
        ["level"],
    )
    for level, value in sorted(snap.level_traffic.items()):
        traffic.add_metric([str(level)], value)
    for level, value in sorted(snap.level_capacity.items()):
        capacity.add_metric([str(level)], value)
    for level, value in sorted(snap.decision.unattributed.items()):
        if math.isfinite(value):
            unattributed.add_metric([str(level)], value)
    for level, value in sorted(snap.decision.residual.items()):
        if math.isfinite(value):
            residual.add_metric([str(level)], value)
    for level, value in sorted(snap.level_wait.items()):
        wait.add_metric([str(level)], value)
    return [traffic, capacity, unattributed, residual, wait]


def _lanes(snap: Snapshot) -> list[Metric]:
    tables = snap.decision.plan.tables
    if tables is None:  # the routing engine owns SL2VL: no lanes of ibqos's
        return []
    traffic = _gauge(
        "ibqos_lane_traffic_bytes_per_second",
        "Traffic of the lane's jobs at the fat-tree level (their attributed traffic summed),"
        " bytes per second.",
        ["vl", "level"],
    )
    util = _gauge(
        "ibqos_lane_utilization_ratio",
        "Traffic of the lane's jobs at the level over the level's capacity.",
        ["vl", "level"],
    )
    wait = _gauge(
        "ibqos_lane_xmit_wait_ticks_per_second",
        "Congestion of the lane at the level, transmit-wait ticks per second:"
        ' source="vl" is PortVLXmitWait summed over the level\'s ports, source="port" the'
        " level's port-wide PortXmitWait split among lanes by their share of its traffic.",
        ["vl", "level", "source"],
    )
    jobs = _gauge("ibqos_lane_jobs", "Running jobs on the lane.", ["vl"])
    by_class = _gauge(
        "ibqos_lane_class_jobs", "Running jobs on the lane by intensity class.", ["vl", "class"]
    )
    sls = _gauge("ibqos_lane_sls", "Job SLs mapped to the lane.", ["vl"])
    weight = _gauge(
        "ibqos_lane_weight",
        "The lane's VLArbLow weight per arbitration round, in 64-byte units (sum of its entries).",
        ["vl"],
    )
    intensity = _gauge(
        "ibqos_lane_intensity_ratio",
        "The lane's intensity as planned: its most intense job's smoothed utilization.",
        ["vl"],
    )
    sl_vl = _gauge("ibqos_sl_vl", "The VL each SL maps to (the value is the VL).", ["sl"])

    lane_of_sl = dict(enumerate(tables.sl_to_vl))
    job_sls = {job.sl for job in snap.decision.jobs}
    per_level: dict[tuple[int, int], float] = {}
    count: dict[int, int] = {}
    count_cls: dict[tuple[int, str], int] = {}
    for job in snap.decision.jobs:
        vl = lane_of_sl[job.sl]
        count[vl] = count.get(vl, 0) + 1
        count_cls[vl, job.cls] = count_cls.get((vl, job.cls), 0) + 1
        for level, fig in job.levels.items():
            if math.isfinite(fig.bytes_per_s):
                per_level[vl, level] = per_level.get((vl, level), 0.0) + fig.bytes_per_s
    weights = lane_weights(tables)
    for lane in sorted(tables.lanes, key=lambda lane: lane.vl):
        vl_label = str(lane.vl)
        jobs.add_metric([vl_label], count.get(lane.vl, 0))
        for cls in CLASSES:
            by_class.add_metric([vl_label, cls], count_cls.get((lane.vl, cls), 0))
        sls.add_metric([vl_label], sum(1 for sl in lane.sls if sl in job_sls))
        weight.add_metric([vl_label], weights.get(lane.vl, 0))
        intensity.add_metric([vl_label], lane.intensity)
        for level in sorted({lv for (v, lv) in per_level if v == lane.vl}):
            value = per_level[lane.vl, level]
            traffic.add_metric([vl_label, str(level)], value)
            cap = snap.level_capacity.get(level, 0.0)
            if cap > 0:
                util.add_metric([vl_label, str(level)], value / cap)
        for level, ticks, source in _lane_waits(snap, lane.vl, per_level):
            wait.add_metric([vl_label, str(level), source], ticks)
    for sl, vl_of in sorted(lane_of_sl.items()):
        sl_vl.add_metric([str(sl)], vl_of)
    return [traffic, util, wait, jobs, by_class, sls, weight, intensity, sl_vl]


def _lane_waits(
    snap: Snapshot, vl: int, per_level: dict[tuple[int, int], float]
) -> Iterator[tuple[int, float, str]]:
    """(level, ticks/s, source) of one lane: measured per VL where read, else the level's
    port-wide wait split by the lane's share of the level's measured traffic."""
    if snap.vl_wait is not None:
        for (v, level), ticks in sorted(snap.vl_wait.items()):
            if v == vl:
                yield level, ticks, "vl"
        return
    for level, ticks in sorted(snap.level_wait.items()):
        total = snap.level_traffic.get(level, 0.0)
        share = per_level.get((vl, level), 0.0) / total if total > 0 else 0.0
        yield level, ticks * min(share, 1.0), "port"


def _jobs(snap: Snapshot) -> list[Metric]:
    info = _gauge(
        "ibqos_job_info", "A running job (always 1), with its name and user.", _JOB_INFO_LABELS
    )
    nodes = _gauge("ibqos_job_nodes", "The job's hosts found on the fabric.", ["job_id"])
    traffic = _gauge(
        "ibqos_job_traffic_bytes_per_second",
        "The job's traffic at the fat-tree level (level 0 measured, upper levels attributed),"
        " bytes per second.",
        ["job_id", "level"],
    )
    avail = _gauge(
        "ibqos_job_available_bytes_per_second",
        "Uplink capacity of the level's subtrees holding the job's nodes, bytes per second.",
        ["job_id", "level"],
    )
    util = _gauge(
        "ibqos_job_utilization_ratio",
        "The job's traffic at the level over its available bandwidth there.",
        ["job_id", "level"],
    )
    intensity = _gauge(
        "ibqos_job_intensity_ratio",
        "The job's smoothed intensity: its highest utilization over levels >= 1.",
        ["job_id"],
    )
    cls = _gauge(
        "ibqos_job_class", "The job's intensity class as the plan uses it (always 1).", _CLS
    )
    sl = _gauge("ibqos_job_sl", "The job's service level.", ["job_id"])
    vl = _gauge("ibqos_job_vl", "The virtual lane the job's SL maps to.", ["job_id"])
    share = _gauge(
        "ibqos_job_measured_share_ratio",
        "Share of the job's traffic that was measured (upper levels; injection too when it"
        " shares hosts); the rest was estimated.",
        ["job_id"],
    )
    for job in snap.decision.jobs:
        jid = job.id
        info.add_metric([jid, job.name, job.user or ""], 1)
        nodes.add_metric([jid], len(job.nodes))
        for level, fig in sorted(job.levels.items()):
            lv = str(level)
            if math.isfinite(fig.bytes_per_s):
                traffic.add_metric([jid, lv], fig.bytes_per_s)
            if fig.avail_bytes_per_s > 0:
                avail.add_metric([jid, lv], fig.avail_bytes_per_s)
            if fig.util is not None:
                util.add_metric([jid, lv], fig.util)
        if job.intensity is not None:
            intensity.add_metric([jid], job.intensity)
        cls.add_metric([jid, job.cls], 1)
        sl.add_metric([jid], job.sl)
        if job.vl is not None:
            vl.add_metric([jid], job.vl)
        share.add_metric([jid], job.measured_share)
    return [info, nodes, traffic, avail, util, intensity, cls, sl, vl, share]


def _sharing(snap: Snapshot) -> list[Metric]:
    """How jobs share the fat tree (``ibqos.attribute.sharing``): scheduler advice."""
    others = _gauge(
        "ibqos_job_sharing_jobs",
        "Other running jobs with nodes in the level's subtrees holding the job (level 1:"
        " its leaf switches): jobs whose traffic meets its own on that level's uplinks.",
        ["job_id", "level"],
    )
    subtrees = _gauge(
        "ibqos_job_subtrees",
        "The level's subtrees (level 1: leaf switches) holding the job's nodes.",
        ["job_id", "level"],
    )
    spread = _gauge(
        "ibqos_job_fragmentation_ratio",
        "Leaf switches the job spans over the fewest that could hold its nodes (1 = compact).",
        ["job_id"],
    )
    for job_id, s in snap.decision.sharing.get().items():
        for level in sorted(s.sharing):
            others.add_metric([job_id, str(level)], s.sharing[level])
            subtrees.add_metric([job_id, str(level)], s.subtrees[level])
        spread.add_metric([job_id], s.fragmentation)
    return [others, subtrees, spread]


_JOB_INFO_LABELS = ("job_id", "name", "user")
_CLS = ("job_id", "class")
_PORT_LABELS = ("node_guid", "port", "level")


def _ports(snap: Snapshot) -> list[Metric]:
    ports = snap.ports
    assert ports is not None
    out: list[Metric] = []
    labels = [
        (f"0x{guid:016x}", str(port), str(level))
        for guid, port, level in zip(
            ports["node_guid"].tolist(),
            ports["port"].tolist(),
            ports["level"].tolist(),
            strict=True,
        )
    ]
    for col, name, doc in _PORT_SERIES:
        family = _gauge(name, doc, _PORT_LABELS)
        values: list[Any] = ports[col].tolist()
        for key, value in zip(labels, values, strict=True):
            if math.isfinite(value):
                family.add_metric(key, value)
        out.append(family)
    return out


_PORT_SERIES = (
    (
        "xmit_bytes_per_s",
        "ibqos_port_transmit_bytes_per_second",
        "Bytes per second the port sent (PortXmitData).",
    ),
    (
        "rcv_bytes_per_s",
        "ibqos_port_receive_bytes_per_second",
        "Bytes per second the port received (PortRcvData).",
    ),
    (
        "xmit_wait_per_s",
        "ibqos_port_xmit_wait_ticks_per_second",
        "PortXmitWait ticks per second of the port.",
    ),
)
