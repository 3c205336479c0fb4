"""The job mixes the simulator's evaluation and validation run, drawn from fixed seeds.

Shared by :mod:`bench.sim.eval` (64 hosts: :data:`TREES`, :data:`SHAPES_64`) and
:mod:`bench.sim.validate` (32 hosts: :data:`VALIDATION_TREES`, :data:`SHAPES_32`).

A mix is one job set (a *shape*: job kinds and their host counts, and the lanes they get)
on one fabric with one placement.  Every shape has one heavy all-to-all job (80-95 % of
the link rate, duty 0.6-0.85), then moderate jobs (halo or ring, 40-70 %, duty 0.3-0.5)
and light ones (ring or random pairs, 10-30 %, duty 0.1-0.3); periods of 2-12 units of
the caller's time scale.  Placements: ``contiguous`` (the jobs in a random order on
consecutive hosts) and ``fragmented`` (every leaf's hosts shuffled, then dealt out leaf by
leaf, so every job has hosts on every leaf, interleaved with the other jobs').  The same
arguments draw the same mixes.

:func:`held_out` is one more mix, fixed by hand and kept out of every tuning: three jobs
interleaved across the 8 leaves of ``2;8,8;1,2`` (:data:`HELD_OUT_XGFT`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ibqos.config.lanes import LaneConfig
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim import policies
from ibqos.sim.network import Network, xgft_network

#: evaluation fabrics: 64 hosts, 4 leaves of 16
TREES: dict[str, str] = {"2:1": "2;16,4;1,8", "4:1": "2;16,4;1,4"}
#: validation fabrics: 32 hosts, 4 leaves of 8 (the packet model's size)
VALIDATION_TREES: dict[str, str] = {"2:1": "2;8,4;1,4", "4:1": "2;8,4;1,2"}
PLACEMENTS = ("contiguous", "fragmented")
SEED = 7
#: lanes with fewer VLs than jobs
FEW_LANES = replace(policies.DEFAULT_LANES, data_vls=3, vlarb_low_cap=3)


@dataclass(frozen=True)
class Kind:
    """A job class of the mixes: its patterns and the ranges rate, duty, period come from."""

    name: str
    patterns: tuple[str, ...]
    rate: tuple[float, float]  # share of the host link rate while communicating
    duty: tuple[float, float]
    period: tuple[float, float]  # in units of the time scale


HEAVY = Kind("heavy", ("all-to-all",), (0.8, 0.95), (0.6, 0.85), (6.0, 12.0))
MODERATE = Kind("mod", ("halo", "ring"), (0.4, 0.7), (0.3, 0.5), (3.0, 8.0))
LIGHT = Kind("light", ("ring", "random-pairs"), (0.1, 0.3), (0.1, 0.3), (2.0, 6.0))

#: job sets on 64 hosts: (kind, hosts), and the lanes they get
SHAPES_64: dict[str, tuple[tuple[tuple[Kind, int], ...], LaneConfig]] = {
    "2 jobs": (((HEAVY, 32), (MODERATE, 24)), policies.DEFAULT_LANES),
    "3 jobs": (((HEAVY, 32), (MODERATE, 16), (LIGHT, 12)), policies.DEFAULT_LANES),
    "4 jobs": (((HEAVY, 24), (MODERATE, 16), (MODERATE, 12), (LIGHT, 8)), policies.DEFAULT_LANES),
    "5 jobs/3 VLs": (
        ((HEAVY, 24), (MODERATE, 12), (MODERATE, 12), (LIGHT, 8), (LIGHT, 8)),
        FEW_LANES,
    ),
}
#: the same on 32 hosts for the validation
SHAPES_32: dict[str, tuple[tuple[tuple[Kind, int], ...], LaneConfig]] = {
    "2 jobs": (((HEAVY, 16), (MODERATE, 12)), policies.DEFAULT_LANES),
    "3 jobs": (((HEAVY, 16), (MODERATE, 8), (LIGHT, 6)), policies.DEFAULT_LANES),
    "4 jobs": (((HEAVY, 12), (MODERATE, 8), (MODERATE, 6), (LIGHT, 4)), policies.DEFAULT_LANES),
}


@dataclass(frozen=True)
class Mix:
    """One job mix on one fabric with one lane configuration."""

    name: str
    tree: str  # "2:1" or "4:1"
    xgft: str
    placement: str
    shape: str
    jobs: tuple[Job, ...]
    lanes: LaneConfig

    def describe(self, link: float, unit: float, unit_name: str) -> str:
        """The jobs in one line: pattern, hosts, rate (share of the link), duty, period."""
        parts = []
        for j in self.jobs:
            pat = j.pattern if j.pattern != "all-to-all" else "a2a"
            if j.pattern == "halo" and j.halo_dims:
                pat += "(" + "x".join(map(str, j.halo_dims)) + ")"
            parts.append(
                f"{j.id} {pat} {len(j.nodes)}h {j.rate_bytes_per_s / link:.0%}"
                f" d{j.duty:.2f} {j.period_s / unit:.0f}{unit_name}"
            )
        return "; ".join(parts)


def halo_dims(n: int) -> tuple[int, ...]:
    """A near-square 2D grid of *n* hosts (1D when *n* is prime)."""
    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return (a, n // a) if a > 1 else (n,)


def leaves(net: Network) -> list[list[str]]:
    """Compute hosts (cnNNNN) per leaf switch, in host order."""
    by_leaf: dict[str, list[str]] = {}
    for host, port in sorted(net.hosts.items()):
        if not host.startswith("cn"):
            continue  # the OpenSM host
        peer = net.topo.peer(port)
        assert peer is not None
        by_leaf.setdefault(peer.node, []).append(host)
    return sorted(by_leaf.values(), key=lambda hs: hs[0])


def deal(order: Sequence[str], sizes: Sequence[int]) -> list[tuple[str, ...]]:
    """Hosts of each job: consecutive runs of *order*, *sizes[k]* hosts for job *k*,
    each sorted."""
    out = []
    at = 0
    for n in sizes:
        out.append(tuple(sorted(order[at : at + n])))
        at += n
    return out


def place(
    sizes: Sequence[int], placement: str, by_leaf: list[list[str]], rng: np.random.Generator
) -> list[tuple[str, ...]]:
    """Hosts of each job: ``contiguous`` or ``fragmented`` (see the module docstring)."""
    if placement == "contiguous":
        order = [h for hs in by_leaf for h in hs]
        out: list[tuple[str, ...]] = [()] * len(sizes)
        at = 0
        for k in rng.permutation(len(sizes)):
            out[int(k)] = tuple(order[at : at + sizes[k]])
            at += sizes[k]
        return out
    shuffled = [list(rng.permutation(hs)) for hs in by_leaf]
    dealt = [str(h) for row in zip(*shuffled, strict=True) for h in row]  # leaf by leaf
    return deal(dealt, sizes)


def make_mix(
    name: str,
    tree: str,
    xgft: str,
    placement: str,
    shape: str,
    kinds: Sequence[tuple[Kind, int]],
    lanes: LaneConfig,
    net: Network,
    unit: float,
    seed: Sequence[int],
) -> Mix:
    """Draw a mix: the jobs' parameters and their hosts."""
    rng = np.random.default_rng(list(seed))
    link = host_link(net)
    hosts = place([n for _, n in kinds], placement, leaves(net), rng)
    counts: dict[str, int] = {}
    for kind, _ in kinds:
        counts[kind.name] = counts.get(kind.name, 0) + 1
    seen: dict[str, int] = {}
    jobs = []
    for (kind, n), nodes in zip(kinds, hosts, strict=True):
        seen[kind.name] = seen.get(kind.name, 0) + 1
        jid = kind.name if counts[kind.name] == 1 else f"{kind.name}{seen[kind.name]}"
        pattern = kind.patterns[int(rng.integers(len(kind.patterns)))]
        jobs.append(
            Job(
                jid,
                nodes,
                pattern,
                round(float(rng.uniform(*kind.rate)) * link, -6),
                round(float(rng.uniform(*kind.duty)), 2),
                round(float(rng.uniform(*kind.period)), 1) * unit,
                name=kind.name,
                halo_dims=halo_dims(n) if pattern == "halo" else None,
            )
        )
    return Mix(name, tree, xgft, placement, shape, tuple(jobs), lanes)


