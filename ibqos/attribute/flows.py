"""The unknowns of the routes fit: each job's flows from its leaf switches to its host
ports, and the links each crosses (:mod:`ibqos.attribute.tomography` fits them).

``x[L, d]`` is what the job's hosts on leaf switch *L* send to the job's host port *d*,
for every leaf holding the job's hosts: LFTs route by destination, so every source on one
leaf takes the same path to *d*, the finest grain the counters can tell apart.  A job's
unknowns and their links depend only on the job and the routes, so they are built once
per job (:class:`JobPairs`) and laid side by side for all running jobs (:class:`Pairs`)
when the jobs change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt

from ibqos.attribute.jobmap import MappedJob
from ibqos.attribute.patterns import traffic_matrix
from ibqos.fabric.model import Fabric, PortKey
from ibqos.fabric.routes import Router

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class JobPairs:
    """One job's unknowns and where they go, kept while the job runs.

    Attributes:
        job: the mapped job (compared by identity).
        ports: dense router index of each job port (CA).
        share: each port's share of its traffic that is the job's.
        group: per port, its leaf's group (0 .. n_groups - 1: the job's leaves).
        n_groups: how many leaves hold the job's ports.
        pair_group: per unknown, its source leaf's group.
        pair_dst: per unknown, its destination: an index into *ports*.
        inc_pair: per link incidence, its unknown.
        inc_port: per link incidence, the dense index of the link's transmitting port.
        cross: per uplink level, per unknown, whether it leaves the level's subtree.
        pattern: for a job that declares its pattern, per source port and destination
            port, the share of the source's injection the pattern sends there (None:
            gravity).
    """

    job: MappedJob
    ports: IntArray
    share: FloatArray
    group: IntArray
    n_groups: int
    pair_group: IntArray
    pair_dst: IntArray
    inc_pair: IntArray
    inc_port: IntArray
    cross: dict[int, BoolArray]
    pattern: FloatArray | None


@dataclass
class Pairs:
    """Every running job's unknowns as one set of arrays (rebuilt when the jobs change)."""

    jobs: tuple[MappedJob, ...]
    entries: list[JobPairs]
    port_rows: IntArray  # per job port (all jobs), its dense router index
    port_share: FloatArray
    port_job: IntArray
    group_of_port: IntArray  # global source group of each job port
    n_groups: int
    group_job: IntArray
    pair_group: IntArray
    pair_dst: IntArray  # global job-port index
    pair_job: IntArray
    inc_pair: IntArray
    inc_port: IntArray
    inc_class: IntArray  # (level, direction, occurrence) class of each incidence
    classes: list[int]
    cross: dict[int, BoolArray]
    link_port: IntArray  # the (link, job) pairs whose flows cross, one row each, by port
    link_job: IntArray
    inc_link: IntArray  # per incidence, its (link, job) pair's row
    last: FloatArray | None = None  # the last cycle's fit


def distinct(values: IntArray, size: int) -> IntArray:
    """The distinct *values* (all in 0 .. size - 1), sorted, in linear time."""
    seen = np.zeros(size, dtype=np.bool_)
    seen[values] = True
    return np.flatnonzero(seen).astype(np.int64)


def compact(values: IntArray, size: int) -> tuple[IntArray, IntArray]:
    """The distinct *values* (all in 0 .. size - 1), sorted, and each value's index among
    them: ``np.unique(values, return_inverse=True)`` in linear time, without a sort."""
    seen = np.zeros(size, dtype=np.bool_)
    seen[values] = True
    used = np.flatnonzero(seen)
    index = np.cumsum(seen) - 1
    return used.astype(np.int64), index[values].astype(np.int64)


def sums(index: IntArray, weights: npt.ArrayLike, n: int) -> FloatArray:
    """Sums of *weights* by *index* (0 .. n - 1), as floats."""
    return np.asarray(np.bincount(index, weights, n), dtype=np.float64)


