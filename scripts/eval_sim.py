"""Evaluate the QoS policies with the contention simulator, and check the fluid model.

Usage: python scripts/eval_sim.py [--seeds N] [--iterations N] [--svg DIR] [--json FILE]
       python scripts/eval_sim.py --validate [--seeds N] [--iterations N] [--json FILE]
       (either: [--fluid-buffers N], the fluid model's switch buffers; default as
       ``ibqos simulate``: 8 packets per lane per input, as the senders are per host)

**Evaluation** (issue 7, item 6; fluid model).  Mixes on two slimmed two-level fat trees of
64 hosts (4 leaf switches of 16 hosts, EDR links): ``2;16,4;1,8`` (8 uplinks per leaf,
2:1) and ``2;16,4;1,4`` (4 uplinks, 4:1).  Per tree, placement and seed, four mixes: 2, 3
and 4 jobs on ibqos's default lanes (8 data VLs, SL 0 reserved), and 5 jobs on 3 lanes
(``data_vls=3, vlarb_low_cap=3``: more jobs than lanes).  Every mix has one heavy
all-to-all job (80-95 % of the link rate, duty 0.6-0.85), then moderate jobs (halo or
ring, 40-70 %, duty 0.3-0.5) and light ones (ring or random pairs, 10-30 %, duty 0.1-0.3);
periods of a few ms (iterations of 2-12 ms).  Placements: ``contiguous`` (the jobs in a
random order on consecutive hosts) and ``fragmented`` (every leaf's hosts shuffled, then
dealt out leaf by leaf, so every job has hosts on every leaf, interleaved with the other
jobs').  Every policy of :mod:`ibqos.sim.policies` runs on every mix; ``optimal`` is its
exhaustive search (the same candidates as :func:`ibqos.sim.policies.optimal`, evaluated
here so the spread of the whole search space can be reported too).  ibqos's variants run
too: other weight laws, ibqos's lanes with the weights reversed (``ibqos ratio 1/2``), and
``ibqos tuned``, the best by observation of ibqos's law at ratios 2, 1, 4 and 1/2
(:func:`tuned`; each model tunes on what it shows), and ``ibqos best ratio``, the best of
the same by total contention.  Prints the mixes, a
table of total contention and E per mix, ibqos's gap to the optimum, summaries, and the
setups where ibqos is more than 5 % off; ``--svg DIR`` writes two SVG charts
(``sim-eval-contention.svg``, ``sim-eval-gap.svg``; hand-written SVG, no plotting
library).

**Validation** (``--validate``; issue 7, item 3).  Small mixes on 32 hosts (``2;8,4;1,4``
2:1 and ``2;8,4;1,2`` 4:1), 2, 3 and 4 jobs of the same kinds with periods of 20-120 us
(a few hundred KB per host per iteration), 4 iterations, 3 seeds (36 mixes); ``--scale X``
makes every period X times longer.  Policies one-vl, equal, bandwidth, ibqos and optimal
(the fluid model's optimum) and ibqos's variants run with both models; per mix,
Spearman's rank correlation (average ranks for ties) of the policies' total contention
between the models, and every job's contention error (fluid - packet), absolute and
relative to its T_alone in the packet model.  Then the two mechanisms behind the
differences, each isolated in a two-job case (:func:`mechanisms`).

Everything is drawn from fixed seeds: the same command prints the same mixes.  Tables go
to stdout (Markdown), one progress line per mix to stderr.  docs/simulate-evaluation.md
and docs/simulate-validation.md hold runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from bench_plan import machine

from ibqos.config.lanes import (
    LaneConfig,
)
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.jobfile import Job
from ibqos.sim import fluid as fluid_model
from ibqos.sim import policies
from ibqos.sim.evaluate import Outcome, alone, evaluate
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.packet import PACKET_BUFFER
from ibqos.sim.qos import Arbitration
from ibqos.sim.report import buffers_text
from ibqos.sim.workload import SimJob, prepare

#: evaluation fabrics: 64 hosts, 4 leaves of 16
TREES: dict[str, str] = {"2:1": "2;16,4;1,8", "4:1": "2;16,4;1,4"}
#: validation fabrics: 32 hosts, 4 leaves of 8 (the packet model's size)
VALIDATION_TREES: dict[str, str] = {"2:1": "2;8,4;1,4", "4:1": "2;8,4;1,2"}
PLACEMENTS = ("contiguous", "fragmented")
SEED = 7
#: lanes with fewer VLs than jobs
FEW_LANES = replace(policies.DEFAULT_LANES, data_vls=3, vlarb_low_cap=3)
EVAL_POLICIES = ("one-vl", "equal", "bandwidth", "ibqos")
MAIN = (*EVAL_POLICIES, "optimal")
#: ibqos with other weight laws (the plan's ``lanes`` options), to see what would close gaps
VARIANTS: dict[str, Callable[[LaneConfig], LaneConfig]] = {
    "ibqos ratio 1.5": lambda lanes: replace(lanes, weight_ratio=1.5),
    "ibqos linear": lambda lanes: replace(lanes, weight_law="linear"),
    "ibqos equal": lambda lanes: replace(lanes, weight_law="equal"),
    "ibqos ratio 4": lambda lanes: replace(lanes, weight_ratio=4.0),
}
#: ibqos's lanes with their weights reversed, the most intense lane's the largest: ratio 1/2,
#: against the method (DESIGN section 1), which ibqos's configuration does not allow
REVERSED = "ibqos ratio 1/2"
#: ibqos tuning its weight ratio by observation (DESIGN section 1; docs/simulate-evaluation.md,
#: "What would fix it" 4): each of these setups tried on the fabric (here: in the model at
#: hand), the one the jobs progress best under kept.  ibqos's own law comes first, so it is
#: kept unless another does better.  Not in the agent (yet): a measure of what it would gain.
TUNE_CANDIDATES = ("ibqos", "ibqos equal", "ibqos ratio 4", REVERSED)
TUNED = "ibqos tuned"
#: the candidate with the least total contention: what tuning would keep if it weighed each
#: job's slowdown by the job's time, as the total does (iteration lengths from its profile)
BEST_RATIO = "ibqos best ratio"
#: the variants the reports show
SHOWN = (*VARIANTS, REVERSED, TUNED, BEST_RATIO)
GAP_TARGET = 0.05
#: item 3's target for the rank correlation between the models
RHO_TARGET = 0.9
#: time scale of the validation mixes' periods (s): heavy jobs iterate every 60-120 us
VALIDATION_UNIT_S = 10e-6
#: round-off below this is no contention (seconds)
CLEAN_S = 1e-9
#: totals closer than this share of the mix's one-vl total (or its largest) are a tie
TIE = 0.01


def clean(total_s: float) -> float:
    """A total contention with round-off (under :data:`CLEAN_S`) as none."""
    return 0.0 if abs(total_s) < CLEAN_S else total_s


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


# -- mixes ----------------------------------------------------------------------------------


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
    out = []
    at = 0
    for n in sizes:
        out.append(tuple(sorted(dealt[at : at + n])))
        at += n
    return out


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
    if xgft not in _NETS:
        _NETS[xgft] = xgft_network(parse_xgft(xgft))
    return _NETS[xgft]


def mixes(
    trees: dict[str, str],
    shapes: dict[str, tuple[tuple[tuple[Kind, int], ...], LaneConfig]],
    seeds: int,
    unit: float,
) -> list[Mix]:
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


# -- running --------------------------------------------------------------------------------


@dataclass
class MixResult:
    """A mix under every policy (one model)."""

    mix: Mix
    outcomes: dict[str, Outcome]
    searched: list[float] = field(default_factory=list)  # totals of the optimal search
    wall_s: float = 0.0

    def total(self, policy: str) -> float:
        return clean(self.outcomes[policy].total_contention_s)

    @property
    def contended(self) -> bool:
        """Policies make a difference: one-vl has contention."""
        return self.total("one-vl") > CLEAN_S

    def gap(self, policy: str = "ibqos") -> float:
        """The policy's total over the optimum's, minus 1 (0 when both are 0)."""
        opt, ib = self.total("optimal"), self.total(policy)
        if opt <= CLEAN_S:
            return 0.0 if ib <= CLEAN_S else math.inf
        return ib / opt - 1.0


def reversed_weights(arb: Arbitration, lanes: LaneConfig) -> Arbitration:
    """*arb*'s job lanes with their packets per round reversed: a lane of k packets gets
    ``most / k`` (rounded as :func:`ibqos.sim.policies.grouped` does), where *most* is the
    largest lane's.  Of a geometric law's weights, the same law with the inverse ratio."""
    packets: dict[int, int] = {}
    for vl, weight in arb.vlarb_low:
        packets[vl] = packets.get(vl, 0) + arb.packets(weight)
    vls = sorted({arb.vl_of(jid) for jid in arb.job_sl})
    groups = [[jid for jid in arb.job_sl if arb.vl_of(jid) == vl] for vl in vls]
    most = max(packets[vl] for vl in vls)
    return policies.grouped(groups, [most / packets[vl] for vl in vls], lanes, REVERSED)


def tuned(outcomes: dict[str, Outcome], by_total: bool = False) -> Outcome:
    """The candidate of :data:`TUNE_CANDIDATES` an agent tuning by observation would keep.

    What an agent sees of a job is its injected bytes per second (its hosts' own counters),
    so it sees slowdowns, not contention: a job's time under a candidate over its least
    time under any of them (its rate at best over its rate then).  The pick has the least
    node-weighted sum of those slowdowns (wasted node-time per unit of time, with the best
    seen standing in for alone); ties keep the earlier candidate.  *by_total*: the least
    total contention instead (:data:`BEST_RATIO`).
    """
    tried = [outcomes[name] for name in TUNE_CANDIDATES]
    if by_total:
        return replace(min(tried, key=lambda o: o.total_contention_s), policy=BEST_RATIO)
    best_s = [min(ts) for ts in zip(*([j.t_sharing_s for j in o.jobs] for o in tried), strict=True)]

    def slowdowns(o: Outcome) -> float:
        return math.fsum(j.nodes * j.t_sharing_s / b for j, b in zip(o.jobs, best_s, strict=True))

    return replace(min(tried, key=slowdowns), policy=TUNED)


def picks(outcomes: Iterable[Outcome]) -> str:
    """How often :func:`tuned` kept each candidate, over *outcomes* (its picks)."""
    names = [o.setup.name for o in outcomes]
    return ", ".join(f"{c} {names.count(c)}" for c in TUNE_CANDIDATES)


def search(
    net: Network,
    jobs: Sequence[SimJob],
    iterations: int,
    lanes: LaneConfig,
    t_alone: dict[str, float],
    others: Sequence[Arbitration],
    buffer_packets: int,
    model: str = "fluid",
) -> tuple[Outcome, list[float]]:
    """The exhaustive search of :func:`ibqos.sim.policies.optimal` (same candidates, same
    order, same tie-break), keeping every candidate's total, in *model* with its buffers
    (*buffer_packets*: MTU packets per lane per input); *others*: the other policies'
    setups, already built."""
    tried = policies.grid(jobs, lanes) + [replace(arb, name="optimal") for arb in others]
    return policies.best_of(
        model, net, jobs, tried, iterations, t_alone, buffer_packets=buffer_packets
    )


def run_fluid(
    mix: Mix, iterations: int, fluid_buffers: int | None, with_optimal: bool = True
) -> MixResult:
    """The mix under every policy in the fluid model, with *fluid_buffers* packets of
    switch buffer per lane per input (in every run, the policies' own runs too; None:
    ``ibqos simulate``'s default, :func:`ibqos.sim.fluid.auto_buffers`)."""
    start = time.perf_counter()
    net = network(mix.xgft)
    jobs = prepare(net, mix.jobs)
    bp = fluid_model.auto_buffers(jobs, given=fluid_buffers)
    base = policies.one_vl(jobs, mix.lanes)
    t_alone = alone("fluid", net, jobs, base, iterations, buffer_packets=bp)
    setups = {
        p: policies.build(p, net, jobs, iterations, mix.lanes, buffer_packets=bp)
        for p in EVAL_POLICIES
    }
    outcomes = {
        p: evaluate("fluid", net, jobs, arb, iterations, t_alone, buffer_packets=bp)
        for p, arb in setups.items()
    }
    for name, change in VARIANTS.items():
        arb = policies.build("ibqos", net, jobs, iterations, change(mix.lanes), buffer_packets=bp)
        setups[name] = replace(arb, name=name)
        outcomes[name] = evaluate(
            "fluid", net, jobs, setups[name], iterations, t_alone, buffer_packets=bp
        )
    setups[REVERSED] = reversed_weights(setups["ibqos"], mix.lanes)
    outcomes[REVERSED] = evaluate(
        "fluid", net, jobs, setups[REVERSED], iterations, t_alone, buffer_packets=bp
    )
    outcomes[TUNED] = tuned(outcomes)
    outcomes[BEST_RATIO] = tuned(outcomes, by_total=True)
    result = MixResult(mix, outcomes)
    if with_optimal:
        others = [setups[p] for p in EVAL_POLICIES]
        best, totals = search(net, jobs, iterations, mix.lanes, t_alone, others, bp)
        outcomes["optimal"] = best
        result.searched = totals
    result.wall_s = time.perf_counter() - start
    return result


def setup_text(arb: Arbitration, jobs: Sequence[Job]) -> str:
    """Which lane every job is on and each lane's packets per round."""
    packets = arb.low_packets()
    lanes: dict[int, list[str]] = {}
    for j in jobs:
        lanes.setdefault(arb.vl_of(j.id), []).append(j.id)
    return ", ".join(
        f"VL{vl}[{'+'.join(ids)}]:{packets.get(vl, 0)}" for vl, ids in sorted(lanes.items())
    )


# -- output helpers -------------------------------------------------------------------------


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def eff(base: float, x: float) -> str:
    if x <= CLEAN_S:
        return "inf" if base > CLEAN_S else "-"
    return f"{base / x:.2f}"


def pct(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x * 100:+.1f} %"


def geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else math.nan


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: int = 1) -> list[str]:
    """A Markdown table; columns from *right* on are right-aligned."""
    out = ["| " + " | ".join(header) + " |"]
    out.append("|" + "|".join("---" if i < right else "---:" for i in range(len(header))) + "|")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# -- evaluation report ----------------------------------------------------------------------


def eval_report(results: list[MixResult], iterations: int, link: float) -> list[str]:
    out = ["## Mixes", ""]
    out += table(
        ["mix", "jobs: id pattern hosts rate duty period"],
        [[r.mix.name, r.mix.describe(link, 1e-3, "ms")] for r in results],
        right=9,
    )
    out += ["", f"## Total contention per mix (fluid model, {iterations} iterations)", ""]
    out += [
        "Total contention in ms (sum over the jobs of T_sharing - T_alone), E = one-vl's total"
        " over the policy's in brackets; gap = ibqos over optimal - 1; rank = share of the"
        " searched setups strictly better than ibqos's; the last gaps are ibqos's variants"
        f" ({', '.join(SHOWN)}).",
        "",
    ]
    rows = []
    for r in results:
        base = r.total("one-vl")
        row = [r.mix.name, ms(base)]
        for p in MAIN[1:]:
            row.append(f"{ms(r.total(p))} ({eff(base, r.total(p))})")
        better = sum(1 for t in r.searched if t < r.total("ibqos") * (1 - 1e-9) - CLEAN_S)
        row += [pct(r.gap()), f"{better / len(r.searched):.0%} of {len(r.searched)}"]
        row += [pct(r.gap(v)) for v in SHOWN]
        row.append(f"{r.wall_s:.1f}")
        rows.append(row)
    out += table(
        [
            "mix",
            "one-vl",
            "equal (E)",
            "bandwidth (E)",
            "ibqos (E)",
            "optimal (E)",
            "gap",
            "rank",
            *(f"gap {v.removeprefix('ibqos ')}" for v in SHOWN),
            "wall s",
        ],
        rows,
    )
    out += ["", "## Summary", ""]
    out += summary(results)
    live = [r for r in results if r.contended]
    out += [
        "",
        f"{TUNED} kept, on the {len(live)} mixes with contention: "
        f"{picks(r.outcomes[TUNED] for r in live)}.",
    ]
    out += ["", "## Where ibqos is more than 5 % from the optimum", ""]
    far = [r for r in results if r.gap() > GAP_TARGET]
    if not far:
        out.append("Nowhere.")
    for r in far:
        out += [f"### {r.mix.name}: gap {pct(r.gap())}", ""]
        jobs = r.mix.jobs
        rows = []
        for p in [*MAIN, *SHOWN]:
            o = r.outcomes[p]
            per = {j.id: j.contention_s for j in o.jobs}
            rows.append(
                [p, setup_text(o.setup, jobs)]
                + [ms(max(per[j.id], 0.0)) for j in jobs]
                + [ms(r.total(p))]
            )
        out += table(
            ["policy", "lanes: VL[jobs]:packets per round"] + [j.id for j in jobs] + ["total"],
            rows,
            right=2,
        )
        alone_ms = ", ".join(f"{j.id} {ms(j.t_alone_s)}" for j in r.outcomes["one-vl"].jobs)
        out += ["", f"Contention per job in ms; T_alone: {alone_ms} ms.", ""]
    return out


def groups(results: list[MixResult]) -> dict[str, list[MixResult]]:
    """Mixes by tree and placement, by shape, and all of them."""
    out: dict[str, list[MixResult]] = {}
    for r in results:
        out.setdefault(f"{r.mix.tree} {r.mix.placement}", []).append(r)
    for r in results:
        out.setdefault(r.mix.shape, []).append(r)
    out["all"] = list(results)
    return out


def versus(rs: Sequence[MixResult], policy: str, other: str) -> str:
    """Mixes where *policy*'s total is lower / higher than *other*'s by more than 0.5 %."""
    win = sum(1 for r in rs if r.total(policy) < r.total(other) * 0.995 - CLEAN_S)
    lose = sum(1 for r in rs if r.total(policy) > r.total(other) * 1.005 + CLEAN_S)
    return f"{win}/{lose}"


def summary(results: list[MixResult]) -> list[str]:
    pols = [*MAIN[1:], *SHOWN]
    out = [
        "Per group of mixes, over those with contention under one-vl: the mean of each"
        " policy's total relative to one-vl's (lower is better; 1/E) and the geometric mean"
        " of E (mixes where a policy removed all contention left out of its E).",
        "",
    ]
    rows = []
    for key, rs in groups(results).items():
        live = [r for r in rs if r.contended]
        row = [key, f"{len(live)}/{len(rs)}"]
        for p in pols:
            if not live:
                row.append("-")
                continue
            rel = statistics.fmean(r.total(p) / r.total("one-vl") for r in live)
            effs = [r.total("one-vl") / r.total(p) for r in live if r.total(p) > CLEAN_S]
            row.append(f"{rel:.3f} / {geomean(effs):.2f}" if effs else f"{rel:.3f} / inf")
        rows.append(row)
    out += table(["mixes", "contended", *(f"{p}: rel / E" for p in pols)], rows)
    out += [
        "",
        "ibqos (and its variants) against the optimum and the other policies, per group:"
        " mixes within 5 % of the optimum, and mixes where it beats / loses to equal and"
        " bandwidth (by more than 0.5 %).",
        "",
    ]
    rows = []
    for key, rs in groups(results).items():
        row = [key]
        for p in ("ibqos", *SHOWN):
            within = sum(1 for r in rs if r.gap(p) <= GAP_TARGET)
            row.append(
                f"{within}/{len(rs)}; {versus(rs, p, 'equal')}; {versus(rs, p, 'bandwidth')}"
            )
        rows.append(row)
    out += table(
        ["mixes", *(f"{p}: ≤ 5 %; vs equal; vs bandwidth" for p in ("ibqos", *SHOWN))], rows
    )
    out += ["", "Over all mixes:", ""]
    rows = []
    for p in ("ibqos", *SHOWN, "equal", "bandwidth", "one-vl"):
        gaps = [r.gap(p) for r in results if r.contended]
        rows.append(
            [
                p,
                pct(statistics.median(gaps)) if gaps else "-",
                pct(statistics.fmean(gaps)) if gaps else "-",
                pct(max(gaps)) if gaps else "-",
                f"{sum(r.gap(p) <= GAP_TARGET for r in results)}/{len(results)}",
                ms(math.fsum(r.total(p) for r in results)),
            ]
        )
    out += table(
        [
            "policy",
            "gap to optimum: median",
            "mean",
            "max",
            "≤ 5 % off",
            "total contention, all mixes (ms)",
        ],
        rows,
    )
    return out


# -- SVG charts (no plotting library needed) -------------------------------------------------

COLORS = {
    "one-vl": "#9e9e9e",
    "equal": "#4e79a7",
    "bandwidth": "#f28e2b",
    "ibqos": "#59a14f",
    "optimal": "#b07aa1",
}


def _svg(width: int, height: int, body: list[str]) -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
            f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            *body,
            "</svg>",
            "",
        ]
    )


