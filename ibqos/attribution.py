"""Per-job, per-level traffic from per-port rates (DESIGN.md section 3, "Per-job per-level
attribution").

Level 0 is exact: a job's hosts are its own, so their CA ports' transmit rates are the job's
injection.  Level *l* >= 1 is the traffic that leaves the job's level-*l* subtrees.  With
minimal routing the bytes leaving a subtree do not depend on the path they take, so the sum
of the transmit rates of the up ports of the subtree's level-*l* switches is exactly what
left it, whatever the routing.  That total is split among the jobs with hosts in the subtree
in proportion to a prior, so that per-subtree sums match the counters exactly:

    prior(job, S) = sum over the job's hosts i in S of  injection(i) * outside(i, S)

where ``outside(i, S)`` is the share of host *i*'s traffic that goes to hosts outside *S*.
When the job declares its communication pattern (its profile: ``Job.pattern``), that share
comes from the pattern's traffic matrix (:mod:`ibqos.patterns`).  Otherwise it is the
gravity model within the job, uniform all-to-all: ``(n - k) / (n - 1)`` for a job of *n*
hosts with *k* of them in *S*.  A job that is alone in a subtree gets the subtree's whole
total: that part is measured, not estimated, and is reported as such (``measured``).

Per-SL data counters, where a fabric has them and each job has its own SL, would make every
level measured; ibsim has none, so this version always estimates shared subtrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ibqos.fabric import Fabric
from ibqos.jobmap import MappedJob
from ibqos.patterns import traffic_matrix


@dataclass(frozen=True)
class JobTraffic:
    """What one job sends across each fat-tree level.

    Attributes:
        job_id: the job.
        bytes_per_s: level -> bytes per second (0: injection by its hosts; l >= 1: leaving
            its level-l subtrees).  NaN where the counters gave no rate.
        measured: level -> share of that level's bytes/s that was measured (1.0 for level
            0; for l >= 1, the part from subtrees the job had to itself).
    """

    job_id: str
    bytes_per_s: dict[int, float]
    measured: dict[int, float]

    @property
    def measured_share(self) -> float:
        """Share of all the job's attributed bytes/s (over every level) that was measured."""
        total = sum(v for v in self.bytes_per_s.values() if np.isfinite(v))
        if total <= 0:
            return 1.0
        part = sum(self.measured[lvl] * v for lvl, v in self.bytes_per_s.items() if np.isfinite(v))
        return part / total


@dataclass
class Attribution:
    """The result of one attribution.

    Attributes:
        jobs: by job id.
        unattributed: level -> bytes/s of uplink traffic in subtrees where no job had any
            prior weight (other hosts, management traffic): left out of every job.
    """

    jobs: dict[str, JobTraffic]
    unattributed: dict[int, float] = field(default_factory=dict)


