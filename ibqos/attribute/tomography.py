"""Each job's traffic on every link, fitted to the counters through OpenSM's routes.

The subtree split (:mod:`ibqos.attribute.attribution`) uses one figure per subtree: the sum
of its uplinks.  The fabric measures far more: every switch port's transmit rate, and every
host's transmit and receive rates (exact per job, a host being its job's).  OpenSM's
forwarding tables (LFTs) say which links carry the traffic from a leaf switch to a
destination port.  This module fits per-job traffic to all of those measurements at once.

Unknowns.  ``x[L, d]``: bytes/s that the job's hosts on leaf switch *L* send to the job's
host port *d*, for every leaf holding the job's hosts.  That is the finest grain the
counters can tell apart: LFTs route by destination, so every source on one leaf takes the
same path to *d*.  Each unknown crosses a known list of switch-to-switch links.

Measurements, each a linear equation in the unknowns:

- per job and leaf, what its hosts there transmit: ``sum over d of x[L, d]``;
- per host port, what it receives: ``sum over L of x[L, d]`` (a host receives only from its
  own job's hosts);
- per switch-to-switch link, what its transmitting port counted: the sum of the unknowns
  routed over it (per SL, ``sum over the SL's jobs``, where the PMA has per-SL counters;
  per job, where the last sweeps taught each job's share of the link:
  :mod:`ibqos.attribute.shares`).

Method: iterative proportional fitting (IPF) from a prior.  The prior is the job's declared
pattern, else gravity within the job (a host sends to each peer in proportion to what the
peer receives).  Each pass scales the unknowns of every equation, family by family (sources,
destinations, then the links level by level and direction), so that the equation holds.
IPF was chosen over least squares (tomogravity) because:

- every measurement is a sum of non-negative flows, and IPF keeps them non-negative and
  keeps a structural zero of the prior (a ring's non-neighbours) at zero;
- its result is the flows closest to the prior (in Kullback-Leibler divergence) that meet
  every measurement, the maximum-entropy reading of "as the prior says, unless the
  counters say otherwise";
- a pass is a handful of ``bincount`` calls over the unknowns: no matrix to factor, and it
  starts from the last cycle's fit, so a steady cycle needs few passes.

Counters that do not quite agree (sweep skew, traffic of hosts outside any job) leave a
residual; the fit does a bounded number of passes and reports the residual per level.

What is measured rather than estimated: a link whose unknowns all belong to one job (or to
one SL's jobs, with per-SL counters, or one job's learnt share) gives that job's traffic on
it exactly.  A job's
level-*l* traffic crosses one up link out of its level-*l* subtree and one down link into
the destination's; the part of it on such an exclusive link is reported as measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.attribute.flows import FlowIndex, Pairs, compact, distinct, sums
from ibqos.attribute.jobmap import MappedJob
from ibqos.attribute.shares import LinkShares
from ibqos.fabric.model import Fabric, PortKey
from ibqos.fabric.routes import Router

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: SLs the per-SL counters have.
SL_COUNT = 16
#: Passes of the fit at most per cycle: from the prior, and from the last cycle's fit (which
#: already meets last cycle's counters: a few passes follow the new ones).
MAX_PASSES = 20
WARM_PASSES = 8
#: ... when at least this share of the unknowns has a last fit.
WARM_SHARE = 0.9
#: The fit stops when no family of equations (sources, destinations, one class of links)
#: is off by more than this share of what it measured.
TOLERANCE = 1e-3
#: Share of the prior mixed into the last cycle's fit when starting from it, so that an
#: unknown a zero counter had pinned to 0 can grow again.
PRIOR_MIX = 0.02


@dataclass(frozen=True)
class LevelFit:
    """One uplink level's fitted figures.

    Attributes:
        bytes_per_s: per job, bytes per second leaving its level-*l* subtrees (NaN where a
            link it crosses gave no rate, or one of its hosts did not answer).
        measured: per job, the share of that traffic on links only it (or its SL) used.
        residual: sum of |fitted - counted| over the level's links (up out of the level
            and down into it) over what they counted (0 when they counted nothing).
        unattributed: bytes/s the level's up links counted beyond the jobs' fitted flows.
    """

    bytes_per_s: FloatArray
    measured: FloatArray
    residual: float
    unattributed: float


class RouteFit(FlowIndex):
    """Fits per-job link traffic on one fabric with one set of forwarding tables.

    Args:
        fabric: the fabric the rates are read on.
        router: OpenSM's forwarding tables over the same topology.
    """

    def __init__(self, fabric: Fabric, router: Router) -> None:
        super().__init__(fabric, router)
        self.passes = 0  # of the last fit
        self.shares = LinkShares(self._n)  # the last sweeps, for links the prior splits
        self._layout: tuple[npt.NDArray[np.uint64], IntArray, IntArray] | None = None

    # -- one cycle ------------------------------------------------------------------
    def _dense_rates(self, rates: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
        """Transmit and receive bytes/s of every router port (NaN: no rate)."""
        guid = rates["node_guid"].to_numpy(np.uint64)
        port = rates["port"].to_numpy(np.int64)
        layout = self._layout
        if layout is None or not (
            np.array_equal(layout[0], guid) and np.array_equal(layout[1], port)
        ):
            row_of = dict(
                zip(zip(guid.tolist(), port.tolist(), strict=True), range(len(guid)), strict=True)
            )
            rows = np.array(
                [row_of.get(k, len(guid)) if k is not None else len(guid) for k in self._key],
                dtype=np.int64,
            )
            layout = self._layout = (guid.copy(), port.copy(), rows)
        rows = layout[2]
        xmit = np.append(rates["xmit_bytes_per_s"].to_numpy(np.float64), np.nan)[rows]
        if "rcv_bytes_per_s" in rates.columns:
            rcv = np.append(rates["rcv_bytes_per_s"].to_numpy(np.float64), np.nan)[rows]
        else:
            rcv = np.full(self._n, np.nan)
        return xmit, rcv

    def fit(
        self,
        rates: pd.DataFrame,
        jobs: Sequence[MappedJob],
        sl_rates: pd.DataFrame | None = None,
        job_sl: Mapping[str, int] | None = None,
    ) -> dict[int, LevelFit]:
        """Fit the jobs' flows to one rates table; per uplink level, the jobs' figures.

        Args:
            rates: a rates table (``node_guid``, ``port``, ``xmit_bytes_per_s``,
                ``rcv_bytes_per_s``).
            jobs: the running jobs with their ports, in the order of the result's rows.
            sl_rates: per-SL rates (``node_guid``, ``port``, ``sl``,
                ``xmit_bytes_per_s``) of the ports whose PMA has per-SL counters.
            job_sl: each job's SL, for *sl_rates*.
        """
        jobs_t = tuple(jobs)
        sls = tuple((job_sl or {}).get(mj.id, -1) for mj in jobs_t)
        pairs = self._pairs
        if pairs is None or pairs.jobs != jobs_t:
            pairs = self._pairs = self._build(jobs_t)
        xmit, rcv = self._dense_rates(rates)
        # a link's rate: its transmitting port's count, else what its far end received
        link_rate = np.where(np.isnan(xmit), rcv[self._peer], xmit)
        tx = xmit[pairs.port_rows] * pairs.port_share
        rx = rcv[pairs.port_rows] * pairs.port_share
        n_jobs = len(jobs_t)
        src = sums(pairs.group_of_port, np.nan_to_num(tx), pairs.n_groups)
        src_blind = sums(pairs.group_of_port, np.isnan(tx), pairs.n_groups) > 0
        src = np.where(src_blind, np.nan, src)
        # link equations: by port, or by (port, SL) where per-SL counters are there
        n_keys = self._n * (SL_COUNT + 1)
        key = pairs.inc_port * (SL_COUNT + 1) + SL_COUNT
        target = np.full(n_keys, np.nan)
        target[np.arange(self._n) * (SL_COUNT + 1) + SL_COUNT] = link_rate
        sl = np.array(sls, dtype=np.int64)
        if sl_rates is not None and len(sl_rates) and (sl >= 0).any():
            per_sl = self._sl_targets(sl_rates)
            has: BoolArray = np.asarray(~np.isnan(per_sl).all(axis=1), dtype=np.bool_)
            inc_sl = sl[pairs.pair_job[pairs.inc_pair]]
            use = has[pairs.inc_port] & (inc_sl >= 0)
            key = np.where(use, pairs.inc_port * (SL_COUNT + 1) + np.maximum(inc_sl, 0), key)
            ports_sl = np.flatnonzero(has)
            # a job whose SL is not known yet is on none of them: its flows there are
            # left to the other equations
            target[ports_sl * (SL_COUNT + 1) + SL_COUNT] = np.nan
            for s in range(SL_COUNT):
                target[ports_sl * (SL_COUNT + 1) + s] = per_sl[ports_sl, s]
        # links whose counter, over the last sweeps, gives each job's share: one equation
        # per (link, job), as per-SL counters would (a link with those keeps them)
        injection = sums(pairs.port_job, np.nan_to_num(tx), n_jobs)
        injection[sums(pairs.port_job, np.isnan(tx), n_jobs) > 0] = np.nan
        learnt = self.shares.add(
            tuple(mj.id for mj in jobs_t), injection, link_rate, pairs.link_port, pairs.link_job
        )
        if len(learnt.row):
            slot = np.full(len(pairs.link_port), -1, dtype=np.int64)
            slot[learnt.row] = np.arange(len(learnt.row))
            at = slot[pairs.inc_link]
            hit = (at >= 0) & (key % (SL_COUNT + 1) == SL_COUNT)
            key = np.where(hit, n_keys + at, key)
            target = np.concatenate([target, learnt.share * injection[learnt.job]])
        # what kind of equation each incidence is in: 0-15 an SL's, 16 the link's, 17 its
        # job's learnt share (for telling which equations one job has alone)
        kind = np.where(key >= n_keys, SL_COUNT + 1, key % (SL_COUNT + 1))
        x = self._prior(pairs, tx, rx)
        passes = MAX_PASSES
        if pairs.last is not None:
            # the last fit of the jobs that were there, each job's scaled to its prior's
            # total so that the start does not depend on how much the job sends now
            known = ~np.isnan(pairs.last)
            last = np.where(known, pairs.last, 0.0)
            then = sums(pairs.pair_job, last, n_jobs)
            now = sums(pairs.pair_job, np.where(known, x, 0.0), n_jobs)
            scale = np.divide(now, then, out=np.zeros(n_jobs), where=then > 0)
            warm = (1 - PRIOR_MIX) * last * scale[pairs.pair_job] + PRIOR_MIX * x
            x = np.where(known, warm, x)
            # a few new jobs (churn) start from their prior and go on next cycle
            passes = WARM_PASSES if known.mean() >= WARM_SHARE else MAX_PASSES
        # the equations in use, numbered 0 .. n - 1 (sums over a few links, not all ports)
        used, key = compact(key, len(target))
        target = target[used]
        self.passes = self._ipf(x, pairs, src, rx, key, target, passes)
        pairs.last = x.copy()
        return self._levels(x, pairs, key, kind, target, link_rate, tx, n_jobs)

    def _sl_targets(self, sl_rates: pd.DataFrame) -> FloatArray:
        """Per router port and SL, the transmit bytes/s the per-SL counters gave."""
        out = np.full((self._n, SL_COUNT), np.nan)
        guid = sl_rates["node_guid"].to_numpy(np.uint64).tolist()
        port = sl_rates["port"].to_numpy(np.int64).tolist()
        slv = sl_rates["sl"].to_numpy(np.int64)
        val = sl_rates["xmit_bytes_per_s"].to_numpy(np.float64)
        rows = np.array(
            [self._dense.get((g, p), -1) for g, p in zip(guid, port, strict=True)], dtype=np.int64
        )
        ok = (rows >= 0) & (slv >= 0) & (slv < SL_COUNT)
        out[rows[ok], slv[ok]] = val[ok]
        return out

    def _prior(self, pairs: Pairs, tx: FloatArray, rx: FloatArray) -> FloatArray:
        """The flows before the fit: gravity within each job (a source spreads what it
        sends over its peers in proportion to what they receive), or the job's pattern."""
        tx0, rx0 = np.nan_to_num(tx), np.nan_to_num(rx)
        n_jobs = len(pairs.jobs)
        rx_job = sums(pairs.port_job, rx0, n_jobs)
        # per source port: what it sends over what its peers receive, summed per group
        peers = rx_job[pairs.port_job] - rx0
        per = np.divide(tx0, peers, out=np.zeros_like(tx0), where=peers > 0)
        a = sums(pairs.group_of_port, per, pairs.n_groups)
        d = pairs.pair_dst
        own = pairs.group_of_port[d] == pairs.pair_group  # the destination is a source there
        x: FloatArray = rx0[d] * (a[pairs.pair_group] - np.where(own, per[d], 0.0))
        start = first = 0
        for e in pairs.entries:
            n, k = len(e.pair_group), len(e.ports)
            if e.pattern is not None:  # what each source sends, summed over its leaf
                sent = np.zeros((e.n_groups, k))
                np.add.at(sent, e.group, e.pattern * tx0[first : first + k, None])
                x[start : start + n] = sent[e.pair_group, e.pair_dst]
            start, first = start + n, first + k
        return np.maximum(x, 0.0)

    @staticmethod
    def _ipf(
        x: FloatArray,
        pairs: Pairs,
        src: FloatArray,
        rx: FloatArray,
        key: IntArray,
        target: FloatArray,
        most: int,
    ) -> int:
        """Scale *x* in place until the equations hold within TOLERANCE (or *most* passes
        were done); the passes done."""
        families: list[tuple[IntArray | None, IntArray, FloatArray, int]] = [
            (None, pairs.pair_group, src, len(src)),
            (None, pairs.pair_dst, rx, len(rx)),
        ]
        for c in pairs.classes:
            sel = pairs.inc_class == c
            families.append((pairs.inc_pair[sel], key[sel], target, len(target)))
        # per family, the equations that can be met: measured, with flows to scale
        goals = [goal[:n] for _, _, goal, n in families]
        for done in range(1, most + 1):
            worst = 0.0
            for (members, index, _, n), want in zip(families, goals, strict=True):
                got = sums(index, x if members is None else x[members], n)
                ok = ~np.isnan(want) & (got > 0)
                ratio = np.divide(want, got, out=np.ones(n), where=ok)
                if members is None:
                    x *= ratio[index]
                else:  # a class holds one link per unknown at most: no repeated index
                    x[members] *= ratio[index]
                # how far off the family was: its equations' misfit over their total
                total = float(want[ok].sum())
                if total > 0:
                    worst = max(worst, float(np.abs(got[ok] - want[ok]).sum()) / total)
            if worst < TOLERANCE:
                return done
        return most

    def _levels(
        self,
        x: FloatArray,
        pairs: Pairs,
        key: IntArray,
        kind: IntArray,
        target: FloatArray,
        link_rate: FloatArray,
        tx: FloatArray,
        n_jobs: int,
    ) -> dict[int, LevelFit]:
        # equations of one job only: their counters measure that job's flows.  An
        # equation is one link's of one kind, so its jobs are its (link, job) pairs of that
        # kind: count those per equation
        kinds = SL_COUNT + 2
        first = distinct(pairs.inc_link * kinds + kind, len(pairs.link_port) * kinds)
        eq = np.zeros(len(pairs.link_port) * kinds, dtype=np.int64)
        eq[pairs.inc_link * kinds + kind] = key
        jobs_on_key = np.bincount(eq[first], minlength=len(target))
        exclusive = (jobs_on_key[key] == 1) & ~np.isnan(target[key])
        inc_x = x[pairs.inc_pair]
        fitted_key = sums(key, inc_x, len(target))
        job_blind = sums(pairs.port_job, np.isnan(tx), n_jobs) > 0
        out: dict[int, LevelFit] = {}
        lvl_of = self._level[pairs.inc_port]
        up = self._up[pairs.inc_port]
        for lvl in self.levels:
            cross = pairs.cross[lvl]
            rate = sums(pairs.pair_job, np.where(cross, x, 0.0), n_jobs)
            # the level's links: up out of level-l switches, down from level l+1 into l
            at = (up & (lvl_of == lvl)) | (~up & (lvl_of == lvl + 1))
            pinned = np.zeros(len(x), dtype=np.bool_)
            pinned[pairs.inc_pair[at & exclusive]] = True
            blind_pair = np.zeros(len(x), dtype=np.bool_)
            blind_pair[pairs.inc_pair[at & np.isnan(target[key])]] = True
            blind = sums(pairs.pair_job, cross & blind_pair, n_jobs) > 0
            mine = sums(pairs.pair_job, np.where(cross & pinned, x, 0.0), n_jobs)
            measured = np.divide(mine, rate, out=np.ones(n_jobs), where=rate > 0)
            keys = distinct(key[at], len(target))
            counted = np.nan_to_num(target[keys])
            resid = np.abs(fitted_key[keys] - counted).sum()
            total = counted.sum()
            ups = np.flatnonzero(self._link & self._up & (self._level == lvl))
            fitted_up = sums(
                pairs.inc_port[up & (lvl_of == lvl)], inc_x[up & (lvl_of == lvl)], self._n
            )
            spare = np.nan_to_num(link_rate[ups]) - fitted_up[ups]
            out[lvl] = LevelFit(
                np.where(blind | job_blind, np.nan, rate),
                measured,
                float(resid / total) if total > 0 else 0.0,
                float(np.maximum(spare, 0.0).sum()),
            )
        return out

    def job_links(self, job: MappedJob) -> dict[PortKey, float]:
        """The last fit's bytes/s of *job* on each switch-to-switch link it uses, by the
        link's transmitting port; empty before a fit or for a job not in it."""
        pairs = self._pairs
        if pairs is None or pairs.last is None:
            return {}
        where = [j for j, mj in enumerate(pairs.jobs) if mj is job]
        if not where:
            return {}
        sel = pairs.pair_job[pairs.inc_pair] == where[0]
        load = sums(pairs.inc_port[sel], pairs.last[pairs.inc_pair[sel]], self._n)
        return {
            k: float(load[i])
            for i in np.flatnonzero(load > 0).tolist()
            if (k := self._key[i]) is not None
        }
