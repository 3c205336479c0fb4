"""Benchmark one decision cycle (map, attribute, classify, plan) on synthetic fabrics.

Usage: python scripts/bench_plan.py [--cases 1k/100,50k/5000] [--rounds N] [--cycles N]
       [--json FILE] [--profile CASE] [--gc-freeze]

A case is a fabric size and a job count.  Fabrics are three-level XGFTs (``SHAPES``) of
about 1k, 10k and 50k ports (every linked switch and CA port: ``len(fabric.ports)``);
workloads are 100, 1k and 5k jobs covering about 90 % of the hosts.  5k jobs need more
hosts than the smaller fabrics have (nodes are exclusive), and 1k jobs on 288 hosts would
be a job per host, so the matrix is the cases of ``CASES``.

One fabric at a time is in memory, as in the daemon (the garbage collector's full passes
walk every live object, so a bigger heap would slow every cycle down).  Per fabric, timed
``--rounds`` times from scratch, as after a fabric change: the fabric model (``Fabric``
from the topology) and a new :class:`Decider`'s tables.  Per case, outside the timed part:
the workload, four rates tables and the job lists of the churn cycles.  Then, in rounds
that go over the fabric's cases in turn so that noise on the shared machine spreads over
all of them, a new decider and:

- ``first``: its first cycle, where every job is new;
- ``steady``: ``--cycles`` cycles with the same jobs, every ``INTERVAL_S`` seconds of the
  decider's clock, the rates tables in turn: what the daemon runs every interval;
- ``churn``: ``--cycles`` more where ``CHURN`` of the jobs end and as many start on their
  hosts, every cycle.

Every cycle is timed as a whole, per stage (``Decider.timings``), and for the time the
garbage collector ran in it (``gc.callbacks``).  ``--gc-freeze`` shows what freezing the
long-lived objects (``gc.freeze()``) once the decider is built would save.

Workloads: job sizes are log-normal (many small jobs, a few large ones), scaled so the jobs
hold ``OCCUPANCY`` of the hosts; 70 % of the jobs are placed contiguously (in random order
along the host numbering, so neighbours share leaf switches), the other 30 % get hosts
scattered over the fabric (a fragmented machine); 10 % of those of more than one host
declare a communication pattern (their attribution prior), the rest use the gravity prior.
Rates: each job has an intensity (log-normal), its hosts inject a noisy share of their
link, and every subtree's uplinks carry a noisy share of what its hosts inject.
Everything is drawn from ``SEED``.

Prints the machine, a Markdown table with the 0.25 s target and linear growth from the
smallest case side by side, the per-stage breakdowns and the workloads; progress goes to
stderr.  docs/plan-benchmark.md holds one run.  Wall-clock times on a shared 2-core
machine: read the ratios.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import itertools
import json
import logging
import os
import platform
import pstats
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import ibqos
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.fabric.model import Fabric
from ibqos.fabric.topology import Port, Topology
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.model import PATTERNS, Job
from ibqos.plan.decide import Decider

#: fabric sizes: three-level XGFTs with 1058, 10754 and 50178 ports
SHAPES: dict[str, str] = {
    "1k": "3;8,6,6;1,4,4",  # 288 hosts, 76 switches
    "10k": "3;16,16,12;1,8,8",  # 3072 hosts, 352 switches
    "50k": "3;16,16,56;1,8,8",  # 14336 hosts, 1408 switches
}
CASES: tuple[tuple[str, int], ...] = (
    ("1k", 100),
    ("10k", 100),
    ("10k", 1000),
    ("50k", 100),
    ("50k", 1000),
    ("50k", 5000),
)
TARGET_S = 0.25  # the target for 50k ports and 5k jobs
OCCUPANCY = 0.9  # share of the hosts running jobs
CONTIGUOUS = 0.7  # share of jobs placed on consecutive hosts
WITH_PATTERN = 0.1  # share of jobs that declare a pattern
INTERVAL_S = 10.0  # decider clock between cycles
TABLES = 4  # rates tables per case, used in turn
CHURN = 0.01  # share of the jobs replaced every churn cycle
SEED = 11
APPS = ("lammps", "gromacs", "wrf", "namd", "openfoam", "cp2k", "vasp", "hpl")
#: the sources whose speed is measured (their hash is printed with the results)
CODE = (
    "plan/decide.py",
    "plan/report.py",
    "plan/planner.py",
    "plan/grouping.py",
    "attribute/jobmap.py",
    "attribute/attribution.py",
    "classify/classifier.py",
    "classify/expected.py",
)
STAGES = ("map", "attribute", "classify", "plan", "report")


# -- inputs ---------------------------------------------------------------------------------


def build_fabric(topo: Topology) -> Fabric:
    """The fabric model of an XGFT topology, with LIDs (as after OpenSM's sweep) so that
    every port is a PMA target."""
    lid = 1
    for node in topo.nodes.values():
        for port in [Port(node.id, 0)] if node.kind == "switch" else topo.ports(node.id):
            topo.lids[port] = lid
            lid += 1
    return Fabric(topo, source="xgft")


def hosts_of(fabric: Fabric) -> list[str]:
    """The compute hosts in numbering order (cn0001 ...; not the OpenSM host)."""
    names = {fp.node_desc.split()[0] for fp in fabric.ports.values() if fp.role == "host"}
    return sorted(n for n in names if n.startswith("cn"))


def workload(hosts: list[str], n_jobs: int, rng: np.random.Generator) -> tuple[Job, ...]:
    """*n_jobs* jobs on about ``OCCUPANCY`` of *hosts* (see the module docstring)."""
    budget = int(len(hosts) * OCCUPANCY)
    if budget < n_jobs:
        raise ValueError(f"{n_jobs} jobs do not fit on {len(hosts)} hosts")
    raw = rng.lognormal(0.0, 1.2, n_jobs)
    sizes = np.maximum(1, np.floor(raw / raw.sum() * budget)).astype(int)
    while sizes.sum() > budget:  # rounding up to 1 host may overshoot a little
        sizes[np.argmax(sizes)] -= 1
    contiguous = rng.random(n_jobs) < CONTIGUOUS
    # lay every job out along the host numbering in random order, with idle hosts between
    idle = len(hosts) - int(sizes.sum())
    gaps = np.bincount(rng.integers(0, n_jobs + 1, idle), minlength=n_jobs + 1)
    blocks: dict[int, list[int]] = {}
    at = int(gaps[0])
    for k, j in enumerate(rng.permutation(n_jobs)):
        blocks[int(j)] = list(range(at, at + int(sizes[j])))
        at += int(sizes[j]) + int(gaps[k + 1])
    # fragmented jobs: their hosts and the idle ones, shuffled among them
    loose = [h for j in range(n_jobs) if not contiguous[j] for h in blocks[j]]
    loose += sorted(set(range(len(hosts))) - {h for b in blocks.values() for h in b})
    loose = [loose[i] for i in rng.permutation(len(loose))]
    for j in range(n_jobs):
        if not contiguous[j]:
            blocks[j], loose = sorted(loose[: sizes[j]]), loose[sizes[j] :]
    patterns = [p for p in PATTERNS if p != "matrix"]
    jobs = []
    for j in range(n_jobs):
        declared = rng.random() < WITH_PATTERN and sizes[j] > 1
        jobs.append(
            Job(
                id=str(100000 + j),
                nodes=tuple(hosts[h] for h in blocks[j]),
                pattern=patterns[int(rng.integers(len(patterns)))] if declared else "",
                name=APPS[int(rng.integers(len(APPS)))],
                user=f"user{int(rng.integers(50)):02d}",
                start_time=1.7e9 + j,
            )
        )
    return tuple(jobs)


def rates_tables(
    fabric: Fabric, jobs: tuple[Job, ...], rng: np.random.Generator, count: int
) -> list[pd.DataFrame]:
    """*count* rates tables (rows in topology order, as a sweep gives them)."""
    keys = list(fabric.ports)
    ports = [fabric.ports[k] for k in keys]
    cap = np.array([fp.capacity_bytes_per_s for fp in ports])
    role = np.array([fp.role for fp in ports])
    level = np.array([fp.level for fp in ports])
    host = [fp.node_desc.split()[0] if fp.role == "host" else "" for fp in ports]
    job_of = {h: j for j, job in enumerate(jobs) for h in job.nodes}
    row_job = np.array([job_of.get(h, -1) for h in host])
    # job intensity: most jobs light, some heavy (a share of the link, before noise)
    base = np.clip(rng.lognormal(np.log(0.08), 1.0, len(jobs)), 0.0, 1.0)
    tables = []
    for _ in range(count):
        util = np.clip(base * rng.lognormal(0.0, 0.3, len(jobs)), 0.0, 1.0)
        xmit = np.zeros(len(keys))
        hosts_row = row_job >= 0
        xmit[hosts_row] = cap[hosts_row] * util[row_job[hosts_row]] * rng.uniform(0.8, 1.2)
        xmit[(role == "host") & ~hosts_row] = 1e6  # idle hosts and the SM: a trickle
        for lvl in range(1, fabric.height):
            comp = fabric.components(lvl)
            sub_host = np.array([comp[fp.node_id] if fp.role == "host" else -1 for fp in ports])
            up = (role == "up") & (level == lvl)
            sub_up = np.array([comp.get(fp.node_id, -1) if fp.role == "up" else -1 for fp in ports])
            n_sub = int(max(sub_host.max(), sub_up.max())) + 1
            out_share = 0.6 / lvl  # less traffic leaves larger subtrees
            sent = np.bincount(
                sub_host[sub_host >= 0],
                weights=xmit[sub_host >= 0] * out_share,
                minlength=n_sub,
            )
            n_up = np.bincount(sub_up[up], minlength=n_sub)
            each = sent[sub_up[up]] / n_up[sub_up[up]]
            xmit[up] = np.minimum(cap[up], each * rng.uniform(0.7, 1.3, int(up.sum())))
        down = role == "down"
        xmit[down] = cap[down] * rng.uniform(0.0, 0.3, int(down.sum()))
        tables.append(
            pd.DataFrame(
                {
                    "node_guid": np.array([k[0] for k in keys], dtype=np.uint64),
                    "port": np.array([k[1] for k in keys], dtype=np.uint8),
                    "level": level.astype(np.uint8),
                    "role": role.astype(object),
                    "xmit_bytes_per_s": xmit,
                }
            )
        )
    return tables


def churned(jobs: tuple[Job, ...], rng: np.random.Generator, cycles: int) -> list[tuple[Job, ...]]:
    """The running jobs of *cycles* cycles of churn: in each, ``CHURN`` of the jobs (at
    least one) end and as many start on their hosts (new ids, appended, as a job source
    lists them)."""
    out = []
    next_id = 900000
    for _ in range(cycles):
        n = max(1, round(len(jobs) * CHURN))
        ended = set(rng.choice(len(jobs), n, replace=False).tolist())
        started = []
        for j in sorted(ended):
            started.append(
                Job(
                    id=str(next_id),
                    nodes=jobs[j].nodes,
                    pattern=jobs[j].pattern,
                    name=APPS[int(rng.integers(len(APPS)))],
                    user=jobs[j].user,
                    start_time=2.0e9 + next_id,
                )
            )
            next_id += 1
        jobs = (*(job for j, job in enumerate(jobs) if j not in ended), *started)
        out.append(jobs)
    return out


# -- timing ---------------------------------------------------------------------------------


@dataclass
class Case:
    """One fabric and workload, with what was measured on it (seconds)."""

    size: str
    n_jobs: int
    ports: int
    hosts: int
    jobs: tuple[Job, ...]
    churn: list[tuple[Job, ...]]
    tables: list[pd.DataFrame]
    first_s: list[float] = field(default_factory=list)
    steady_s: list[float] = field(default_factory=list)
    churn_s: list[float] = field(default_factory=list)
    stages: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    gc_s: dict[str, list[float]] = field(default_factory=dict)
    gc_full: dict[str, int] = field(default_factory=dict)
    classes: Counter[str] = field(default_factory=Counter)
    replans: int = 0

    @property
    def name(self) -> str:
        return f"{self.size}/{self.n_jobs}"

    @property
    def job_hosts(self) -> int:
        return sum(len(j.nodes) for j in self.jobs)

    def stage(self, kind: str, name: str) -> float:
        """Median seconds of one stage over the cycles of *kind*."""
        return statistics.median(self.stages[kind][name])


@dataclass
class FabricTimes:
    """What a fabric change costs (seconds, one value per round)."""

    size: str
    shape: str
    ports: int
    hosts: int
    switches: int
    model_s: list[float] = field(default_factory=list)
    tables_s: list[float] = field(default_factory=list)


def time_fabric(size: str, rounds: int) -> tuple[Fabric, FabricTimes]:
    """Build the fabric model and a decider's tables *rounds* times, each from scratch (as
    after a fabric change); return the last fabric."""
    topo = build_xgft(parse_xgft(SHAPES[size]))
    fabric = build_fabric(topo)
    times = FabricTimes(
        size, SHAPES[size], len(fabric.ports), len(hosts_of(fabric)), len(fabric.levels)
    )
    for _ in range(rounds):
        clock = time.perf_counter
        t = clock()
        fabric = build_fabric(topo)
        times.model_s.append(clock() - t)
        t = clock()
        Decider(fabric, LaneConfig(), Thresholds())
        times.tables_s.append(clock() - t)
    return fabric, times


class GcClock:
    """Seconds the garbage collector ran, and its full passes, since :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.full += info["generation"] == 2