class Attributor:
    """Splits measured rates among jobs on one fabric (tables built once per fabric).

    Args:
        fabric: the topology the rates were read on.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        topo = fabric.topo
        #: uplink levels: switch levels that have a level above them
        self.levels = list(range(1, fabric.height))
        guid_of = {n.id: n.guid for n in topo.nodes.values()}
        #: CA node GUID -> host name (first word of its description)
        self.host_of = {g: n.hostname for n in topo.cas() if (g := guid_of[n.id]) is not None}
        self._matrices: dict[object, np.ndarray] = {}
        # per level: CA node GUID -> subtree id, and the up ports of that level's switches
        self.subtree_of: dict[int, dict[int, int]] = {}
        self.up_ports: dict[int, tuple[list[tuple[int, int]], np.ndarray]] = {}
        for lvl in self.levels:
            comp = fabric.components(lvl)
            self.subtree_of[lvl] = {
                g: comp[n.id] for n in topo.cas() if (g := guid_of[n.id]) is not None
            }
            up = [(fp.key, comp[fp.node_id]) for fp in fabric.uplinks(lvl) if fp.key is not None]
            self.up_ports[lvl] = ([k for k, _ in up], np.array([c for _, c in up], dtype=np.int64))

    def attribute(self, rates: pd.DataFrame, jobs: Sequence[MappedJob]) -> Attribution:
        """Per job and level, the bytes/s it sends (see the module docstring).

        Args:
            rates: a rates table (``ibqos.collect.rates``): ``node_guid``, ``port`` and
                ``xmit_bytes_per_s`` are used.
            jobs: the running jobs with their ports.
        """
        xmit = _rate_lookup(rates)
        # one row per (job, host port): the job's index, the CA's GUID, its injection
        rows_job: list[int] = []
        rows_guid: list[int] = []
        rows_rate: list[float] = []
        rows_host: list[int] = []  # index of the port's host in the job's node list
        for j, mj in enumerate(jobs):
            index = {h: i for i, h in enumerate(mj.job.nodes)}
            for key in mj.ports:
                rows_job.append(j)
                rows_guid.append(key[0])
                rows_rate.append(xmit.get(key, np.nan))
                rows_host.append(index.get(self.host_of.get(key[0], ""), -1))
        host = np.array(rows_host, dtype=np.int64)
        matrices = self._pattern_matrices(jobs)
        job_idx = np.array(rows_job, dtype=np.int64)
        rate = np.array(rows_rate, dtype=np.float64)
        n_jobs = len(jobs)
        level0 = np.bincount(job_idx, weights=np.nan_to_num(rate), minlength=n_jobs)
        unknown0 = np.bincount(job_idx, weights=np.isnan(rate), minlength=n_jobs) > 0
        # hosts per job: the gravity factor uses the job's size, not its ports
        hosts = np.array([max(len(set(k[0] for k in mj.ports)), 1) for mj in jobs], dtype=float)

        per_level: dict[int, np.ndarray] = {0: np.where(unknown0, np.nan, level0)}
        measured: dict[int, np.ndarray] = {0: np.ones(n_jobs)}
        unattributed: dict[int, float] = {}
        guids = np.array(rows_guid, dtype=np.uint64)
        for lvl in self.levels:
            sub_of = self.subtree_of[lvl]
            sub = np.array([sub_of.get(int(g), -1) for g in guids], dtype=np.int64)
            keys, up_sub = self.up_ports[lvl]
            up_rate = np.array([xmit.get(k, np.nan) for k in keys], dtype=np.float64)
            n_sub = int(max(up_sub.max(initial=-1), sub.max(initial=-1))) + 1
            total = np.bincount(up_sub, weights=np.nan_to_num(up_rate), minlength=n_sub)
            blind = np.bincount(up_sub, weights=np.isnan(up_rate), minlength=n_sub) > 0
            outside = self._outside(jobs, matrices, job_idx, host, sub, hosts, n_sub)
            per_level[lvl], measured[lvl], unattributed[lvl] = _split(
                job_idx, sub, rate * outside, total, blind, n_jobs, n_sub
            )
        out: dict[str, JobTraffic] = {}
        for j, mj in enumerate(jobs):
            out[mj.id] = JobTraffic(
                mj.id,
                {lvl: float(v[j]) for lvl, v in per_level.items()},
                {lvl: float(v[j]) for lvl, v in measured.items()},
            )
        return Attribution(out, unattributed)

    def _pattern_matrices(self, jobs: Sequence[MappedJob]) -> dict[int, np.ndarray]:
        """Traffic matrices of the jobs that declare a pattern, by job index (cached)."""
        out: dict[int, np.ndarray] = {}
        cache: dict[object, np.ndarray] = {}
        for j, mj in enumerate(jobs):
            if not mj.job.pattern:
                continue
            m = self._matrices.get(mj.job)
            if m is None:
                # only the matrix's shape matters here; a pattern without a rate gets one
                shaped = mj.job if mj.job.has_rates else replace(mj.job, rate_bytes_per_s=1.0)
                m = traffic_matrix(shaped)
            cache[mj.job] = out[j] = m
        self._matrices = cache  # ended jobs drop out
        return out

    @staticmethod
    def _outside(
        jobs: Sequence[MappedJob],
        matrices: Mapping[int, np.ndarray],
        job_idx: np.ndarray,
        host: np.ndarray,
        sub: np.ndarray,
        hosts: np.ndarray,
        n_sub: int,
    ) -> np.ndarray:
        """Per (job, port) row: the share of the port's host's traffic leaving its subtree."""
        pair = job_idx * n_sub + sub
        _, inv, k = np.unique(pair, return_inverse=True, return_counts=True)
        n = hosts[job_idx]
        out = np.where(n > 1, (n - k[inv]) / np.maximum(n - 1, 1), 0.0)  # gravity
        for j, m in matrices.items():
            rows = np.flatnonzero(job_idx == j)
            nodes = len(jobs[j].job.nodes)
            host_sub = np.full(nodes, -1, dtype=np.int64)
            ok = host[rows] >= 0
            host_sub[host[rows][ok]] = sub[rows][ok]
            sent = m.sum(axis=1)
            cross = (host_sub[:, None] != host_sub[None, :]) & (host_sub[None, :] >= 0)
            frac = np.divide((m * cross).sum(axis=1), sent, out=np.zeros(nodes), where=sent > 0)
            out[rows[ok]] = frac[host[rows][ok]]
        return out


def _split(
    job_idx: np.ndarray,
    sub: np.ndarray,
    weight: np.ndarray,
    total: np.ndarray,
    blind: np.ndarray,
    n_jobs: int,
    n_sub: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One level: split each subtree's uplink total among its jobs by their priors
    (*weight*: per port row, injection x share leaving the subtree).

    Returns per job the bytes/s and the measured share, and the bytes/s no job took.
    """
    ok = sub >= 0
    pair = job_idx[ok] * n_sub + sub[ok]  # (job, subtree) as one key
    uniq, inv = np.unique(pair, return_inverse=True)
    pj, ps = uniq // n_sub, uniq % n_sub
    prior = np.bincount(inv, weights=np.nan_to_num(weight[ok]), minlength=len(uniq))
    weight_sum = np.bincount(ps, weights=prior, minlength=n_sub)
    share = np.divide(prior, weight_sum[ps], out=np.zeros_like(prior), where=weight_sum[ps] > 0)
    part = share * total[ps]
    part = np.where(blind[ps], np.nan, part)  # an up port without a rate: unknown
    jobs_in = np.bincount(ps, weights=prior > 0, minlength=n_sub)
    alone = (jobs_in[ps] == 1) & (prior > 0)
    got = np.bincount(pj, weights=np.nan_to_num(part), minlength=n_jobs)
    unknown = np.bincount(pj, weights=np.isnan(part), minlength=n_jobs) > 0
    mine = np.bincount(pj, weights=np.where(alone, np.nan_to_num(part), 0.0), minlength=n_jobs)
    measured = np.divide(mine, got, out=np.ones(n_jobs), where=got > 0)
    unclaimed = float(total[(weight_sum == 0) & ~blind].sum())
    return np.where(unknown, np.nan, got), measured, unclaimed


def _rate_lookup(rates: pd.DataFrame) -> Mapping[tuple[int, int], float]:
    """(node GUID, port) -> transmit bytes/s (NaN where unknown)."""
    guid = rates["node_guid"].to_numpy(np.uint64).tolist()
    port = rates["port"].to_numpy(np.int64).tolist()
    value = rates["xmit_bytes_per_s"].to_numpy(np.float64).tolist()
    return dict(zip(zip(guid, port, strict=True), value, strict=True))
