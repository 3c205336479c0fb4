"""How running jobs share the fat tree: advice for the scheduler side.

The research behind ibqos argues for placing network-intensive jobs in subtrees of their
own: jobs meet only on the links above the leaf switches, so what matters is how many
other jobs have nodes in the same subtrees, and how thinly a job is spread.  Per job:

- ``subtrees[l]``: the level-*l* subtrees (level 1: leaf switches) holding its nodes;
- ``sharing[l]``: the other running jobs with nodes in any of those subtrees (the jobs
  whose traffic meets its traffic on level-*l* uplinks);
- ``fragmentation``: leaf switches it spans over the fewest that could hold it
  (``ceil(nodes / compute hosts per leaf switch)``): 1.0 is compact; F_1 placement of a
  16-node job on 8-host leaves is 8.0.  Compute hosts: CAs named by the host pattern and
  not in ``jobs.exclude_hosts`` (not the subnet manager's host, storage, ...).

Levels 1 .. height - 1 are reported: the top level has no uplinks, everyone shares it.
Computed on arrays for all jobs at once (the agent does it every cycle).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ibqos.attribute.jobmap import MappedJob
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class JobSharing:
    """One job's sharing (see the module docstring).

    Attributes:
        nodes: its hosts (CAs) on the fabric.
        subtrees: level -> subtrees holding it.
        sharing: level -> other jobs with nodes in those subtrees.
        fragmentation: leaf switches spanned over the fewest possible (>= 1.0).
    """

    nodes: int
    subtrees: Mapping[int, int]
    sharing: Mapping[int, int]
    fragmentation: float


class SharingTables:
    """The fabric's per-level subtree of every CA, built once per fabric.

    Args:
        fabric: the topology.
        matcher: how host names are read from NodeDescriptions.
        exclude: hosts that run no jobs (``jobs.exclude_hosts``).

    Attributes:
        hosts_per_leaf: the most compute hosts any leaf switch has: CAs whose description
            names a host (*matcher*) not in *exclude*.  The subnet manager's host or a
            storage node on a leaf is no room for a job, so counting it would make a job
            as compact as possible look fragmented.
    """

    def __init__(
        self, fabric: Fabric, matcher: HostMatcher | None = None, exclude: Collection[str] = ()
    ) -> None:
        matcher = matcher or HostMatcher()
        cas = [n for n in fabric.topo.cas() if n.guid is not None]
        self.levels = list(range(1, fabric.height))
        self._row = {n.guid: i for i, n in enumerate(cas)}
        self._sub: dict[int, IntArray] = {}
        for lvl in self.levels:
            comp = fabric.components(lvl)
            self._sub[lvl] = np.array([comp[n.id] for n in cas], dtype=np.int64)
        leaf = fabric.components(1) if fabric.height >= 1 else {}
        per_leaf: dict[int, int] = {}
        for n in cas:
            host = matcher.hostname(n.desc)
            if n.id in leaf and host is not None and host not in exclude:
                per_leaf[leaf[n.id]] = per_leaf.get(leaf[n.id], 0) + 1
        self.hosts_per_leaf = max(per_leaf.values(), default=1)
        self._leaf = np.array([leaf.get(n.id, -1) for n in cas], dtype=np.int64)

    def sharing(self, jobs: Sequence[MappedJob]) -> dict[str, JobSharing]:
        """Every job's :class:`JobSharing`, by job id."""
        rows = [sorted({self._row[g] for g, _ in mj.ports if g in self._row}) for mj in jobs]
        counts = np.array([len(r) for r in rows], dtype=np.int64)
        job = np.repeat(np.arange(len(jobs), dtype=np.int64), counts)
        ca = np.array([i for r in rows for i in r], dtype=np.int64)
        n_jobs = len(jobs)
        subtrees: dict[int, IntArray] = {}
        sharing: dict[int, IntArray] = {}
        for lvl in self.levels:
            sub = self._sub[lvl][ca]
            n_sub = int(sub.max(initial=-1)) + 1
            pairs = np.unique(job * max(n_sub, 1) + sub)  # each (job, subtree) once
            pj, ps = pairs // max(n_sub, 1), pairs % max(n_sub, 1)
            subtrees[lvl] = np.bincount(pj, minlength=n_jobs)
            sharing[lvl] = _others(pj, ps, n_jobs)
        leaves = (
            subtrees[1]
            if 1 in subtrees
            else np.array([len({int(x) for x in self._leaf[r]}) for r in rows], dtype=np.int64)
        )
        out = {}
        for j, mj in enumerate(jobs):
            fewest = max(1, math.ceil(int(counts[j]) / self.hosts_per_leaf))
            out[mj.id] = JobSharing(
                nodes=int(counts[j]),
                subtrees={lvl: int(subtrees[lvl][j]) for lvl in self.levels},
                sharing={lvl: int(sharing[lvl][j]) for lvl in self.levels},
                fragmentation=int(leaves[j]) / fewest if counts[j] else 1.0,
            )
        return out


def _others(pj: IntArray, ps: IntArray, n_jobs: int) -> IntArray:
    """Per job, the distinct other jobs found in its subtrees, given the (job, subtree)
    pairs (each once, sorted by job).  A job in one subtree shares with its other
    members; one in several, with the union of theirs (merged per job: the pairs of
    members of a big subtree would be too many)."""
    n_sub = int(ps.max(initial=-1)) + 1
    order = np.argsort(ps, kind="stable")
    bounds = np.searchsorted(ps[order], np.arange(n_sub + 1))
    members = [pj[order[bounds[s] : bounds[s + 1]]] for s in range(n_sub)]
    size = np.diff(bounds)
    starts = np.searchsorted(pj, np.arange(n_jobs + 1))
    out = np.zeros(n_jobs, dtype=np.int64)
    for j in range(n_jobs):
        subs = ps[starts[j] : starts[j + 1]]
        if len(subs) == 1:
            out[j] = size[subs[0]] - 1
        elif len(subs) > 1:
            # distinct by sorting (np.unique hashes, several times slower on these)
            ids = np.sort(np.concatenate([members[s] for s in subs]))
            out[j] = int(np.count_nonzero(ids[1:] != ids[:-1]))  # distinct - 1
    return out