GC = GcClock()


def _cycle(
    case: Case,
    decider: Decider,
    kind: str,
    table: pd.DataFrame,
    jobs: tuple[Job, ...],
    now_s: float,
    profile: cProfile.Profile | None,
) -> None:
    if profile is not None:
        profile.enable()
    GC.reset()
    t = time.perf_counter()
    decision = decider.decide(table, jobs, now_s)
    elapsed = time.perf_counter() - t
    if profile is not None:
        profile.disable()
    case.gc_s.setdefault(kind, []).append(GC.seconds)
    case.gc_full[kind] = case.gc_full.get(kind, 0) + GC.full
    {"first": case.first_s, "steady": case.steady_s, "churn": case.churn_s}[kind].append(elapsed)
    for stage, s in decider.timings.items():
        case.stages.setdefault(kind, {}).setdefault(stage, []).append(s)
    if kind == "steady":
        case.replans += decision.result.replace
        case.classes = Counter(j.cls for j in decision.jobs)


def run_round(
    case: Case,
    fabric: Fabric,
    cycles: int,
    profile: cProfile.Profile | None = None,
    freeze: bool = False,
) -> None:
    """A new decider, its first cycle, *cycles* steady-state cycles, then *cycles* cycles
    with churn (only the steady ones are profiled).

    With *freeze*, everything alive once the decider is built (the fabric, its tables, the
    inputs) is moved out of the garbage collector's sight first (``gc.freeze``), as a
    daemon could do after each fabric change, and let back in at the end.
    """
    decider = Decider(fabric, LaneConfig(), Thresholds())
    if freeze:
        gc.collect()
        gc.freeze()
    try:
        _cycles(case, decider, cycles, profile)
    finally:
        if freeze:
            gc.unfreeze()