def _axis(
    x0: float, y0: float, w: float, h: float, top: float, ticks: Sequence[float], fmt: str
) -> list[str]:
    body = [f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - h}" stroke="black"/>']
    body.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + w}" y2="{y0}" stroke="black"/>')
    for t in ticks:
        y = y0 - h * t / top
        body.append(
            f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#e0e0e0"/>'
        )
        body.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt.format(t)}</text>')
    return body


def svg_contention(results: list[MixResult]) -> str:
    """Grouped bars: mean total contention relative to one-vl, per policy and group."""
    pols = list(MAIN)
    keys = [k for k in groups(results) if any(r.contended for r in groups(results)[k])]
    data = {
        k: [
            statistics.fmean(
                r.total(p) / r.total("one-vl") for r in groups(results)[k] if r.contended
            )
            for p in pols
        ]
        for k in keys
    }
    top = max(1.2, max(max(v) for v in data.values()) * 1.05)
    x0, y0, h, gw = 60, 300, 240, 40 + 14 * len(pols)
    w = gw * len(keys)
    body = _axis(x0, y0, w, h, top, [i * 0.2 for i in range(int(top / 0.2) + 1)], "{:.1f}")
    body.append(
        f'<text x="{x0}" y="20" font-size="14">Total contention relative to one-vl'
        " (mean over contended mixes; lower is better)</text>"
    )
    for g, k in enumerate(keys):
        gx = x0 + g * gw + 20
        for i, (p, v) in enumerate(zip(pols, data[k], strict=True)):
            bh = h * v / top
            body.append(
                f'<rect x="{gx + i * 14}" y="{y0 - bh:.1f}" width="12" height="{bh:.1f}"'
                f' fill="{COLORS[p]}"><title>{p} {k}: {v:.3f}</title></rect>'
            )
        body.append(f'<text x="{gx + 7 * len(pols)}" y="{y0 + 16}" text-anchor="middle">{k}</text>')
    for i, p in enumerate(pols):
        lx = x0 + 10 + i * 100
        body.append(f'<rect x="{lx}" y="{y0 + 34}" width="12" height="12" fill="{COLORS[p]}"/>')
        body.append(f'<text x="{lx + 16}" y="{y0 + 44}">{p}</text>')
    return _svg(x0 + w + 20, y0 + 60, body)


