"""The fluid model against the packet model: both run on one mix, and rank correlation.

:func:`run_validation` runs a mix's policies (:func:`bench.sim.run.run_fluid`) in the fluid model,
then the same setups in the packet model; :class:`Validation` holds both and compares
them with Spearman's rank correlation (average ranks for ties).  :func:`mechanisms`
isolates the two mechanisms behind the models' differences, each in a two-job case.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.report import table
from bench.sim.mixes import Mix, network
from bench.sim.run import (
    BEST_RATIO,
    EVAL_POLICIES,
    EXCESS_EPS,
    MAIN,
    TUNED,
    clean,
    run_fluid,
    search,
    tuned,
)
from ibqos.jobs.model import Job
from ibqos.sim import policies, senders
from ibqos.sim.evaluate import Outcome, alone, evaluate
from ibqos.sim.workload import prepare

#: excess slowdowns closer than this share of the mix's one-vl one (or its largest) tie
TIE = 0.01


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
    """Values (excess slowdowns) within *tol* of the largest one's scale made equal (ties),
    for the tolerant rank correlation: differences the models cannot resolve are no
    ranking."""
    scale = max(max(totals), EXCESS_EPS)
    return [round(t / (scale * tol)) if tol > 0 else t for t in totals]


@dataclass
class Validation:
    """A mix in both models: every policy's outcome, and the searches' S."""

    mix: Mix
    fluid: dict[str, Outcome]
    packet: dict[str, Outcome]
    wall_fluid_s: float
    wall_packet_s: float
    #: the packet model's own optimum (``--packet-search``), and every searched setup's S
    packet_optimal: Outcome | None = None
    packet_searched: list[float] = field(default_factory=list)
    #: the fluid model's searched S, in the same order
    fluid_searched: list[float] = field(default_factory=list)

    def total(self, model: str, policy: str) -> float:
        """Total contention (s), reported beside S."""
        return clean((self.fluid if model == "fluid" else self.packet)[policy].total_contention_s)

    def excess(self, model: str, policy: str) -> float:
        """S - 1, the excess slowdown, in *model* (round-off below :data:`EXCESS_EPS`: 0):
        what the models are compared by."""
        return _excess((self.fluid if model == "fluid" else self.packet)[policy].slowdown)

    def packet_gap(self, policy: str = "ibqos-fixed") -> float:
        """*policy*'s excess slowdown over the packet model's optimum's, minus 1; values
        closer than :data:`TIE` of one-vl's count as equal (0), as the tolerant rho does."""
        assert self.packet_optimal is not None
        opt, got = _excess(self.packet_optimal.slowdown), self.excess("packet", policy)
        if got - opt <= TIE * max(self.excess("packet", "one-vl"), EXCESS_EPS):
            return 0.0
        return (got - opt) / opt if opt > 0 else math.inf

    def totals(self, model: str, pols: Sequence[str] = MAIN) -> list[float]:
        """The policies' excess slowdowns in *model* (the name is the ranking's)."""
        return [self.excess(model, p) for p in pols]

    def setup_rho(self, tol: float = 0.0) -> float:
        """The models' rank agreement over every setup both searched, by S (nan: none)."""
        f, p = self.fluid_searched, self.packet_searched
        if not f or len(f) != len(p):
            return math.nan
        f, p = [_excess(t) for t in f], [_excess(t) for t in p]
        return spearman(snap(f, tol), snap(p, tol)) if tol else spearman(f, p)

    def rho(self, tol: float = 0.0, own_optimum: bool = False) -> float:
        """The models' rank agreement over the five policies by S; with *own_optimum*, the
        packet model's ``optimal`` is its own search's best, not the fluid model's pick."""
        f, p = self.totals("fluid"), self.totals("packet")
        if own_optimum:
            assert self.packet_optimal is not None
            p[MAIN.index("optimal")] = _excess(self.packet_optimal.slowdown)
        return spearman(snap(f, tol), snap(p, tol)) if tol else spearman(f, p)


def _excess(s: float) -> float:
    return 0.0 if s - 1.0 < EXCESS_EPS else s - 1.0


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
    fluid = run_fluid(mix, iterations, fluid_buffers, full=True)
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
    packet[BEST_RATIO] = tuned(packet, by_s=True)
    v = Validation(mix, fluid.outcomes, packet, wall_fluid, 0.0, fluid_searched=fluid.searched)
    if packet_search:
        others = [fluid.outcomes[p].setup for p in EVAL_POLICIES]
        v.packet_optimal, v.packet_searched = search(
            net, jobs, iterations, mix.lanes, t_alone, others, buffer_packets, "packet"
        )
    v.wall_packet_s = time.perf_counter() - start
    return v


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
        fluid_bp = senders.auto_buffers(jobs, given=fluid_buffers)
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
        "lllr",
    )