def _cycles(case: Case, decider: Decider, cycles: int, profile: cProfile.Profile | None) -> None:
    _cycle(case, decider, "first", case.tables[0], case.jobs, 0.0, None)
    for k in range(1, cycles + 1):
        table = case.tables[k % len(case.tables)]
        _cycle(case, decider, "steady", table, case.jobs, k * INTERVAL_S, profile)
    for k, jobs in enumerate(case.churn, start=cycles + 1):
        table = case.tables[k % len(case.tables)]
        _cycle(case, decider, "churn", table, jobs, k * INTERVAL_S, None)


# -- output ---------------------------------------------------------------------------------


def code_hash() -> str:
    root = Path(ibqos.__file__).parent
    digest = hashlib.sha256()
    for name in CODE:
        digest.update((root / name).read_bytes())
    return digest.hexdigest()[:12]


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()},"
        f" numpy {np.__version__}, pandas {pd.__version__}"
    )


def ms(x: float) -> str:
    return f"{x * 1e3:,.1f}"


def report(cases: list[Case], fabrics: list[FabricTimes], rounds: int, cycles: int) -> list[str]:
    """The Markdown tables."""
    base = cases[0]
    base_med = statistics.median(base.steady_s)
    out = [
        f"Steady: the same jobs every cycle; churn: {CHURN:.0%} of the jobs replaced every"
        f" cycle.  Median of {rounds} x {cycles} cycles of each (best and worst in brackets),"
        f" first cycle median of {rounds}; ms.  Growth from {base.name}: linear growth"
        " makes time x equal to ports x (the jobs hold the same share of the hosts in every"
        " case).",
        "",
        "| case | ports | jobs | steady (best, worst) | vs 0.25 s target | ports x | time x"
        " | us per port | churn (best, worst) | first cycle |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        med = statistics.median(c.steady_s)
        out.append(
            f"| {c.name} | {c.ports:,} | {c.n_jobs:,}"
            f" | {ms(med)} ({ms(min(c.steady_s))}, {ms(max(c.steady_s))})"
            f" | {med / TARGET_S:.0%} | {c.ports / base.ports:.1f} | {med / base_med:.1f}"
            f" | {med / c.ports * 1e6:.2f}"
            f" | {ms(statistics.median(c.churn_s))} ({ms(min(c.churn_s))}, {ms(max(c.churn_s))})"
            f" | {ms(statistics.median(c.first_s))} |"
        )
    for kind, title in (
        ("steady", "Steady cycles"),
        ("churn", "Churn cycles"),
        ("first", "First cycle (every job new)"),
    ):
        out += [
            "",
            f"{title} by stage (median ms; share of the stages' sum), and the garbage"
            " collector's part of the cycle (median ms; full passes over all the cycles):",
            "",
            "| case | " + " | ".join(STAGES) + " | of which GC | full GC passes |",
            "|---|" + "---|" * (len(STAGES) + 2),
        ]
        for c in cases:
            meds = {s: c.stage(kind, s) for s in STAGES}
            total = sum(meds.values()) or 1.0
            cells = " | ".join(f"{ms(meds[s])} ({meds[s] / total:.0%})" for s in STAGES)
            gc_ms = ms(statistics.median(c.gc_s[kind]))
            out.append(f"| {c.name} | {cells} | {gc_ms} | {c.gc_full.get(kind, 0)} |")
    out += [
        "",
        f"Per fabric, paid when the fabric changes (median of {rounds}, ms): the fabric model"
        " (`Fabric` from the topology) and a new `Decider`'s tables on it:",
        "",
        "| fabric | XGFT | ports | hosts | switches | fabric model | decider tables |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in fabrics:
        out.append(
            f"| {f.size} | `{f.shape}` | {f.ports:,} | {f.hosts:,} | {f.switches:,}"
            f" | {ms(statistics.median(f.model_s))} | {ms(statistics.median(f.tables_s))} |"
        )
    out += [
        "",
        "Workloads: hosts in jobs, the largest job, jobs with a pattern, classes after the"
        " last steady cycle, plan replacements over the steady cycles:",
        "",
        "| case | hosts | hosts in jobs | largest job | with pattern | low / moderate / high"
        " | replans |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        cls = " / ".join(str(c.classes.get(k, 0)) for k in ("low", "moderate", "high"))
        out.append(
            f"| {c.name} | {c.hosts:,} | {c.job_hosts:,} | {max(len(j.nodes) for j in c.jobs):,}"
            f" | {sum(1 for j in c.jobs if j.pattern)} | {cls} | {c.replans} |"
        )
    return out


def targets(cases: list[Case]) -> list[str]:
    """The issue's target and the growth checks, in words."""
    out = []
    med = {c.name: statistics.median(c.steady_s) for c in cases}
    for c in cases:
        if c.name == "50k/5000":
            verdict = "met" if med[c.name] < TARGET_S else "NOT met"
            out.append(
                f"Target, 50k ports and 5k jobs under {TARGET_S} s: {verdict}: steady median"
                f" {med[c.name]:.3f} s = {med[c.name] / TARGET_S:.0%} of the target (worst"
                f" {max(c.steady_s):.3f} s); with churn {statistics.median(c.churn_s):.3f} s."
            )
    at100 = [c for c in cases if c.n_jobs == 100]
    for a, b in itertools.pairwise(at100):
        out.append(
            f"Growth with ports at 100 jobs, {a.name} -> {b.name}: ports x{b.ports / a.ports:.1f},"
            f" time x{med[b.name] / med[a.name]:.1f}."
        )
    for size in SHAPES:
        same = [c for c in cases if c.size == size]
        if len(same) > 1:
            a, b = same[0], same[-1]
            out.append(
                f"Growth with jobs on {size} ports, {a.name} -> {b.name}:"
                f" jobs x{b.n_jobs / a.n_jobs:.0f}, time x{med[b.name] / med[a.name]:.2f}."
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    names = ",".join(f"{s}/{n}" for s, n in CASES)
    parser.add_argument("--cases", default=names, help=f"subset of {names}")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over every case")
    parser.add_argument("--cycles", type=int, default=8, help="steady and churn cycles per round")
    parser.add_argument("--json", type=Path, help="write every timing here")
    parser.add_argument("--profile", metavar="CASE", help="cProfile the steady cycles of CASE")
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() once each decider is built (what a daemon could do)",
    )
    args = parser.parse_args(argv)
    wanted = args.cases.split(",")
    unknown = set(wanted) - {f"{s}/{n}" for s, n in CASES}
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")

    frozen = "; gc.freeze() after building each decider" if args.gc_freeze else ""
    print(f"machine: {machine()}; code {code_hash()}{frozen}", flush=True)
    load0 = os.getloadavg()[0]
    profile = cProfile.Profile() if args.profile else None
    cases: list[Case] = []
    fabrics: list[FabricTimes] = []
    for size in SHAPES:
        todo = [(s, n) for s, n in CASES if s == size and f"{s}/{n}" in wanted]
        if not todo:
            continue
        # one fabric in memory at a time, as in the daemon: the garbage collector's full
        # passes walk every live object, so a larger heap would make cycles look slower
        fabric, times = time_fabric(size, args.rounds)
        fabrics.append(times)
        print(
            f"fabric {size}: XGFT {times.shape}: {times.ports} ports,"
            f" model {statistics.median(times.model_s):.2f} s",
            file=sys.stderr,
            flush=True,
        )
        group = []
        for _, n_jobs in todo:
            rng = np.random.default_rng([SEED, times.ports, n_jobs])
            jobs = workload(hosts_of(fabric), n_jobs, rng)
            tables = rates_tables(fabric, jobs, rng, TABLES)
            churn = churned(jobs, rng, args.cycles)
            group.append(Case(size, n_jobs, times.ports, times.hosts, jobs, churn, tables))
        for r in range(args.rounds):
            for case in group:
                gc.collect()  # garbage of the previous case is not this one's to collect
                steps = len(case.steady_s)
                run_round(
                    case,
                    fabric,
                    args.cycles,
                    profile if case.name == args.profile else None,
                    args.gc_freeze,
                )
                print(
                    f"round {r + 1}/{args.rounds} {case.name}: first {case.first_s[-1]:.3f} s,"
                    f" steady {statistics.median(case.steady_s[steps:]):.3f} s,"
                    f" churn {statistics.median(case.churn_s[steps:]):.3f} s",
                    file=sys.stderr,
                    flush=True,
                )
        for case in group:
            case.tables = []  # free the memory before the next fabric
        cases += group
        del fabric
        gc.collect()
    print(f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("\n".join(report(cases, fabrics, args.rounds, args.cycles)))
    print("\n" + "\n".join(targets(cases)))
    if profile is not None:
        print(f"\ncProfile of the steady cycles of {args.profile} (top 30 by own time):\n")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(30)
    if args.json:
        doc = {
            "machine": machine(),
            "code": code_hash(),
            "fabrics": [vars(f) for f in fabrics],
            "cases": [
                {
                    "case": c.name,
                    "ports": c.ports,
                    "jobs": c.n_jobs,
                    "first_s": c.first_s,
                    "steady_s": c.steady_s,
                    "churn_s": c.churn_s,
                    "stages": c.stages,
                    "gc_s": c.gc_s,
                }
                for c in cases
            ],
        }
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