def svg_gap(results: list[MixResult]) -> str:
    """One bar per contended mix: ibqos's gap to the optimum, with the 5 % target."""
    live = [r for r in results if r.contended]
    gaps = [min(r.gap(), 10.0) for r in live]
    top = max(0.1, max(gaps, default=0.0) * 1.1)
    step = 0.05 if top <= 0.3 else 0.1 if top <= 1 else 0.5
    x0, y0, h, bw = 60, 300, 240, 22
    w = bw * len(live) + 20
    body = _axis(x0, y0, w, h, top, [i * step for i in range(int(top / step) + 1)], "{:.0%}")
    body.append(
        f'<text x="{x0}" y="20" font-size="14">ibqos over the optimum - 1 (total contention),'
        " per contended mix; dashed: 5 %</text>"
    )
    for i, (r, g) in enumerate(zip(live, gaps, strict=True)):
        bh = h * g / top
        x = x0 + 10 + i * bw
        color = COLORS["ibqos"] if g <= GAP_TARGET else "#e15759"
        body.append(
            f'<rect x="{x}" y="{y0 - bh:.1f}" width="{bw - 4}" height="{bh:.1f}"'
            f' fill="{color}"><title>{r.mix.name}: {pct(r.gap())}</title></rect>'
        )
        body.append(
            f'<text x="{x + bw / 2 - 2}" y="{y0 + 8}" font-size="10" text-anchor="end"'
            f' transform="rotate(-60 {x + bw / 2 - 2} {y0 + 8})">{r.mix.name}</text>'
        )
    y5 = y0 - h * GAP_TARGET / top
    body.append(
        f'<line x1="{x0}" y1="{y5:.1f}" x2="{x0 + w}" y2="{y5:.1f}" stroke="black"'
        ' stroke-dasharray="4 3"/>'
    )
    return _svg(max(x0 + w + 20, 660), y0 + 150, body)


