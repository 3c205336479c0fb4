"""Check the contention simulator's fluid model against its packet model.

Usage: python -m bench.sim.validate [--seeds N] [--iterations N] [--only TEXT] [--json FILE]
                                      [--scale X] [--fluid-buffers N] [--packet-search]
                                      [--buffer-packets N]
       (--fluid-buffers: the fluid model's switch buffers; default as ``ibqos simulate``:
       8 packets per lane per input, as the senders are per host)

Small mixes (:mod:`bench.sim.mixes`) on 32 hosts (``2;8,4;1,4`` 2:1 and ``2;8,4;1,2`` 4:1), 2, 3
and 4 jobs with periods of 20-120 us (a few hundred KB per host per iteration),
4 iterations, 3 seeds (36 mixes); ``--scale X`` makes every period X times longer.
Policies one-vl, equal, bandwidth, ibqos and optimal (the fluid model's optimum) and
ibqos's variants run with both models (:func:`bench.sim.validation.run_validation`); per mix,
Spearman's rank correlation (average ranks for ties) of the policies' S (node-weighted
mean slowdown) between the models, and every job's contention error (fluid - packet), absolute and
relative to its T_alone in the packet model.  ``--packet-search`` also runs the
exhaustive search in the packet model, for ibqos's gap to that model's own optimum.
Then the two mechanisms behind the differences, each isolated in a two-job case
(:func:`bench.sim.validation.mechanisms`).

Everything is drawn from fixed seeds: the same command prints the same mixes.  Tables go
to stdout (Markdown), one progress line per mix to stderr.  docs/simulate-validation.md
holds runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.machine import machine
from bench.report import say, table
from bench.sim.cells import buffers_used, pct, setup_text
from bench.sim.mixes import SHAPES_32, VALIDATION_TREES, host_link, mixes, network
from bench.sim.run import (
    BEST_RATIO,
    EXCESS_EPS,
    GAP_TARGET,
    MAIN,
    REVERSED,
    SHOWN,
    TUNED,
    VARIANTS,
    add_fluid_buffers_option,
    check_fluid_buffers,
    picks,
)
from bench.sim.validation import TIE, Validation, mechanisms, run_validation, spearman
from ibqos.sim.packet import PACKET_BUFFER

#: the target for the rank correlation between the models
RHO_TARGET = 0.9
#: time scale of the validation mixes' periods (s): heavy jobs iterate every 60-120 us
VALIDATION_UNIT_S = 10e-6


# -- report -------------------------------------------------------------------------------


def quantiles(xs: Sequence[float]) -> str:
    """Median / 90th percentile / largest of *xs*, three significant digits."""
    if not xs:
        return "-"
    s = sorted(xs)

    def q(f: float) -> float:
        return s[min(len(s) - 1, round(f * (len(s) - 1)))]

    return f"{q(0.5):.3g} / {q(0.9):.3g} / {s[-1]:.3g}"


def rho_text(x: float) -> str:
    """A rank correlation, two decimals (``n/a`` when there is no ranking)."""
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def relative_to_one_vl(vals: list[Validation], model: str, policy: str) -> float:
    """The policy's mean excess slowdown (S - 1) relative to one-vl's, over the mixes where
    *model* sees one-vl slow some job."""
    live = [v for v in vals if v.excess(model, "one-vl") > EXCESS_EPS]
    return statistics.fmean(v.excess(model, policy) / v.excess(model, "one-vl") for v in live)


def set_ranking(vals: list[Validation]) -> list[str]:
    """The five policies ranked over the whole set of mixes in each model, two ways: by
    their summed excess slowdowns (S - 1), and by their mean excess relative to one-vl's
    (each mix where the model sees one-vl slow a job counting alike), with Spearman's rho
    of each."""
    out = ["Over the whole set, the policies ranked by S in each model:", ""]
    rows = []
    for name in ("sum of S - 1", "mean relative to one-vl"):
        ranked = {}
        for model in ("fluid", "packet"):
            if name == "sum of S - 1":
                score = [math.fsum(v.excess(model, p) for v in vals) for p in MAIN]
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
    return out + table(
        ["ranked by", "fluid (best first)", "packet (best first)", "rho"], rows, "lr"
    )


def packet_search_report(vals: list[Validation]) -> list[str]:
    """ibqos (and equal, bandwidth, the fluid model's pick) against the packet model's own
    exhaustive optimum, per mix and per shape (``--packet-search``)."""
    done = [v for v in vals if v.packet_optimal is not None]
    pols = ("equal", "bandwidth", "ibqos-fixed", TUNED, BEST_RATIO, "optimal")
    out = [
        "## Against the packet model's own optimum (--packet-search)",
        "",
        "The search of `optimal` (every grouping onto the lanes x 1, 2, 4, 8 packets per"
        " round, and the four policies' setups) run in the packet model, the least S kept."
        " gap: a policy's excess slowdown S - 1 over that optimum's - 1, 0 when within 1 %"
        " of one-vl's excess; `optimal` here is the fluid model's pick. S, with the total"
        " contention (us) beside.",
        "",
    ]
    rows = []
    for v in done:
        assert v.packet_optimal is not None
        ib = v.packet["ibqos-fixed"].slowdown
        better = sum(1 for x in v.packet_searched if x < ib - EXCESS_EPS)
        rows.append(
            [
                v.mix.name,
                f"{v.packet['one-vl'].slowdown:.3f} ({v.total('packet', 'one-vl') * 1e6:.1f})",
                f"{v.packet_optimal.slowdown:.3f}"
                f" ({v.packet_optimal.total_contention_s * 1e6:.1f})",
                setup_text(v.packet_optimal.setup, v.mix.jobs),
                f"{ib:.3f} ({v.total('packet', 'ibqos-fixed') * 1e6:.1f})",
                *[pct(v.packet_gap(p)) for p in pols],
                f"{better}/{len(v.packet_searched)}",
                rho_text(v.setup_rho()),
            ]
        )
    out += table(
        [
            "mix",
            "S one-vl (us)",
            "S optimum (us)",
            "optimum's setup (VL[jobs]:packets)",
            "S ibqos (us)",
            *[f"gap {p}" for p in pols],
            "setups better than ibqos",
            "setup rho",
        ],
        rows,
        "lr",
    )
    out += ["", "Per shape, over the mixes with contention under one-vl:", ""]
    rows = []
    contended = [v for v in done if v.excess("packet", "one-vl") > EXCESS_EPS]
    by_shape = {s: [v for v in contended if v.mix.shape == s] for s in SHAPES_32}
    for shape, live in [*by_shape.items(), ("all", contended)]:
        if not live:
            continue
        row = [shape, str(len(live))]
        for p in pols:
            near = sum(1 for v in live if v.packet_gap(p) <= GAP_TARGET)
            rel = statistics.fmean(
                v.excess("packet", p) / v.excess("packet", "one-vl") for v in live
            )
            row.append(f"{near} ({rel:.3f})")
        opt = statistics.fmean(
            (v.packet_optimal.slowdown - 1.0 if v.packet_optimal else math.nan)
            / v.excess("packet", "one-vl")
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
        "lr",
    )
    out += [
        "",
        "setup rho: Spearman's rank correlation between the two models' S over every"
        " searched setup of the mix (12, 63 or 451; n/a where one model's S are all"
        " equal); in the per-shape table with ties within 1 % of the largest excess"
        " slowdown, as the tolerant rho; rel. one-vl: excess slowdown S - 1 over one-vl's.",
    ]
    return out


def validation_report(
    vals: list[Validation], iterations: int, link: float, unit: float
) -> list[str]:
    """The validation's Markdown report: both models' S (total contention beside), rank
    agreement by S, the policies in each model and the per-job errors; *unit*: the mixes'
    time scale (seconds)."""
    pols = [*MAIN, *SHOWN]
    out = ["## Mixes", ""]
    out += table(
        ["mix", "jobs: id pattern hosts rate duty period"],
        [[v.mix.name, v.mix.describe(link, 1e-6, "us")] for v in vals],
        "l",
    )
    out += [
        "",
        f"## S per mix, fluid / packet ({iterations} iterations)",
        "",
        "S: node-weighted mean slowdown; rho: Spearman's rank correlation of the five"
        " policies' S between the models (average ranks for ties; n/a: a model sees no"
        " slowdown under any policy); rho 1 %: the same with excess slowdowns S - 1 closer"
        " than 1 % of the mix's largest counted as ties in both models; one-vl's total"
        " contention (us, fluid / packet) beside.",
        "",
    ]
    rows = []
    for v in vals:
        row = [v.mix.name]
        row += [f"{1 + v.excess('fluid', p):.3f} / {1 + v.excess('packet', p):.3f}" for p in MAIN]
        row += [
            f"{v.total('fluid', 'one-vl') * 1e6:.1f} / {v.total('packet', 'one-vl') * 1e6:.1f}",
            rho_text(v.rho()),
            rho_text(v.rho(TIE)),
            f"{v.wall_fluid_s:.1f} / {v.wall_packet_s:.1f}",
        ]
        rows.append(row)
    out += table(
        ["mix", *MAIN, "one-vl contention us", "rho", "rho 1 %", "wall s fluid / packet"],
        rows,
        "lr",
    )
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
        "lr",
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
        if tp[tf.index(min(tf))] <= min(tp) * 1.01 + EXCESS_EPS:
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
        "Over the mixes where the model sees one-vl slow some job: the mean of each"
        " policy's excess slowdown S - 1 relative to one-vl's (lower is better), and the mixes"
        " where it beats / loses to equal, bandwidth and the fluid model's optimum (by more"
        " than 1 % of one-vl's excess).",
        "",
    ]
    rows = []
    for p in pols:
        row = [p]
        for model in ("fluid", "packet"):
            row.append(f"{relative_to_one_vl(vals, model, p):.3f}")
        for model in ("fluid", "packet"):
            live = [v for v in vals if v.excess(model, "one-vl") > EXCESS_EPS]
            cells = []
            for other in ("equal", "bandwidth", "optimal"):
                tol = [TIE * v.excess(model, "one-vl") for v in live]
                win = sum(
                    1
                    for v, t in zip(live, tol, strict=True)
                    if v.excess(model, p) < v.excess(model, other) - t
                )
                lose = sum(
                    1
                    for v, t in zip(live, tol, strict=True)
                    if v.excess(model, p) > v.excess(model, other) + t
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
        "lr",
    )
    both = [v for v in vals if v.excess("packet", "one-vl") > EXCESS_EPS]
    out += [
        "",
        f"{TUNED}: each model tunes on what it shows. Kept, on the {len(both)} mixes the"
        f" packet model sees one-vl slow a job on: fluid {picks(v.fluid[TUNED] for v in both)};"
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
        "lr",
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
        "lllr",
    )
    return out


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sim.validate", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--seeds", type=int, help="mixes per tree, placement, shape (default 3)")
    parser.add_argument("--iterations", type=int, help="default 4")
    parser.add_argument("--only", help="run the mixes whose name contains this")
    parser.add_argument("--json", type=Path, help="write every total here")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="periods this many times longer (the packet model's cost grows alike)",
    )
    add_fluid_buffers_option(parser)
    parser.add_argument(
        "--packet-search",
        action="store_true",
        help="also search every setup in the packet model, for ibqos's gap to"
        " its optimum (slow: minutes per 4-job mix)",
    )
    parser.add_argument(
        "--buffer-packets",
        type=int,
        default=PACKET_BUFFER,
        help=f"the packet model's input buffer per VL (default {PACKET_BUFFER})",
    )
    args = parser.parse_args(argv)
    check_fluid_buffers(parser, args)
    start = time.perf_counter()
    print(f"machine: {machine()}", flush=True)
    load0 = os.getloadavg()[0]
    doc: dict[str, object] = {"machine": machine()}
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
        say(
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
            "slowdown": {
                m: {p: o.slowdown for p, o in outs.items()}
                for m, outs in (("fluid", v.fluid), ("packet", v.packet))
            },
            # which candidate each model kept: the two picks' "jobs" rows below may
            # pair different setups
            "picks": {
                p: {m: o[p].setup.name for m, o in (("fluid", v.fluid), ("packet", v.packet))}
                for p in (TUNED, BEST_RATIO)
            },
            "packet_optimal": (
                {
                    "total_contention_s": v.packet_optimal.total_contention_s,
                    "slowdown": v.packet_optimal.slowdown,
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
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
