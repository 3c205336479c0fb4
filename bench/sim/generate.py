"""Random job mixes from a seed, for an evaluation nobody tuned constants to.

A mix (:func:`draw`, :class:`bench.sim.mixes.Mix`) is 2 to 6 jobs on one fat tree of
:data:`TREES` (2- and 3-level, slimmed and full; 32 hosts each, so that a hundred mixes
run in well under an hour on 2 CPUs), placed ``contiguous``, ``interleaved`` or
``fragmented`` (:data:`PLACEMENTS`).  Each job draws:

- a pattern of :data:`PATTERNS`: ``all-to-all``, ``ring``, ``halo`` (a near-square grid),
  ``random-pairs``, or a real application's matrix (``app``:
  :mod:`bench.sim.apps`, its 64 ranks folded onto 4, 8 or 16 hosts);
- its hosts: the mix fills 70-100 % of the fabric's hosts, split at random among the jobs
  (at least 2 hosts each; 4 or more, a divisor of 64, for an application's matrix);
- its rate while communicating, 30-95 % of the host link; its duty, 0.2-0.9; its
  iteration, 2-20 ms.

Lanes: ibqos's defaults (8 data VLs, SL 0 reserved), or 3 data VLs for a quarter of the
mixes of 4 jobs or more (fewer lanes than jobs).  Placements: ``contiguous`` and
``fragmented`` as :func:`bench.sim.mixes.place` makes them; ``interleaved`` deals every
leaf's hosts in order (host 1 of each leaf, then host 2, ...) to the jobs in turn of size,
so every job of a few hosts sits on many leaves.  The same seed and index draw the same
mix, whatever else is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.sim import apps
from bench.sim.mixes import FEW_LANES, Mix, deal, halo_dims, host_link, leaves, network, place
from ibqos.jobs.model import Job
from ibqos.sim import policies

#: the fabrics, by label: XGFT specs (hosts per leaf, ...; parents per node, ...)
TREES: dict[str, str] = {
    "2L 4:1": "2;8,4;1,2",
    "2L 2:1": "2;8,4;1,4",
    "2L 8 leaves 4:1": "2;4,8;1,1",
    "2L full": "2;8,4;1,8",
    "3L 4:1": "3;4,4,2;1,2,2",
    "3L full": "3;4,4,2;1,4,4",
}
PLACEMENTS = ("contiguous", "interleaved", "fragmented")
PATTERNS = ("all-to-all", "ring", "halo", "random-pairs", "app")
#: host counts an application's 64 ranks fold onto
APP_HOSTS = (4, 8, 16)
JOBS = (2, 6)  # fewest, most
RATE = (0.3, 0.95)  # share of the host link while communicating
DUTY = (0.2, 0.9)
PERIOD_S = (0.002, 0.020)
FILL = (0.7, 1.0)  # share of the fabric's hosts the jobs take
SEED = 43


def interleave(sizes: Sequence[int], by_leaf: list[list[str]]) -> list[tuple[str, ...]]:
    """Hosts of each job, dealt leaf by leaf in host order: the first job takes the first
    *sizes[0]* hosts of the order (host 1 of every leaf, host 2 of every leaf, ...)."""
    width = max(len(hs) for hs in by_leaf)
    order = [hs[k] for k in range(width) for hs in by_leaf if k < len(hs)]
    return deal(order, sizes)


def _sizes(rng: np.random.Generator, patterns: list[str], hosts: int) -> list[int]:
    """Host counts: shares of a fill of the fabric, at least 2 each (apps: of
    :data:`APP_HOSTS`), their sum within *hosts*."""
    total = int(hosts * rng.uniform(*FILL))
    shares = rng.dirichlet(np.full(len(patterns), 2.0))
    sizes = []
    for p, share in zip(patterns, shares, strict=True):
        n = max(2, int(share * total))
        if p == "app":
            n = max((h for h in APP_HOSTS if h <= n), default=APP_HOSTS[0])
        sizes.append(n)
    while sum(sizes) > hosts:  # shrink the largest until the jobs fit
        k = int(np.argmax(sizes))
        smaller = [h for h in APP_HOSTS if h < sizes[k]] if patterns[k] == "app" else []
        sizes[k] = smaller[-1] if smaller else sizes[k] - 1
    return sizes


def draw(seed: int, index: int) -> Mix:
    """Mix *index* of seed *seed* (module docstring)."""
    rng = np.random.default_rng([seed, index])
    label = list(TREES)[int(rng.integers(len(TREES)))]
    xgft = TREES[label]
    placement = PLACEMENTS[int(rng.integers(len(PLACEMENTS)))]
    net = network(xgft)
    by_leaf = leaves(net)
    hosts = sum(len(hs) for hs in by_leaf)
    k = int(rng.integers(JOBS[0], JOBS[1] + 1))
    patterns = [PATTERNS[int(rng.integers(len(PATTERNS)))] for _ in range(k)]
    sizes = _sizes(rng, patterns, hosts)
    if placement == "interleaved":
        placed = interleave(sizes, by_leaf)
    else:
        placed = place(sizes, placement, by_leaf, rng)
    link = host_link(net)
    jobs = []
    for i, (pattern, nodes) in enumerate(zip(patterns, placed, strict=True)):
        rate = round(float(rng.uniform(*RATE)) * link, -6)
        duty = round(float(rng.uniform(*DUTY)), 2)
        period = round(float(rng.uniform(*PERIOD_S)), 4)
        jid = f"j{i + 1}"
        if pattern == "app":
            app = apps.APPS[int(rng.integers(len(apps.APPS)))]
            jobs.append(apps.app_job(jid, app, nodes, rate, duty, period))
            continue
        dims = halo_dims(len(nodes)) if pattern == "halo" else None
        jobs.append(Job(jid, nodes, pattern, rate, duty, period, name=pattern, halo_dims=dims))
    lanes = policies.DEFAULT_LANES
    if k >= 4 and rng.uniform() < 0.25:
        lanes = FEW_LANES
    vls = " 3 VLs" if lanes is FEW_LANES else ""
    name = f"gen {seed}/{index} {label} {placement[:5]} {k} jobs{vls}"
    return Mix(name, label, xgft, placement, f"{k} jobs{vls}", tuple(jobs), lanes)


def generate(count: int, seed: int = SEED, start: int = 0) -> list[Mix]:
    """Mixes *start* to *start + count - 1* of *seed*."""
    return [draw(seed, i) for i in range(start, start + count)]


def app_mixes() -> list[Mix]:
    """The named mixes of real applications' matrices (:data:`bench.sim.apps.APP_MIXES`),
    on ibqos's default lanes; ``fragmented`` placements drawn from :data:`SEED`."""
    out = []
    for k, (name, xgft, placement, spec) in enumerate(apps.APP_MIXES):
        net = network(xgft)
        by_leaf = leaves(net)
        sizes = [n for _, n, _, _, _ in spec]
        if placement == "interleaved":
            placed = interleave(sizes, by_leaf)
        else:
            placed = place(sizes, placement, by_leaf, np.random.default_rng([SEED, k]))
        link = host_link(net)
        jobs = tuple(
            apps.app_job(app, app, nodes, round(share * link, -6), duty, period)
            for (app, _, share, duty, period), nodes in zip(spec, placed, strict=True)
        )
        label = name.split(" ", 2)[-1]
        out.append(
            Mix(name, label, xgft, placement, f"{len(jobs)} apps", jobs, policies.DEFAULT_LANES)
        )
    return out