# -- validation -----------------------------------------------------------------------------


def average_ranks(xs: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties sharing the average of their ranks."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); nan if either is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = math.fsum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = math.fsum((x - ma) ** 2 for x in ra)
    vb = math.fsum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else math.nan


def snap(totals: Sequence[float], tol: float) -> list[float]:
    """Totals within *tol* of the largest one's scale made equal (ties), for the tolerant
    rank correlation: differences the models cannot resolve are no ranking."""
    scale = max(max(totals), CLEAN_S)
    return [round(t / (scale * tol)) if tol > 0 else t for t in totals]


@dataclass
class Validation:
    mix: Mix
    fluid: dict[str, Outcome]
    packet: dict[str, Outcome]
    wall_fluid_s: float
    wall_packet_s: float
    #: the packet model's own optimum (``--packet-search``), and every searched total
    packet_optimal: Outcome | None = None
    packet_searched: list[float] = field(default_factory=list)
    #: the fluid model's searched totals, in the same order
    fluid_searched: list[float] = field(default_factory=list)

    def total(self, model: str, policy: str) -> float:
        return clean((self.fluid if model == "fluid" else self.packet)[policy].total_contention_s)

    def packet_gap(self, policy: str = "ibqos") -> float:
        """*policy*'s total over the packet model's optimum's, minus 1; totals closer than
        :data:`TIE` of one-vl's total count as equal (0), as the tolerant rho does."""
        assert self.packet_optimal is not None
        opt, got = self.packet_optimal.total_contention_s, self.total("packet", policy)
        if got - opt <= TIE * max(self.total("packet", "one-vl"), CLEAN_S):
            return 0.0
        return (got - opt) / opt if opt > 0 else math.inf

    def totals(self, model: str, pols: Sequence[str] = MAIN) -> list[float]:
        return [self.total(model, p) for p in pols]

    def setup_rho(self, tol: float = 0.0) -> float:
        """The models' rank agreement over every setup both searched (nan: none)."""
        f, p = self.fluid_searched, self.packet_searched
        if not f or len(f) != len(p):
            return math.nan
        f, p = [clean(t) for t in f], [clean(t) for t in p]
        return spearman(snap(f, tol), snap(p, tol)) if tol else spearman(f, p)

    def rho(self, tol: float = 0.0, own_optimum: bool = False) -> float:
        """The models' rank agreement over the five policies; with *own_optimum*, the
        packet model's ``optimal`` is its own search's best, not the fluid model's pick."""
        f, p = self.totals("fluid"), self.totals("packet")
        if own_optimum:
            assert self.packet_optimal is not None
            p[MAIN.index("optimal")] = clean(self.packet_optimal.total_contention_s)
        return spearman(snap(f, tol), snap(p, tol)) if tol else spearman(f, p)


def run_validation(
    mix: Mix,
    iterations: int,
    buffer_packets: int,
    fluid_buffers: int | None,
    packet_search: bool = False,
) -> Validation:
    """The mix in both models: *buffer_packets* the packet model's input buffers per VL,
    *fluid_buffers* the fluid model's switch buffers per lane per input (None: as
    :func:`run_fluid`); with *packet_search*, the exhaustive search in the packet model
    too."""
    net = network(mix.xgft)
    jobs = prepare(net, mix.jobs)
    start = time.perf_counter()
    fluid = run_fluid(mix, iterations, fluid_buffers)
    wall_fluid = time.perf_counter() - start
    start = time.perf_counter()
    base = policies.one_vl(jobs, mix.lanes)
    t_alone = alone("packet", net, jobs, base, iterations, buffer_packets=buffer_packets)
    packet = {
        p: evaluate(
            "packet", net, jobs, o.setup, iterations, t_alone, buffer_packets=buffer_packets
        )
        for p, o in fluid.outcomes.items()
        if p not in (TUNED, BEST_RATIO)
    }
    packet[TUNED] = tuned(packet)  # tuned on what the packet model shows
    packet[BEST_RATIO] = tuned(packet, by_total=True)
    v = Validation(mix, fluid.outcomes, packet, wall_fluid, 0.0, fluid_searched=fluid.searched)
    if packet_search:
        others = [fluid.outcomes[p].setup for p in EVAL_POLICIES]
        v.packet_optimal, v.packet_searched = search(
            net, jobs, iterations, mix.lanes, t_alone, others, buffer_packets, "packet"
        )
    v.wall_packet_s = time.perf_counter() - start
    return v


def buffers_used(outcomes: Iterable[Outcome]) -> str:
    """The switch buffers the runs of *outcomes* had, as the reports say them."""
    return ", ".join(buffers_text(n) for n in sorted({o.buffer_packets for o in outcomes})) or "-"


def quantiles(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    s = sorted(xs)

    def q(f: float) -> float:
        return s[min(len(s) - 1, round(f * (len(s) - 1)))]

    return f"{q(0.5):.3g} / {q(0.9):.3g} / {s[-1]:.3g}"


def rho_text(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def relative_to_one_vl(vals: list[Validation], model: str, policy: str) -> float:
    """The policy's mean total relative to one-vl's, over the mixes where *model* sees
    contention under one-vl."""
    live = [v for v in vals if v.total(model, "one-vl") > CLEAN_S]
    return statistics.fmean(v.total(model, policy) / v.total(model, "one-vl") for v in live)


def set_ranking(vals: list[Validation]) -> list[str]:
    """The five policies ranked over the whole set of mixes in each model, two ways: by
    their summed totals, and by their mean total relative to one-vl's (each mix where the
    model sees contention under one-vl counting alike), with Spearman's rho of each."""
    out = ["Over the whole set, the policies ranked by total contention in each model:", ""]
    rows = []
    for name in ("sum of totals", "mean relative to one-vl"):
        ranked = {}
        for model in ("fluid", "packet"):
            if name == "sum of totals":
                score = [math.fsum(v.total(model, p) for v in vals) for p in MAIN]
            else:
                score = [relative_to_one_vl(vals, model, p) for p in MAIN]
            ranked[model] = score
        order = {
            m: " < ".join(MAIN[i] for i in sorted(range(len(MAIN)), key=s.__getitem__))
            for m, s in ranked.items()
        }
        rows.append(
            [
                name,
                order["fluid"],
                order["packet"],
                rho_text(spearman(ranked["fluid"], ranked["packet"])),
            ]
        )
    return out + table(["ranked by", "fluid (best first)", "packet (best first)", "rho"], rows)


def packet_search_report(vals: list[Validation]) -> list[str]:
    """ibqos (and equal, bandwidth, the fluid model's pick) against the packet model's own
    exhaustive optimum, per mix and per shape (``--packet-search``)."""
    done = [v for v in vals if v.packet_optimal is not None]
    pols = ("equal", "bandwidth", "ibqos", TUNED, BEST_RATIO, "optimal")
    out = [
        "## Against the packet model's own optimum (--packet-search)",
        "",
        "The search of `optimal` (every grouping onto the lanes x 1, 2, 4, 8 packets per"
        " round, and the four policies' setups) run in the packet model. gap: a policy's"
        " total over that optimum's - 1, 0 when within 1 % of one-vl's total; `optimal` here"
        " is the fluid model's pick.",
        "",
    ]
    rows = []
    for v in done:
        assert v.packet_optimal is not None
        ib = v.total("packet", "ibqos")
        better = sum(1 for x in v.packet_searched if x < ib - CLEAN_S)
        rows.append(
            [
                v.mix.name,
                f"{v.total('packet', 'one-vl') * 1e6:.1f}",
                f"{v.packet_optimal.total_contention_s * 1e6:.1f}",
                setup_text(v.packet_optimal.setup, v.mix.jobs),
                f"{ib * 1e6:.1f}",
                *[pct(v.packet_gap(p)) for p in pols],
                f"{better}/{len(v.packet_searched)}",
                rho_text(v.setup_rho()),
            ]
        )
    out += table(
        [
            "mix",
            "one-vl us",
            "optimum us",
            "optimum's setup (VL[jobs]:packets)",
            "ibqos us",
            *[f"gap {p}" for p in pols],
            "setups better than ibqos",
            "setup rho",
        ],
        rows,
        right=1,
    )
    out += ["", "Per shape, over the mixes with contention under one-vl:", ""]
    rows = []
    contended = [v for v in done if v.total("packet", "one-vl") > CLEAN_S]
    by_shape = {s: [v for v in contended if v.mix.shape == s] for s in SHAPES_32}
    for shape, live in [*by_shape.items(), ("all", contended)]:
        if not live:
            continue
        row = [shape, str(len(live))]
        for p in pols:
            near = sum(1 for v in live if v.packet_gap(p) <= GAP_TARGET)
            rel = statistics.fmean(v.total("packet", p) / v.total("packet", "one-vl") for v in live)
            row.append(f"{near} ({rel:.3f})")
        opt = statistics.fmean(
            (v.packet_optimal.total_contention_s if v.packet_optimal else math.nan)
            / v.total("packet", "one-vl")
            for v in live
        )
        rhos = [r for r in (v.setup_rho(TIE) for v in live) if not math.isnan(r)]
        spread = (
            f"{statistics.fmean(rhos):.2f} / {statistics.median(rhos):.2f} / {min(rhos):.2f}"
            if rhos
            else "-"
        )
        rows.append(
            [*row, f"{opt:.3f}", spread, f"{sum(r >= RHO_TARGET for r in rhos)}/{len(rhos)}"]
        )
    out += table(
        [
            "shape",
            "mixes",
            *[f"{p}: within 5 % (mean rel. one-vl)" for p in pols],
            "optimum (mean rel. one-vl)",
            "setup rho, 1 % ties: mean / median / min",
            f"setup rho ≥ {RHO_TARGET}",
        ],
        rows,
        right=1,
    )
    out += [
        "",
        "setup rho: Spearman's rank correlation between the two models' totals over every"
        " searched setup of the mix (12, 63 or 451; n/a where one model's totals are all"
        " equal); in the per-shape table with ties within 1 % of the largest total, as the"
        " tolerant rho.",
    ]
    return out


def validation_report(
    vals: list[Validation], iterations: int, link: float, unit: float
) -> list[str]:
    pols = [*MAIN, *SHOWN]
    out = ["## Mixes", ""]
    out += table(
        ["mix", "jobs: id pattern hosts rate duty period"],
        [[v.mix.name, v.mix.describe(link, 1e-6, "us")] for v in vals],
        right=9,
    )
    out += [
        "",
        f"## Total contention per mix, fluid / packet ({iterations} iterations, us)",
        "",
        "rho: Spearman's rank correlation of the five policies' totals between the models"
        " (average ranks for ties; n/a: a model sees no contention under any policy);"
        " rho 1 %: the same with totals closer than 1 % of the mix's largest total counted"
        " as ties in both models.",
        "",
    ]
    rows = []
    for v in vals:
        row = [v.mix.name]
        row += [f"{v.total('fluid', p) * 1e6:.1f} / {v.total('packet', p) * 1e6:.1f}" for p in MAIN]
        row += [
            rho_text(v.rho()),
            rho_text(v.rho(TIE)),
            f"{v.wall_fluid_s:.1f} / {v.wall_packet_s:.1f}",
        ]
        rows.append(row)
    out += table(["mix", *MAIN, "rho", "rho 1 %", "wall s fluid / packet"], rows)
    out += ["", "## Rank agreement", ""]
    rows = []
    rankings = [
        ("strict ties", [v.rho() for v in vals]),
        ("1 % ties", [v.rho(TIE) for v in vals]),
    ]
    if all(v.packet_optimal is not None for v in vals):  # --packet-search
        rankings += [
            ("each model's own optimum, strict ties", [v.rho(0.0, True) for v in vals]),
            ("each model's own optimum, 1 % ties", [v.rho(TIE, True) for v in vals]),
        ]
    for name, rs in rankings:
        ok = [r for r in rs if not math.isnan(r)]
        rows.append(
            [
                name,
                f"{len(ok)}/{len(rs)}",
                f"{statistics.fmean(ok):.3f}" if ok else "-",
                f"{statistics.median(ok):.3f}" if ok else "-",
                f"{min(ok):.3f}" if ok else "-",
                f"{sum(r >= RHO_TARGET for r in ok)}/{len(ok)}",
            ]
        )
    out += table(
        ["ranking", "mixes with a ranking", "mean rho", "median", "min", f"rho ≥ {RHO_TARGET}"],
        rows,
    )
    if len(rankings) > 2:
        out += [
            "",
            "each model's own optimum: `optimal` in the packet model is the best of its own"
            " search, as the fluid model's is of its own, instead of the fluid model's pick"
            " run in the packet model. That pick is the setup the fluid model's errors favour"
            " most, so it is the policy the two models disagree on most often.",
        ]
    same_best = 0
    for v in vals:
        tf, tp = v.totals("fluid"), v.totals("packet")
        if tp[tf.index(min(tf))] <= min(tp) * 1.01 + CLEAN_S:
            same_best += 1
    out += [
        "",
        f"The fluid model's best policy is also the packet model's best (within 1 %) on"
        f" {same_best}/{len(vals)} mixes.",
        "",
        *set_ranking(vals),
        "",
        "## The policies in each model",
        "",
        "Over the mixes where the model sees contention under one-vl: the mean of each"
        " policy's total relative to one-vl's (lower is better), and the mixes where it beats"
        " / loses to equal, bandwidth and the fluid model's optimum (by more than 1 % of"
        " one-vl's total).",
        "",
    ]
    rows = []
    for p in pols:
        row = [p]
        for model in ("fluid", "packet"):
            row.append(f"{relative_to_one_vl(vals, model, p):.3f}")
        for model in ("fluid", "packet"):
            live = [v for v in vals if v.total(model, "one-vl") > CLEAN_S]
            cells = []
            for other in ("equal", "bandwidth", "optimal"):
                tol = [TIE * v.total(model, "one-vl") for v in live]
                win = sum(
                    1
                    for v, t in zip(live, tol, strict=True)
                    if v.total(model, p) < v.total(model, other) - t
                )
                lose = sum(
                    1
                    for v, t in zip(live, tol, strict=True)
                    if v.total(model, p) > v.total(model, other) + t
                )
                cells.append(f"{win}/{lose}")
            row.append("; ".join(cells))
        rows.append(row)
    out += table(
        [
            "policy",
            "fluid: rel",
            "packet: rel",
            "fluid: vs equal; bandwidth; optimal",
            "packet: vs equal; bandwidth; optimal",
        ],
        rows,
    )
    both = [v for v in vals if v.total("packet", "one-vl") > CLEAN_S]
    out += [
        "",
        f"{TUNED}: each model tunes on what it shows. Kept, on the {len(both)} mixes the"
        f" packet model sees contention on: fluid {picks(v.fluid[TUNED] for v in both)};"
        f" packet {picks(v.packet[TUNED] for v in both)}; the same pick on"
        f" {sum(v.fluid[TUNED].setup.name == v.packet[TUNED].setup.name for v in both)}.",
    ]
    out += ["", "## Per-job contention error (fluid - packet)", ""]
    # the tuned picks may differ between the models: no per-job comparison for them
    same = [*MAIN, *VARIANTS, REVERSED]
    errs: dict[str, list[tuple[float, float]]] = {p: [] for p in same}
    for v in vals:
        for p in same:
            for jf, jp in zip(v.fluid[p].jobs, v.packet[p].jobs, strict=True):
                errs[p].append((jf.contention_s - jp.contention_s, jp.t_alone_s))
    rows = []
    everything = [e for p in MAIN for e in errs[p]]
    for name, es in [*errs.items(), ("all five", everything)]:
        rel_err = [abs(d) / t for d, t in es]
        rows.append(
            [
                name,
                str(len(es)),
                f"{statistics.fmean(d for d, _ in es) * 1e6:+.2f}",
                f"{statistics.fmean(d / t for d, t in es) * 100:+.2f}",
                quantiles([abs(d) * 1e6 for d, _ in es]),
                quantiles([x * 100 for x in rel_err]),
                f"{sum(x <= 0.05 for x in rel_err)}/{len(rel_err)}",
            ]
        )
    out += table(
        [
            "policy",
            "jobs",
            "mean error us",
            "mean error % of T_alone",
            "abs error us: median / p90 / max",
            "abs error % of T_alone: median / p90 / max",
            "≤ 5 % of T_alone",
        ],
        rows,
    )
    t_err = [
        (jf.t_alone_s - jp.t_alone_s) / jp.t_alone_s
        for v in vals
        for jf, jp in zip(v.fluid["one-vl"].jobs, v.packet["one-vl"].jobs, strict=True)
    ]
    out += [
        "",
        f"T_alone, fluid over packet - 1, per job: median {statistics.median(t_err):+.1%},"
        f" min {min(t_err):+.1%}, max {max(t_err):+.1%}.",
    ]
    worst = sorted(
        (
            (abs(jf.contention_s - jp.contention_s) / jp.t_alone_s, v, p, jf, jp)
            for v in vals
            for p in MAIN
            for jf, jp in zip(v.fluid[p].jobs, v.packet[p].jobs, strict=True)
        ),
        key=lambda x: -x[0],
    )[:10]
    out += ["", "Largest per-job errors:", ""]
    out += table(
        [
            "mix",
            "policy",
            "job",
            "T_alone fluid / packet us",
            "contention fluid / packet us",
            "error % of T_alone",
        ],
        [
            [
                v.mix.name,
                p,
                jf.id,
                f"{jf.t_alone_s * 1e6:.1f} / {jp.t_alone_s * 1e6:.1f}",
                f"{jf.contention_s * 1e6:.1f} / {jp.contention_s * 1e6:.1f}",
                f"{e:.1%}",
            ]
            for e, v, p, jf, jp in worst
        ],
        right=3,
    )
    return out


# -- the two mechanisms, isolated ------------------------------------------------------------


def _pairs(n: int, pairs: set[tuple[int, int]]) -> tuple[tuple[float, ...], ...]:
    """A matrix pattern: host a sends to host b for every (a, b) in *pairs*."""
    return tuple(tuple(1.0 if (a, b) in pairs else 0.0 for b in range(n)) for a in range(n))


def mechanisms(buffer_packets: int, fluid_buffers: int | None) -> list[str]:
    """Two jobs on ``2;8,4;1,1`` (4 leaves of 8 hosts, one spine), 1 iteration, both models
    (each with its buffers: *buffer_packets* the packet model's, *fluid_buffers* the fluid
    model's).

    - *pacing*: H has one flow leaf 1 -> leaf 2 and two flows leaf 3 -> leaf 4 (its own
      bottleneck: 16 GB/s on one 12.5 GB/s uplink, so alone it runs at 78 %); M shares
      leaf 1's uplink half of the time with 4x H's arbitration weight.  H's flow on leaf 1
      has slack: it can fall behind while M sends and catch up after.
    - *head of line*: H is an in-cast (three hosts to cn0009, 30 GB/s into one 12.5 GB/s
      link); M sends cn0002 -> cn0025 and shares only leaf 1's uplink with one of H's
      flows, with room to spare (4.2 + 8 of 12.5 GB/s).
    """
    net = network("2;8,4;1,1")
    cases = {
        "pacing": (
            Job(
                "H",
                ("cn0001", "cn0009", "cn0017", "cn0018", "cn0025", "cn0026"),
                "matrix",
                8e9,
                1.0,
                200e-6,
                matrix=_pairs(6, {(0, 1), (2, 4), (3, 5)}),
            ),
            Job("M", ("cn0002", "cn0010"), "matrix", 8e9, 0.5, 100e-6, matrix=_pairs(2, {(0, 1)})),
        ),
        "head of line": (
            Job(
                "H",
                ("cn0001", "cn0009", "cn0017", "cn0026"),
                "matrix",
                10e9,
                1.0,
                100e-6,
                matrix=_pairs(4, {(0, 1), (2, 1), (3, 1)}),
            ),
            Job("M", ("cn0002", "cn0025"), "matrix", 8e9, 1.0, 100e-6, matrix=_pairs(2, {(0, 1)})),
        ),
    }
    lanes = policies.DEFAULT_LANES
    rows = []
    for case, mix in cases.items():
        jobs = prepare(net, mix)
        setups = {
            "one-vl": policies.one_vl(jobs, lanes),
            "H 1 : M 4": policies.grouped([["H"], ["M"]], [1.0, 4.0], lanes, "H 1 : M 4"),
        }
        fluid_bp = fluid_model.auto_buffers(jobs, given=fluid_buffers)
        for model, bp in (("fluid", fluid_bp), ("packet", buffer_packets)):
            t_alone = alone(model, net, jobs, setups["one-vl"], 1, buffer_packets=bp)
            for name, arb in setups.items():
                o = evaluate(model, net, jobs, arb, 1, t_alone, buffer_packets=bp)
                rows.append(
                    [case, model, name]
                    + [
                        f"{j.t_alone_s * 1e6:.1f} / {max(j.contention_s, 0) * 1e6:.1f}"
                        for j in o.jobs
                    ]
                )
    return table(
        ["case", "model", "setup", "H: T_alone / contention us", "M: T_alone / contention us"],
        rows,
        right=3,
    )


# -- main -----------------------------------------------------------------------------------


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--validate", action="store_true", help="fluid against packet model")
    parser.add_argument(
        "--seeds", type=int, help="mixes per tree, placement, shape (default 2; validate 3)"
    )
    parser.add_argument("--iterations", type=int, help="default 10 (evaluation), 4 (validate)")
    parser.add_argument("--only", help="run the mixes whose name contains this")
    parser.add_argument("--svg", type=Path, help="write the evaluation's SVG charts here")
    parser.add_argument("--json", type=Path, help="write every total here")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="validation: periods this many times longer (the packet model's cost grows alike)",
    )
    parser.add_argument(
        "--fluid-buffers",
        type=int,
        help="the fluid model's switch buffers per lane per input, in packets, for every"
        f" run (default: as `ibqos simulate`, {fluid_model.AUTO_BUFFER_PACKETS} with senders"
        " per host, so for every mix here; 0: none, see docs/simulate-validation.md)",
    )
    parser.add_argument(
        "--packet-search",
        action="store_true",
        help="validation: also search every setup in the packet model, for ibqos's gap to"
        " its optimum (slow: minutes per 4-job mix)",
    )
    parser.add_argument(
        "--buffer-packets",
        type=int,
        default=PACKET_BUFFER,
        help=f"validation: the packet model's input buffer per VL (default {PACKET_BUFFER})",
    )
    args = parser.parse_args(argv)
    if args.fluid_buffers is not None and args.fluid_buffers < 0:
        parser.error(f"--fluid-buffers: expected 0 or more, got {args.fluid_buffers}")
    start = time.perf_counter()
    print(f"machine: {machine()}", flush=True)
    load0 = os.getloadavg()[0]
    doc: dict[str, object] = {"machine": machine()}
    if args.validate:
        iterations = args.iterations or 4
        unit = VALIDATION_UNIT_S * args.scale
        todo = mixes(VALIDATION_TREES, SHAPES_32, args.seeds or 3, unit)
        todo = [m for m in todo if not args.only or args.only in m.name]
        vals = []
        for i, mix in enumerate(todo):
            v = run_validation(
                mix, iterations, args.buffer_packets, args.fluid_buffers, args.packet_search
            )
            vals.append(v)
            _progress(
                f"[{i + 1}/{len(todo)}] {mix.name}: rho {rho_text(v.rho())},"
                f" fluid {v.wall_fluid_s:.1f} s, packet {v.wall_packet_s:.1f} s"
            )
        link = host_link(network(todo[0].xgft)) if todo else 1.0
        used = buffers_used(o for v in vals for o in v.fluid.values())
        print(
            f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after;"
            f" {time.perf_counter() - start:.0f} s in all; packet model: {args.buffer_packets}"
            f" packets of input buffer per VL; fluid model: {used}\n"
        )
        print("\n".join(validation_report(vals, iterations, link, unit)))
        if args.packet_search:
            print()
            print("\n".join(packet_search_report(vals)))
        print("\n## Two mechanisms, isolated (see mechanisms())\n")
        print("\n".join(mechanisms(args.buffer_packets, args.fluid_buffers)))
        doc["validation"] = [
            {
                "mix": v.mix.name,
                "fluid_buffer_packets": v.fluid["one-vl"].buffer_packets,
                "fluid": {p: v.total("fluid", p) for p in v.fluid},
                "packet": {p: v.total("packet", p) for p in v.packet},
                # which candidate each model kept: the two picks' "jobs" rows below may
                # pair different setups
                "picks": {
                    p: {m: o[p].setup.name for m, o in (("fluid", v.fluid), ("packet", v.packet))}
                    for p in (TUNED, BEST_RATIO)
                },
                "packet_optimal": (
                    {
                        "total_contention_s": v.packet_optimal.total_contention_s,
                        "setup": setup_text(v.packet_optimal.setup, v.mix.jobs),
                        "searched": v.packet_searched,
                        "fluid_searched": v.fluid_searched,
                    }
                    if v.packet_optimal
                    else None
                ),
                "jobs": {
                    p: [
                        [jf.id, jf.t_alone_s, jf.contention_s, jp.t_alone_s, jp.contention_s]
                        for jf, jp in zip(v.fluid[p].jobs, v.packet[p].jobs, strict=True)
                    ]
                    for p in v.fluid
                },
            }
            for v in vals
        ]
    else:
        iterations = args.iterations or 10
        todo = mixes(TREES, SHAPES_64, args.seeds or 2, 1e-3)
        todo = [m for m in todo if not args.only or args.only in m.name]
        results = []
        for i, mix in enumerate(todo):
            r = run_fluid(mix, iterations, args.fluid_buffers)
            results.append(r)
            _progress(
                f"[{i + 1}/{len(todo)}] {mix.name}: one-vl {ms(r.total('one-vl'))} ms,"
                f" ibqos {ms(r.total('ibqos'))}, optimal {ms(r.total('optimal'))}"
                f" ({pct(r.gap())}), {len(r.searched)} setups, {r.wall_s:.1f} s"
            )
        link = host_link(network(todo[0].xgft)) if todo else 1.0
        used = buffers_used(o for r in results for o in r.outcomes.values())
        print(
            f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after;"
            f" {time.perf_counter() - start:.0f} s in all; fluid model: {used}\n"
        )
        print("\n".join(eval_report(results, iterations, link)))
        if args.svg:
            args.svg.mkdir(parents=True, exist_ok=True)
            (args.svg / "sim-eval-contention.svg").write_text(svg_contention(results))
            (args.svg / "sim-eval-gap.svg").write_text(svg_gap(results))
        doc["evaluation"] = [
            {
                "mix": r.mix.name,
                "fluid_buffer_packets": r.outcomes["one-vl"].buffer_packets,
                "totals": {p: r.total(p) for p in r.outcomes},
                "setups": {p: setup_text(o.setup, r.mix.jobs) for p, o in r.outcomes.items()},
                "jobs": {
                    p: {j.id: [j.t_alone_s, j.t_sharing_s] for j in o.jobs}
                    for p, o in r.outcomes.items()
                },
                "searched": r.searched,
            }
            for r in results
        ]
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
