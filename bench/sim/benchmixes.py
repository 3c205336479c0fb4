"""The job mixes the simulator's speed benchmarks time, drawn from a fixed seed.

Used by :mod:`bench.sim.bench` (all three) and :mod:`bench.sim.predict` (the 2,048-node
mix):

- **64 nodes** (:data:`XGFT_64`): :data:`MIX_64`, 4 jobs with hosts on every leaf
  (:func:`jobs_64`), iterations of 40-100 us (``stretch`` makes every period that many
  times longer);
- **2,048 nodes** (:data:`XGFT_2048`): 20 jobs on 90 % of the hosts (:func:`jobs_2048`);
- **512 nodes** (:data:`XGFT_512`): the same a quarter of the size (``shrink`` 4).
"""

from __future__ import annotations

import numpy as np

from ibqos.jobs.model import Job
from ibqos.sim.network import Network

SEED = 5
XGFT_64 = "2;16,4;1,8"
XGFT_2048 = "3;16,16,8;1,8,8"
#: the largest mix the fluid model runs per host, and so with buffers, by default: 512
#: hosts (32 leaves of 16, 4 per pod), the 2,048-node mix a quarter of the size
XGFT_512 = "3;16,4,8;1,8,8"
#: the 64-node mix: (id, pattern, hosts per leaf, share of the link, duty, period in us)
MIX_64 = (
    ("heavy", "all-to-all", 6, 0.9, 0.7, 100.0),
    ("mod1", "halo", 4, 0.6, 0.4, 60.0),
    ("mod2", "ring", 3, 0.5, 0.4, 50.0),
    ("light", "random-pairs", 3, 0.2, 0.2, 40.0),
)


def compute_hosts(net: Network) -> list[str]:
    """The compute hosts (cnNNNN; not the OpenSM host), in name order."""
    return sorted(h for h in net.hosts if h.startswith("cn"))


def jobs_64(net: Network, stretch: float = 1.0) -> list[Job]:
    """MIX_64: every job has the given hosts on each of the 4 leaves, interleaved at random."""
    rng = np.random.default_rng(SEED)
    hosts = compute_hosts(net)
    leaves = [list(rng.permutation(hosts[i : i + 16])) for i in range(0, len(hosts), 16)]
    link = float(net.capacity[net.router.port_index[net.hosts[hosts[0]]]])
    jobs = []
    for jid, pattern, per_leaf, share, duty, period_us in MIX_64:
        nodes = sorted(str(leaf.pop()) for leaf in leaves for _ in range(per_leaf))
        n = len(nodes)
        dims = (4, n // 4) if pattern == "halo" else None
        jobs.append(
            Job(
                jid,
                tuple(nodes),
                pattern,
                share * link,
                duty,
                period_us * 1e-6 * stretch,
                halo_dims=dims,
            )
        )
    return jobs


def jobs_2048(net: Network, shrink: int = 1) -> list[Job]:
    """20 jobs on 90 % of the hosts (see the module docstring), each *shrink* times
    smaller (the same draws)."""
    rng = np.random.default_rng(SEED)
    hosts = compute_hosts(net)
    sizes = [384, 256, 192, 160, 128, 128, 96, 96, 64, 64, 64, 48, 48, 32, 32, 32, 32, 16, 16, 16]
    sizes = [n // shrink for n in sizes]
    assert sum(sizes) <= len(hosts)
    link = float(net.capacity[net.router.port_index[net.hosts[hosts[0]]]])
    scattered = set(rng.choice(len(sizes), 6, replace=False).tolist())
    free = list(range(len(hosts)))
    # scattered jobs first take hosts anywhere, the contiguous ones then take runs
    picks: dict[int, list[int]] = {}
    for k in sorted(scattered):
        chosen = sorted(rng.choice(free, sizes[k], replace=False).tolist())
        picks[k] = chosen
        free = sorted(set(free) - set(chosen))
    at = 0
    for k in rng.permutation(len(sizes)):
        k = int(k)
        if k in scattered:
            continue
        picks[k] = free[at : at + sizes[k]]
        at += sizes[k]
    jobs = []
    for k, n in enumerate(sizes):
        if k in (0, 3):
            pattern, share, duty = "all-to-all", rng.uniform(0.8, 0.95), rng.uniform(0.5, 0.8)
        else:
            pattern = str(rng.choice(["halo", "ring", "random-pairs"]))
            share, duty = rng.uniform(0.1, 0.7), rng.uniform(0.1, 0.5)
        dims = None
        if pattern == "halo":
            a = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
            dims = (a, n // a)
        jobs.append(
            Job(
                f"j{k + 1:02d}",
                tuple(hosts[i] for i in picks[k]),
                pattern,
                round(float(share) * link, -6),
                round(float(duty), 2),
                round(float(rng.uniform(2.0, 20.0)), 1) * 1e-3,
                halo_dims=dims,
            )
        )
    return jobs