def host_link(net: Network) -> float:
    """Bytes per second of a host's link."""
    port = net.hosts["cn0001"]
    return float(net.capacity[net.router.port_index[port]])


_NETS: dict[str, Network] = {}


def network(xgft: str) -> Network:
    """The fabric of an XGFT spec with its routes, built once per spec."""
    if xgft not in _NETS:
        _NETS[xgft] = xgft_network(parse_xgft(xgft))
    return _NETS[xgft]


def mixes(
    trees: dict[str, str],
    shapes: dict[str, tuple[tuple[tuple[Kind, int], ...], LaneConfig]],
    seeds: int,
    unit: float,
) -> list[Mix]:
    """Every mix: per tree, placement, seed (*seeds* of them) and shape, in that order;
    *unit*: the time scale of the periods (seconds)."""
    out = []
    for t, (tree, xgft) in enumerate(trees.items()):
        net = network(xgft)
        for p, placement in enumerate(PLACEMENTS):
            for s in range(seeds):
                for k, (shape, (kinds, lanes)) in enumerate(shapes.items()):
                    name = f"{tree} {placement[:4]} {shape} #{s + 1}"
                    out.append(
                        make_mix(
                            name,
                            tree,
                            xgft,
                            placement,
                            shape,
                            kinds,
                            lanes,
                            net,
                            unit,
                            (SEED, t, p, s, k),
                        )
                    )
    return out


#: the held-out mix's fabric: 8 leaves of 8 hosts, 2 uplinks each (4:1)
HELD_OUT_XGFT = "2;8,8;1,2"


def held_out() -> Mix:
    """The held-out mix on :data:`HELD_OUT_XGFT`, every job on every leaf: a 32-node
    all-to-all at 11 GB/s (duty 0.5), 16-node random pairs at 8 GB/s (duty 0.35) and a
    16-node 4x4 halo at 4 GB/s (duty 0.2), all with 20 ms iterations.  Each leaf's hosts
    in order go 4 to the all-to-all, 2 to the pairs, 2 to the halo."""
    by_leaf = leaves(network(HELD_OUT_XGFT))
    column = [h for row in zip(*by_leaf, strict=True) for h in row]  # leaf by leaf
    spec = (
        ("a2a", 32, "all-to-all", 11e9, 0.5),
        ("pairs", 16, "random-pairs", 8e9, 0.35),
        ("halo", 16, "halo", 4e9, 0.2),
    )
    jobs = []
    hosts = deal(column, [n for _, n, *_ in spec])
    for (jid, _, pattern, rate, duty), nodes in zip(spec, hosts, strict=True):
        dims = (4, 4) if pattern == "halo" else None
        jobs.append(Job(jid, nodes, pattern, rate, duty, 0.020, name=jid, halo_dims=dims))
    return Mix(
        "held-out",
        "4:1",
        HELD_OUT_XGFT,
        "interleaved",
        "3 jobs",
        tuple(jobs),
        policies.DEFAULT_LANES,
    )