class FlowIndex:
    """The fabric's ports as the routes fit numbers them, and the running jobs' unknowns.

    Args:
        fabric: the fabric the rates are read on.
        router: OpenSM's forwarding tables over the same topology.

    Attributes:
        levels: the uplink levels.
    """

    def __init__(self, fabric: Fabric, router: Router) -> None:
        self.fabric = fabric
        self.router = router
        topo = fabric.topo
        self.levels = list(range(1, fabric.height))
        ports = router.ports
        self._n = len(ports)
        guid = [topo.nodes[p.node].guid for p in ports]
        self._key: list[PortKey | None] = [
            (g, p.num) if g is not None else None for g, p in zip(guid, ports, strict=True)
        ]
        self._dense = {k: i for i, k in enumerate(self._key) if k is not None}
        level = np.array([fabric.level_of(p.node) for p in ports], dtype=np.int64)
        peer = np.array([router.port_index[topo.peer(p) or p] for p in ports], dtype=np.int64)
        self._peer = peer
        self._level = level
        is_sw = np.array([topo.nodes[p.node].kind == "switch" for p in ports], dtype=np.bool_)
        # a switch-to-switch link, by its transmitting port: up when the peer is higher
        self._link = is_sw & is_sw[peer]
        self._up = level[peer] > level
        # CA dense index -> its leaf switch's node id
        self._leaf_of = {i: ports[int(peer[i])].node for i in np.flatnonzero(~is_sw).tolist()}
        self._comp = {lvl: fabric.components(lvl) for lvl in self.levels}
        self._lid = np.array([topo.lids.get(p, 0) for p in ports], dtype=np.int64)
        self._entries: dict[int, JobPairs] = {}
        self._pairs: Pairs | None = None

    @cached_property
    def _host_of(self) -> dict[int, str]:
        """CA node GUID -> host name (for declared patterns, which name hosts)."""
        return {n.guid: n.hostname for n in self.fabric.topo.cas() if n.guid is not None}

    def _job_pairs(self, mj: MappedJob) -> JobPairs:
        """The unknowns of one job (its ports the fabric does not have take no part)."""
        dense = [self._dense.get(k) for k in mj.ports]
        keep = [i for i, d in enumerate(dense) if d is not None and d in self._leaf_of]
        ports = np.array([dense[i] for i in keep], dtype=np.int64)
        share = np.array([mj.share[i] if mj.share else 1.0 for i in keep], dtype=np.float64)
        leaves = [self._leaf_of[int(p)] for p in ports]
        names = list(dict.fromkeys(leaves))
        group = np.array([names.index(n) for n in leaves], dtype=np.int64)
        n_groups = len(names)
        counts = np.bincount(group, minlength=n_groups)
        g = np.repeat(np.arange(n_groups, dtype=np.int64), len(ports))
        d = np.tile(np.arange(len(ports), dtype=np.int64), n_groups)
        # a leaf whose only job port is the destination itself sends it nothing
        ok = ~((group[d] == g) & (counts[g] == 1))
        g, d = g[ok], d[ok]
        rep = np.array([int(ports[np.argmax(group == k)]) for k in range(n_groups)], dtype=np.int64)
        if len(g):
            hops = self.router.hops(rep[g], self._lid[ports[d]], ports[d].copy())[:, 1:]
        else:
            hops = np.zeros((0, 0), dtype=np.int64)
        pair, step = np.nonzero(hops >= 0)
        inc_port = hops[pair, step]
        is_link = self._link[inc_port]
        cross: dict[int, BoolArray] = {}
        for lvl in self.levels:
            comp = self._comp[lvl]
            leaf_comp = np.array([comp[n] for n in names], dtype=np.int64)
            dst_comp = leaf_comp[group]
            cross[lvl] = leaf_comp[g] != dst_comp[d]
        pattern = self._pattern(mj, keep) if mj.job.pattern else None
        return JobPairs(
            mj,
            ports,
            share,
            group,
            n_groups,
            g,
            d,
            pair[is_link].astype(np.int64),
            inc_port[is_link],
            cross,
            pattern,
        )

    def _pattern(self, mj: MappedJob, keep: Sequence[int]) -> FloatArray:
        """Per source and destination port of *mj* (those of *keep*), the share of the
        source's injection that the declared pattern sends to the destination (by host,
        split evenly over a host's ports)."""
        shaped = mj.job if mj.job.has_rates else replace(mj.job, rate_bytes_per_s=1.0)
        m = traffic_matrix(shaped)
        sent = m.sum(axis=1, keepdims=True)
        m = np.divide(m, sent, out=np.zeros_like(m), where=sent > 0)
        index = {h: i for i, h in enumerate(mj.job.nodes)}
        host_of = self._host_of
        host = np.array(
            [index.get(host_of.get(mj.ports[i][0], ""), -1) for i in keep], dtype=np.int64
        )
        known = host >= 0
        per_host = np.bincount(host[known], minlength=len(index)).astype(float)
        h = np.maximum(host, 0)
        share = m[h][:, h] / np.maximum(per_host[h], 1.0)[None, :]
        out: FloatArray = np.where(known[:, None] & known[None, :], share, 0.0)
        return out

    def _carried(self, entries: list[JobPairs]) -> FloatArray | None:
        """The last fit's flows of the jobs in *entries* that it had, in their new order;
        NaN for the other jobs' (None: no last fit)."""
        old = self._pairs
        if old is None or old.last is None:
            return None
        where: dict[int, tuple[int, int]] = {}
        at = 0
        for e in old.entries:
            where[id(e)] = (at, at + len(e.pair_group))
            at += len(e.pair_group)
        parts = [
            old.last[where[id(e)][0] : where[id(e)][1]]
            if id(e) in where
            else np.full(len(e.pair_group), np.nan)
            for e in entries
        ]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _build(self, jobs: tuple[MappedJob, ...]) -> Pairs:
        """The unknowns of all *jobs*, each job's reused while it runs (by identity: the
        job mapper hands back the same MappedJob while a job runs)."""
        cache: dict[int, JobPairs] = {}
        entries: list[JobPairs] = []
        for mj in jobs:
            e = self._entries.get(id(mj))
            if e is None or e.job is not mj:
                e = self._job_pairs(mj)
            cache[id(mj)] = e
            entries.append(e)
        self._entries = cache
        last = self._carried(entries)
        n_ports = np.array([len(e.ports) for e in entries], dtype=np.int64)
        n_groups = np.array([e.n_groups for e in entries], dtype=np.int64)
        n_pairs = np.array([len(e.pair_group) for e in entries], dtype=np.int64)
        port_off = np.cumsum(n_ports) - n_ports
        group_off = np.cumsum(n_groups) - n_groups
        pair_off = np.cumsum(n_pairs) - n_pairs
        idx = np.arange(len(entries), dtype=np.int64)

        def cat(arrays: list[npt.NDArray[np.generic]], dtype: type) -> npt.NDArray[np.generic]:
            return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype=dtype)

        port_rows = cat([e.ports for e in entries], np.int64)
        port_share = cat([e.share for e in entries], np.float64)
        port_job = np.repeat(idx, n_ports)
        group_of_port = cat([e.group + group_off[j] for j, e in enumerate(entries)], np.int64)
        group_job = np.repeat(idx, n_groups)
        pair_group = cat([e.pair_group + group_off[j] for j, e in enumerate(entries)], np.int64)
        pair_dst = cat([e.pair_dst + port_off[j] for j, e in enumerate(entries)], np.int64)
        pair_job = np.repeat(idx, n_pairs)
        inc_pair = cat([e.inc_pair + pair_off[j] for j, e in enumerate(entries)], np.int64)
        inc_port = cat([e.inc_port for e in entries], np.int64)
        cross = {
            lvl: cat([e.cross[lvl] for e in entries], np.bool_).astype(np.bool_)
            for lvl in self.levels
        }
        n_jobs_all = max(len(entries), 1)
        link, inc_link = np.unique(
            inc_port.astype(np.int64) * n_jobs_all + pair_job[inc_pair], return_inverse=True
        )
        # classes of link incidences: (level of the transmitting switch, up or down); a
        # route that takes two links of one class (not minimal) gets them in two classes
        base = self._level[inc_port] * 2 + self._up[inc_port]
        order = np.lexsort((base, inc_pair))
        key = inc_pair[order] * 64 + base[order]
        first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, dtype=np.bool_)
        start = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
        occurrence = np.empty(len(key), dtype=np.int64)
        occurrence[order] = np.arange(len(key)) - start
        inc_class = base + 64 * occurrence
        return Pairs(
            jobs,
            entries,
            port_rows.astype(np.int64),
            port_share.astype(np.float64),
            port_job,
            group_of_port.astype(np.int64),
            int(n_groups.sum()),
            group_job,
            pair_group.astype(np.int64),
            pair_dst.astype(np.int64),
            pair_job,
            inc_pair.astype(np.int64),
            inc_port.astype(np.int64),
            inc_class.astype(np.int64),
            sorted(set(inc_class.tolist())),
            cross,
            link // n_jobs_all,
            link % n_jobs_all,
            inc_link.astype(np.int64),
            last,
        )
