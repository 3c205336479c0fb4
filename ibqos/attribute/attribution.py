"""Per-job, per-level traffic from per-port rates (docs/design.md §5.1, "Per-job per-level
attribution").

Level 0 is exact where a job's hosts are its own: their CA ports' transmit rates are the
job's injection.  A host that several jobs share (:attr:`MappedJob.share`) gives each job its
share of the port's rate; that part of level 0 is estimated, and reported so (``measured``).

Level *l* >= 1 is the traffic that leaves the job's level-*l* subtrees.  With minimal
routing the bytes leaving a subtree do not depend on the path they take, so the sum of the
transmit rates of the up ports of the subtree's level-*l* switches is exactly what left it,
whatever the routing.  That total is split among the jobs with hosts in the subtree
in proportion to a prior, so that per-subtree sums match the counters exactly:

    prior(job, S) = sum over the job's hosts i in S of  injection(i) * outside(i, S)

where ``outside(i, S)`` is the share of host *i*'s traffic that goes to hosts outside *S*.
When the job declares its communication pattern (its profile: ``Job.pattern``), that share
comes from the pattern's traffic matrix (:mod:`ibqos.attribute.patterns`).  Otherwise it is the
gravity model within the job, uniform all-to-all: ``(n - k) / (n - 1)`` for a job of *n*
hosts with *k* of them in *S*.  A job that is alone in a subtree gets the subtree's whole
total: that part is measured, not estimated, and is reported as such (``measured``).  The
injection in the prior is the job's share of each port, so two jobs on one host both have
weight in its subtrees, and neither is alone there.

Per-SL data counters, where a fabric has them and each job has its own SL, would make every
level measured; ibsim has none, so this version always estimates shared subtrees.

Speed.  The daemon attributes every cycle, on fabrics of tens of thousands of ports with
thousands of jobs, so the work is done on numpy arrays with one row per job port.  What
does not change from cycle to cycle is kept: the fabric's tables (built once per
:class:`Attributor`), where each key sits in the rates table (looked up again only when the
table's rows move), what depends only on one job (its ports' places, a declared pattern's
share leaving each subtree: while the job runs) and what depends on where all the jobs are
(while the jobs stay the same).  ``python -m bench.plan.bench`` measures it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.attribute.jobmap import MappedJob
from ibqos.attribute.patterns import traffic_matrix
from ibqos.attribute.tomography import RouteFit
from ibqos.errors import LabError
from ibqos.fabric.lfts import Tables
from ibqos.fabric.model import Fabric, PortKey
from ibqos.fabric.routes import Router

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class JobTraffic:
    """What one job sends across each fat-tree level.

    Attributes:
        job_id: the job.
        bytes_per_s: level -> bytes per second (0: injection by its hosts; l >= 1: leaving
            its level-l subtrees).  NaN where the counters gave no rate.
        measured: level -> share of that level's bytes/s that was measured (level 0: the
            part from hosts of its own, 1.0 unless it shares hosts; l >= 1: the part from
            subtrees the job had to itself).
    """

    job_id: str
    bytes_per_s: dict[int, float]
    measured: dict[int, float]

    @property
    def measured_share(self) -> float:
        """How much of the job's figures was measured rather than estimated: the share of
        its upper-level (l >= 1) bytes/s that was measured (1.0 when it sent nothing up),
        or the measured share of its injection (level 0) when that is smaller -- below 1
        only for a job on hosts it shares.  Level 0 is not added into the upper levels'
        share: it is measured for a job of its own hosts, and counting it would hide how
        much of the shared part was a guess."""
        upper = [(lvl, v) for lvl, v in self.bytes_per_s.items() if lvl >= 1 and np.isfinite(v)]
        total = sum(v for _, v in upper)
        share = 1.0 if total <= 0 else sum(self.measured[lvl] * v for lvl, v in upper) / total
        return min(share, self.measured.get(0, 1.0))


@dataclass
class Attribution:
    """The result of one attribution, as arrays (one row per job, in the order given).

    Attributes:
        job_ids: the jobs, one per row.
        levels: the level of each column: 0, then the uplink levels 1 .. height - 1.
        bytes_per_s: per job and level, bytes per second (as :attr:`JobTraffic.bytes_per_s`;
            NaN where the counters gave no rate).
        measured: per job and level, the share measured (as :attr:`JobTraffic.measured`).
        unattributed: level -> bytes/s of uplink traffic in subtrees where no job had any
            prior weight (other hosts, management traffic): left out of every job.
        residual: level -> with routes, how far the fitted flows are from the level's
            link counters: sum of |fitted - counted| over what they counted (0: they
            agree); empty without routes.
    """

    job_ids: tuple[str, ...]
    levels: tuple[int, ...]
    bytes_per_s: FloatArray
    measured: FloatArray
    unattributed: dict[int, float] = field(default_factory=dict)
    residual: dict[int, float] = field(default_factory=dict)

    @cached_property
    def jobs(self) -> dict[str, JobTraffic]:
        """The same figures by job id (built on first use)."""
        rates, measured = self.bytes_per_s.tolist(), self.measured.tolist()
        return {
            job_id: JobTraffic(
                job_id,
                dict(zip(self.levels, r, strict=True)),
                dict(zip(self.levels, m, strict=True)),
            )
            for job_id, r, m in zip(self.job_ids, rates, measured, strict=True)
        }

    @property
    def measured_share(self) -> FloatArray:
        """:attr:`JobTraffic.measured_share` of every job."""
        upper = np.array([lvl >= 1 for lvl in self.levels], dtype=np.bool_)
        known = np.isfinite(self.bytes_per_s) & upper
        rate = np.where(known, self.bytes_per_s, 0.0)
        total = rate.sum(axis=1)
        part = np.where(known, self.measured * rate, 0.0).sum(axis=1)
        share = np.ones(len(total))
        np.divide(part, total, out=share, where=total > 0)
        if 0 in self.levels:
            share = np.minimum(share, self.measured[:, self.levels.index(0)])
        return share


@dataclass(frozen=True)
class _Layout:
    """Where the keys sit in one rates table (reused while its key columns stay the same).

    Attributes:
        guid, port: the table's key columns.
        row_of: (node GUID, port) -> row; the last row of a repeated key.
        up_rows: per uplink level, the row of each up port; ``len(guid)`` where it has none.
    """

    guid: npt.NDArray[np.uint64]
    port: IntArray
    row_of: dict[PortKey, int]
    up_rows: dict[int, npt.NDArray[np.intp]]


@dataclass(frozen=True)
class _JobPorts:
    """One job's ports as attribution needs them, kept while the job runs.

    Attributes:
        job: the mapped job (the cache compares it by identity).
        rate_rows: each port's row in the rates table (or the NaN after the last).
        share: each port's share of its traffic that is the job's (1.0: a host of its own).
        ca: each port's CA row in the subtree tables.
        hosts: the job's size in the gravity model: its distinct node GUIDs (at least 1).
        pattern: for a job that declares a pattern, per uplink level and port, the share
            leaving the port's subtree (NaN: use gravity); empty otherwise.
    """

    job: MappedJob
    rate_rows: tuple[int, ...]
    share: tuple[float, ...]
    ca: tuple[int, ...]
    hosts: int
    pattern: dict[int, FloatArray]


@dataclass(frozen=True)
class _LevelRows:
    """One uplink level of :class:`_Rows`.

    Attributes:
        n_sub: subtree ids are 0 .. n_sub - 1.
        ok: the port rows whose subtree is known (the others take no part at this level).
        pairs: the (job, subtree) pairs of those rows, ``job * n_sub + subtree``, sorted.
        inv: for each of those rows, its pair's index in *pairs*.
        outside: for each of those rows, the share of its host's traffic leaving the
            subtree (the prior, without the injection).
    """

    n_sub: int
    ok: npt.NDArray[np.bool_]
    pairs: IntArray
    inv: IntArray
    outside: FloatArray


@dataclass(frozen=True)
class _Rows:
    """What attribution needs of the jobs' ports besides their rates, one row per (job,
    port): it depends only on the jobs and on the rates table's layout, so a cycle with
    the same jobs as the previous one reuses it.

    Attributes:
        jobs: the jobs it was built for.
        layout: the rates table layout it was built for.
        job_ids: the jobs' ids.
        job_idx: per row, the job's index.
        rate_rows: per row, its row in the rates table (or the NaN after the last).
        share: per row, the job's share of the port's traffic; None: 1.0 everywhere (no
            job shares a host).
        levels: per uplink level.
    """

    jobs: tuple[MappedJob, ...]
    layout: _Layout
    job_ids: tuple[str, ...]
    job_idx: IntArray
    rate_rows: npt.NDArray[np.intp]
    share: FloatArray | None
    levels: dict[int, _LevelRows]


class Attributor:
    """Splits measured rates among jobs on one fabric (tables built once per fabric).

    Args:
        fabric: the topology the rates were read on.

    Attributes:
        levels: the uplink levels (switch levels with a level above them).
        host_of: CA node GUID -> host name (first word of its description).
        subtree_of: per uplink level, CA node GUID -> subtree id.
        up_ports: per uplink level, the up ports of that level's switches and their
            subtree ids.
    """

    def __init__(self, fabric: Fabric, lfts: Tables | None = None) -> None:
        self.fabric = fabric
        self.routes: RouteFit | None = None
        if lfts is not None:
            try:
                self.routes = RouteFit(fabric, Router(fabric.topo, lfts))
            except LabError as err:  # tables of another fabric, or incomplete
                log.warning("attribution: %s; splitting subtree totals instead", err)
        topo = fabric.topo
        self.levels = list(range(1, fabric.height))
        cas = [(n.guid, n) for n in topo.cas() if n.guid is not None]
        self.host_of = {g: n.hostname for g, n in cas}
        # CA GUID -> row of the per-level subtree arrays; their extra last row (-1) is for
        # GUIDs the fabric does not have as CAs (a job map one cycle behind the fabric)
        self._ca_row = {g: i for i, (g, _) in enumerate(cas)}
        self.subtree_of: dict[int, dict[int, int]] = {}
        self._ca_sub: dict[int, IntArray] = {}
        self.up_ports: dict[int, tuple[list[PortKey], IntArray]] = {}
        for lvl in self.levels:
            comp = fabric.components(lvl)
            self.subtree_of[lvl] = {g: comp[n.id] for g, n in cas}
            self._ca_sub[lvl] = np.array([comp[n.id] for _, n in cas] + [-1], dtype=np.int64)
            up = [(fp.key, comp[fp.node_id]) for fp in fabric.uplinks(lvl) if fp.key is not None]
            self.up_ports[lvl] = ([k for k, _ in up], np.array([c for _, c in up], dtype=np.int64))
        self._layout: _Layout | None = None
        self._rows: _Rows | None = None
        self._ports: dict[int, _JobPorts] = {}  # by id() of the MappedJob
        self._ports_layout: _Layout | None = None

    def attribute(
        self,
        rates: pd.DataFrame,
        jobs: Sequence[MappedJob],
        sl_rates: pd.DataFrame | None = None,
        job_sl: Mapping[str, int] | None = None,
    ) -> Attribution:
        """Per job and level, the bytes/s it sends (see the module docstring).

        Args:
            rates: a rates table (``ibqos.collect.rates``): ``node_guid``, ``port`` and
                ``xmit_bytes_per_s`` are used.
            jobs: the running jobs with their ports.
            sl_rates: per-SL rates of the ports whose PMA has per-SL data counters
                (``node_guid``, ``port``, ``sl``, ``xmit_bytes_per_s``,
                ``rcv_bytes_per_s``), or None.
            job_sl: each job's SL (for *sl_rates*).
        """
        xmit, layout = self._rates(rates)
        rows = self._rows_of(tuple(jobs), layout)
        n_jobs = len(rows.job_ids)
        rate = xmit[rows.rate_rows]
        measured0 = np.ones(n_jobs)
        if rows.share is not None:  # hosts shared: each job takes its share of their ports
            rate = rate * rows.share
        level0 = _sum_by(rows.job_idx, np.nan_to_num(rate), n_jobs)
        if rows.share is not None:
            own = np.where(rows.share >= 1.0, np.nan_to_num(rate), 0.0)
            np.divide(_sum_by(rows.job_idx, own, n_jobs), level0, out=measured0, where=level0 > 0)
        unknown0 = np.bincount(rows.job_idx, weights=np.isnan(rate), minlength=n_jobs) > 0
        per_level = [np.where(unknown0, np.nan, level0)]
        measured = [measured0]
        unattributed: dict[int, float] = {}
        residual: dict[int, float] = {}
        fitted = None
        if self.routes is not None:
            try:
                fitted = self.routes.fit(rates, jobs, sl_rates, job_sl)
            except LabError as err:  # a route the tables do not have (stale tables)
                log.warning("attribution: %s; splitting subtree totals instead", err)
                self.routes = None
        if fitted is not None:
            for lvl, lf in fitted.items():
                per_level.append(lf.bytes_per_s)
                measured.append(lf.measured)
                unattributed[lvl] = lf.unattributed
                residual[lvl] = lf.residual
        for lvl, lr in rows.levels.items() if fitted is None else ():
            up_sub = self.up_ports[lvl][1]
            up_rate = xmit[layout.up_rows[lvl]]
            total = _sum_by(up_sub, np.nan_to_num(up_rate), lr.n_sub)
            blind = np.bincount(up_sub, weights=np.isnan(up_rate), minlength=lr.n_sub) > 0
            b, m, unattributed[lvl] = _split(
                lr.pairs, lr.inv, rate[lr.ok] * lr.outside, total, blind, n_jobs, lr.n_sub
            )
            per_level.append(b)
            measured.append(m)
        return Attribution(
            rows.job_ids,
            (0, *self.levels),
            np.column_stack(per_level) if n_jobs else np.zeros((0, len(per_level))),
            np.column_stack(measured) if n_jobs else np.zeros((0, len(measured))),
            unattributed,
            residual,
        )

    def _rows_of(self, jobs: tuple[MappedJob, ...], layout: _Layout) -> _Rows:
        """The port rows of *jobs*: the last cycle's when the jobs and the rates table's
        layout are the same (the tuples compare by identity first: next to free)."""
        rows = self._rows
        if rows is None or rows.layout is not layout or rows.jobs != jobs:
            rows = self._rows = self._build_rows(jobs, layout)
        return rows

    def _build_rows(self, jobs: tuple[MappedJob, ...], layout: _Layout) -> _Rows:
        if self._ports_layout is not layout:  # rows in the rates table moved: start over
            self._ports, self._ports_layout = {}, layout
        entries: list[_JobPorts] = []
        cache: dict[int, _JobPorts] = {}
        for mj in jobs:
            # by identity: the job mapper hands back the same MappedJob while a job runs,
            # and hashing every job's ports each cycle would cost about what it saves
            entry = self._ports.get(id(mj))
            if entry is None or entry.job is not mj:
                entry = self._job_ports(mj, layout)
            cache[id(mj)] = entry
            entries.append(entry)
        self._ports = cache  # ended jobs drop out
        # one row per (job, port): the job's index, the port's row in the rates table and
        # its CA's row in the subtree tables
        counts = np.array([len(e.ca) for e in entries], dtype=np.int64)
        n_rows = int(counts.sum())
        n_jobs = len(jobs)
        job_idx = np.repeat(np.arange(n_jobs, dtype=np.int64), counts)
        rate_rows = np.fromiter(chain.from_iterable(e.rate_rows for e in entries), np.intp, n_rows)
        share = None
        if any(e.job.share for e in entries):
            share = np.fromiter(chain.from_iterable(e.share for e in entries), np.float64, n_rows)
        ca = np.fromiter(chain.from_iterable(e.ca for e in entries), np.intp, n_rows)
        hosts = np.array([e.hosts for e in entries], dtype=np.float64)
        starts = (np.cumsum(counts) - counts).tolist()
        patterns = [(starts[j], e.pattern) for j, e in enumerate(entries) if e.pattern]
        levels: dict[int, _LevelRows] = {}
        for lvl in self.levels:
            sub = self._ca_sub[lvl][ca]
            up_sub = self.up_ports[lvl][1]
            n_sub = int(max(up_sub.max(initial=-1), sub.max(initial=-1))) + 1
            ok = sub >= 0
            pair = job_idx[ok] * n_sub + sub[ok]  # (job, subtree) as one key
            pairs, inv, k = np.unique(pair, return_inverse=True, return_counts=True)
            outside = np.zeros(n_rows)
            n = hosts[job_idx[ok]]
            outside[ok] = np.where(n > 1, (n - k[inv]) / np.maximum(n - 1, 1), 0.0)  # gravity
            for start, fractions in patterns:
                frac = fractions[lvl]
                has = np.flatnonzero(~np.isnan(frac))
                outside[start + has] = frac[has]
            levels[lvl] = _LevelRows(n_sub, ok, pairs, inv, outside[ok])
        return _Rows(jobs, layout, tuple(mj.id for mj in jobs), job_idx, rate_rows, share, levels)

    def _job_ports(self, mj: MappedJob, layout: _Layout) -> _JobPorts:
        none, n_ca = len(layout.guid), len(self._ca_row)
        row_of, ca_row = layout.row_of, self._ca_row
        ca = tuple(ca_row.get(k[0], n_ca) for k in mj.ports)
        return _JobPorts(
            mj,
            tuple(row_of.get(k, none) for k in mj.ports),
            mj.share or (1.0,) * len(mj.ports),
            ca,
            # the gravity model counts the job's nodes (CAs), not its ports
            max(len({k[0] for k in mj.ports}), 1),
            self._pattern_outside(mj, ca) if mj.job.pattern else {},
        )

    def _rates(self, rates: pd.DataFrame) -> tuple[FloatArray, _Layout]:
        """The transmit rates with a NaN appended, and where each key sits in *rates*.

        The daemon's rates tables keep their rows in sweep order, so the layout of the
        previous table is checked (two array comparisons) and reused.
        """
        guid = rates["node_guid"].to_numpy(np.uint64)
        port = rates["port"].to_numpy(np.int64)
        xmit = np.append(rates["xmit_bytes_per_s"].to_numpy(np.float64), np.nan)
        layout = self._layout
        if (
            layout is None
            or not np.array_equal(layout.guid, guid)
            or not np.array_equal(layout.port, port)
        ):
            keys = zip(guid.tolist(), port.tolist(), strict=True)
            row_of = dict(zip(keys, range(len(guid)), strict=True))
            none = len(guid)
            up_rows = {
                lvl: np.array([row_of.get(k, none) for k in self.up_ports[lvl][0]], dtype=np.intp)
                for lvl in self.levels
            }
            layout = self._layout = _Layout(guid.copy(), port.copy(), row_of, up_rows)
        return xmit, layout

    def _pattern_outside(self, mj: MappedJob, ca: Sequence[int]) -> dict[int, FloatArray]:
        """Per level, per port of *mj* (whose CAs' rows are *ca*): the share of its host's
        traffic (by the job's pattern) that goes to hosts outside its subtree; NaN for a
        port whose host is not one of the job's nodes."""
        # only the matrix's shape matters here; a pattern without a rate gets one
        shaped = mj.job if mj.job.has_rates else replace(mj.job, rate_bytes_per_s=1.0)
        m = traffic_matrix(shaped)
        nodes = len(mj.job.nodes)
        index = {h: i for i, h in enumerate(mj.job.nodes)}
        host = np.array([index.get(self.host_of.get(k[0], ""), -1) for k in mj.ports], dtype=int)
        known = host >= 0
        sent = m.sum(axis=1)
        out: dict[int, FloatArray] = {}
        for lvl in self.levels:
            sub = self._ca_sub[lvl][np.array(ca, dtype=np.intp)]
            host_sub = np.full(nodes, -1, dtype=np.int64)
            host_sub[host[known]] = sub[known]
            cross = (host_sub[:, None] != host_sub[None, :]) & (host_sub[None, :] >= 0)
            frac = np.divide((m * cross).sum(axis=1), sent, out=np.zeros(nodes), where=sent > 0)
            share = np.full(len(mj.ports), np.nan)
            share[known] = frac[host[known]]
            out[lvl] = share
        return out


def _sum_by(index: IntArray, weights: FloatArray, n: int) -> FloatArray:
    """Sum of *weights* by *index* (0 .. n - 1), as floats even when there is nothing to
    sum (``np.bincount`` of no values gives integers, which broke a cycle without jobs)."""
    return np.asarray(np.bincount(index, weights=weights, minlength=n), dtype=np.float64)


def _split(
    pairs: IntArray,
    inv: IntArray,
    weight: FloatArray,
    total: FloatArray,
    blind: npt.NDArray[np.bool_],
    n_jobs: int,
    n_sub: int,
) -> tuple[FloatArray, FloatArray, float]:
    """One level: split each subtree's uplink total among its jobs by their priors.

    Args:
        pairs: the (job, subtree) pairs present, as ``job * n_sub + subtree``, sorted.
        inv: for each port row with a known subtree, its pair's index in *uniq*.
        weight: for the same rows, injection x share leaving the subtree.
        total: per subtree, bytes/s its uplinks sent.
        blind: per subtree, some uplink gave no rate.

    Returns per job the bytes/s and the measured share, and the bytes/s no job took.
    """
    pj, ps = pairs // n_sub, pairs % n_sub
    prior = _sum_by(inv, np.nan_to_num(weight), len(pairs))
    weight_sum = _sum_by(ps, prior, n_sub)
    share = np.divide(prior, weight_sum[ps], out=np.zeros_like(prior), where=weight_sum[ps] > 0)
    part = share * total[ps]
    part = np.where(blind[ps], np.nan, part)  # an up port without a rate: unknown
    jobs_in = np.bincount(ps, weights=prior > 0, minlength=n_sub)
    alone = (jobs_in[ps] == 1) & (prior > 0)
    got = _sum_by(pj, np.nan_to_num(part), n_jobs)
    unknown = np.bincount(pj, weights=np.isnan(part), minlength=n_jobs) > 0
    mine = _sum_by(pj, np.where(alone, np.nan_to_num(part), 0.0), n_jobs)
    measured = np.divide(mine, got, out=np.ones(n_jobs), where=got > 0)
    unclaimed = float(total[(weight_sum == 0) & ~blind].sum())
    return np.where(unknown, np.nan, got), measured, unclaimed
