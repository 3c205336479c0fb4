"""The Markdown tables and the target and growth checks :mod:`bench.plan.bench` prints."""

from __future__ import annotations

import itertools
import statistics

from bench.plan.inputs import CHURN, SHAPES
from bench.plan.timing import Case, FabricTimes
from bench.report import table

TARGET_S = 0.25  # the target for 50k ports and 5k jobs
STAGES = ("map", "attribute", "classify", "plan", "report", "tune")


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
    ]
    rows = []
    for c in cases:
        med = statistics.median(c.steady_s)
        rows.append(
            [
                c.name,
                f"{c.ports:,}",
                f"{c.n_jobs:,}",
                f"{ms(med)} ({ms(min(c.steady_s))}, {ms(max(c.steady_s))})",
                f"{med / TARGET_S:.0%}",
                f"{c.ports / base.ports:.1f}",
                f"{med / base_med:.1f}",
                f"{med / c.ports * 1e6:.2f}",
                f"{ms(statistics.median(c.churn_s))} ({ms(min(c.churn_s))}, {ms(max(c.churn_s))})",
                ms(statistics.median(c.first_s)),
            ]
        )
    out += table(
        [
            "case",
            "ports",
            "jobs",
            "steady (best, worst)",
            "vs 0.25 s target",
            "ports x",
            "time x",
            "us per port",
            "churn (best, worst)",
            "first cycle",
        ],
        rows,
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
        ]
        rows = []
        for c in cases:
            meds = {s: c.stage(kind, s) for s in STAGES}
            total = sum(meds.values()) or 1.0
            cells = [f"{ms(meds[s])} ({meds[s] / total:.0%})" for s in STAGES]
            gc_ms = ms(statistics.median(c.gc_s[kind]))
            rows.append([c.name, *cells, gc_ms, str(c.gc_full.get(kind, 0))])
        out += table(["case", *STAGES, "of which GC", "full GC passes"], rows)
    out += [
        "",
        f"Per fabric, paid when the fabric changes (median of {rounds}, ms): the fabric model"
        " (`Fabric` from the topology) and a new `Decider`'s tables on it:",
        "",
        *table(
            ["fabric", "XGFT", "ports", "hosts", "switches", "fabric model", "decider tables"],
            [
                [
                    f.size,
                    f"`{f.shape}`",
                    f"{f.ports:,}",
                    f"{f.hosts:,}",
                    f"{f.switches:,}",
                    ms(statistics.median(f.model_s)),
                    ms(statistics.median(f.tables_s)),
                ]
                for f in fabrics
            ],
        ),
    ]
    out += [
        "",
        "Workloads: hosts in jobs, the largest job, jobs with a pattern, classes after the"
        " last steady cycle, plan replacements over the steady cycles:",
        "",
    ]
    rows = []
    for c in cases:
        cls = " / ".join(str(c.classes.get(k, 0)) for k in ("low", "moderate", "high"))
        rows.append(
            [
                c.name,
                f"{c.hosts:,}",
                f"{c.job_hosts:,}",
                f"{max(len(j.nodes) for j in c.jobs):,}",
                str(sum(1 for j in c.jobs if j.pattern)),
                cls,
                str(c.replans),
            ]
        )
    columns = [
        "case",
        "hosts",
        "hosts in jobs",
        "largest job",
        "with pattern",
        "low / moderate / high",
        "replans",
    ]
    return out + table(columns, rows)


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
