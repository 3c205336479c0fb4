"""Evaluate the QoS policies with the contention simulator's fluid model.

Usage: python -m bench.sim.eval [--seeds N] [--iterations N] [--only TEXT] [--svg DIR]
                                  [--json FILE] [--fluid-buffers N]
       (--fluid-buffers: the fluid model's switch buffers; default as ``ibqos simulate``:
       8 packets per lane per input, as the senders are per host)
       python -m bench.sim.eval --closed-loop [--margin X] [--margin-sigmas K]
                                  [--predicted-slack X] [--only TEXT] [--json FILE]
       (ibqos's tuning in the closed loop against the fixed policies; the options set the
       loops' tuning section)
       python -m bench.sim.eval --validate [OPTIONS] runs python -m bench.sim.validate

Mixes (:mod:`bench.sim.mixes`) on two slimmed two-level fat trees of 64 hosts (4 leaf switches of
16 hosts, EDR links): ``2;16,4;1,8`` (8 uplinks per leaf, 2:1) and ``2;16,4;1,4``
(4 uplinks, 4:1).  Per tree, placement (``contiguous``, ``fragmented``) and seed, four
mixes: 2, 3 and 4 jobs on ibqos's default lanes (8 data VLs, SL 0 reserved), and 5 jobs on
3 lanes (``data_vls=3, vlarb_low_cap=3``: more jobs than lanes); periods of a few ms
(iterations of 2-12 ms).  Every policy of :mod:`ibqos.sim.policies` runs on every mix, with
ibqos's variants and ``optimal`` (:func:`bench.sim.run.run_fluid`): other weight
laws, ibqos's lanes with the weights reversed (``ibqos ratio 1/2``), ``ibqos tuned``, the
best by observation of ibqos's law at ratios 2, 1, 4 and 1/2 (:func:`bench.sim.run.tuned`), and
``ibqos best ratio``, the best of the same by S.

The measure is S, the node-weighted mean slowdown; a policy's gain is the share of the best
fixed policy's (one-vl, equal, bandwidth) excess slowdown it removes, its gap the optimum's
gain less its own (points), its share of the optimum its gain over the optimum's
(:class:`bench.sim.run.Totals`).  Total contention is printed beside.  Prints the mixes, a
table of S per mix, summaries, and the setups where ibqos is more than 5 points off;
``--svg DIR`` writes two SVG charts (``sim-eval-contention.svg``: S relative to one-vl's,
``sim-eval-gap.svg``; hand-written SVG, no plotting library).  ``--search-limit-s`` stops
each optimum's search there (the optimum is then a bound, marked ``≥``).  Everything is
drawn from fixed seeds: the same command prints the same mixes.
Tables go to stdout (Markdown), one progress line per mix to stderr.
docs/simulate-evaluation.md holds runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import child_env
from bench.machine import machine
from bench.report import say, table
from bench.sim.cells import buffers_used, ms, pct, pts, setup_text, share_text
from bench.sim.charts import groups, svg_contention, svg_gap
from bench.sim.mixes import SHAPES_64, TREES, host_link, mixes, network
from bench.sim.run import (
    CLOSED_MAIN,
    EXCESS_EPS,
    GAP_TARGET,
    LOOP,
    LOOP_UNRANKED,
    MAIN,
    SHOWN,
    TUNED,
    ClosedResult,
    MixResult,
    add_fluid_buffers_option,
    check_fluid_buffers,
    picks,
    run_closed,
    run_fluid,
)
from ibqos.config.tuning import TuningConfig

#: S closer than this counts as a tie when policies are compared mix by mix
TIE_S = 1e-3

# -- report -------------------------------------------------------------------------------


def eval_report(results: list[MixResult], iterations: int, link: float) -> list[str]:
    """The evaluation's Markdown report: mixes, S per mix, summaries, far setups."""
    out = ["## Mixes", ""]
    out += table(
        ["mix", "jobs: id pattern hosts rate duty period"],
        [[r.mix.name, r.mix.describe(link, 1e-3, "ms")] for r in results],
        "l",
    )
    out += ["", f"## S per mix (fluid model, {iterations} iterations)", ""]
    out += [
        "S = node-weighted mean slowdown per policy; best fixed = the least S of one-vl,"
        " equal and bandwidth; gain = share of the best fixed policy's excess S - 1 removed;"
        " share = ibqos-fixed's gain over the optimum's; gap = the optimum's gain less"
        " ibqos-fixed's, in points, then ibqos's variants' gaps"
        f" ({', '.join(SHOWN)}); contention (ms, one-vl / ibqos-fixed / optimal) beside."
        " An optimum marked ≥ is a bound: its search stopped at its limit.",
        "",
    ]
    rows = []
    for r in results:
        row = [r.mix.name, *(f"{r.s(p):.3f}" for p in MAIN[:-1]), _optimal_s(r)]
        row += [r.best_fixed, pct(r.gain("ibqos-fixed")), pct(r.gain("optimal"))]
        row += [share_text(r.share()), pts(r.gap())]
        row += [pts(r.gap(v)) for v in SHOWN]
        row.append(" / ".join(ms(r.total(p)) for p in ("one-vl", "ibqos-fixed", "optimal")))
        row.append(f"{r.wall_s:.1f}")
        rows.append(row)
    out += table(
        [
            "mix",
            *(f"S {p}" for p in MAIN),
            "best fixed",
            "gain ibqos-fixed",
            "gain optimal",
            "share",
            "gap",
            *(f"gap {v.removeprefix('ibqos ')}" for v in SHOWN),
            "contention ms",
            "wall s",
        ],
        rows,
        "lr",
    )
    out += ["", "## Summary", ""]
    out += summary(results)
    live = [r for r in results if r.contended]
    out += [
        "",
        f"{TUNED} kept, on the {len(live)} mixes with contention: "
        f"{picks(r.outcomes[TUNED] for r in live)}.",
    ]
    out += ["", "## Where ibqos is more than 5 points from the optimum", ""]
    far = [r for r in results if r.gap() > GAP_TARGET]
    if not far:
        out.append("Nowhere.")
    for r in far:
        out += [f"### {r.mix.name}: gap {pts(r.gap())}", ""]
        jobs = r.mix.jobs
        rows = []
        for p in [*MAIN, *SHOWN]:
            o = r.outcomes[p]
            per = {j.id: j.slowdown for j in o.jobs}
            rows.append(
                [p, setup_text(o.setup, jobs)]
                + [f"{per[j.id]:.3f}" for j in jobs]
                + [f"{r.s(p):.3f}", ms(r.total(p))]
            )
        out += table(
            ["policy", "lanes: VL[jobs]:packets per round"]
            + [j.id for j in jobs]
            + ["S", "contention ms"],
            rows,
            "llr",
        )
        alone_ms = ", ".join(f"{j.id} {ms(j.t_alone_s)}" for j in r.outcomes["one-vl"].jobs)
        out += ["", f"Slowdown per job; T_alone: {alone_ms} ms.", ""]
    return out


def _optimal_s(r: MixResult) -> str:
    """The optimum's S, marked ≥ when its search stopped at a limit (a bound)."""
    return f"≥ {r.s('optimal'):.3f}" if r.optimum_bound else f"{r.s('optimal'):.3f}"


def versus(rs: Sequence[MixResult], policy: str, other: str) -> str:
    """Mixes where *policy*'s S is lower / higher than *other*'s by more than
    :data:`TIE_S`."""
    win = sum(1 for r in rs if r.s(policy) < r.s(other) - TIE_S)
    lose = sum(1 for r in rs if r.s(policy) > r.s(other) + TIE_S)
    return f"{win}/{lose}"


def summary(results: list[MixResult]) -> list[str]:
    """The summary tables: per group of mixes, then over all mixes."""
    pols = [*MAIN, *SHOWN]
    out = [
        "Per group of mixes, over those where one-vl slows some job: the mean S of each"
        " policy and the mean of its gain over the best fixed policy.",
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
            mean_s = statistics.fmean(r.s(p) for r in live)
            row.append(f"{mean_s:.3f} / {pct(statistics.fmean(r.gain(p) for r in live))}")
        rows.append(row)
    out += table(["mixes", "contended", *(f"{p}: S / gain" for p in pols)], rows, "lr")
    out += [
        "",
        "ibqos (and its variants) against the optimum and the other policies, per group:"
        " mixes within 5 points of the optimum's gain, and mixes where it beats / loses to"
        f" equal and bandwidth (S lower / higher by more than {TIE_S:g}).",
        "",
    ]
    rows = []
    for key, rs in groups(results).items():
        row = [key]
        for p in ("ibqos-fixed", *SHOWN):
            within = sum(1 for r in rs if r.gap(p) <= GAP_TARGET)
            row.append(
                f"{within}/{len(rs)}; {versus(rs, p, 'equal')}; {versus(rs, p, 'bandwidth')}"
            )
        rows.append(row)
    out += table(
        ["mixes", *(f"{p}: ≤ 5 pts; vs equal; vs bandwidth" for p in ("ibqos-fixed", *SHOWN))],
        rows,
        "lr",
    )
    out += overall(results, ("ibqos-fixed", *SHOWN, "equal", "bandwidth", "one-vl"))
    return out


def overall(results: Sequence[Any], policies: Sequence[str], below_base: bool = False) -> list[str]:
    """The "Over all mixes" table: per policy its gaps to the optimum (points), how many
    mixes it is within 5 points of it on (and, with *below_base*, at or below the best of
    one-vl, equal and bandwidth on), its mean S, and its total contention beside."""
    rows = []
    for p in policies:
        gaps = [r.gap(p) for r in results if r.contended]
        shares = [x for x in (r.share(p) for r in results if r.contended) if x is not None]
        below = (
            [f"{sum(_versus_base(r, p) == 'yes' for r in results)}/{len(results)}"]
            if below_base
            else []
        )
        rows.append(
            [
                p,
                pts(statistics.median(gaps)) if gaps else "-",
                pts(statistics.fmean(gaps)) if gaps else "-",
                pts(max(gaps)) if gaps else "-",
                f"{sum(r.gap(p) <= GAP_TARGET for r in results)}/{len(results)}",
                *below,
                share_text(statistics.median(shares)) if shares else "-",
                f"{statistics.fmean(r.s(p) for r in results):.3f}" if results else "-",
                ms(math.fsum(r.total(p) for r in results)),
            ]
        )
    header = ["policy", "gap to optimum: median", "mean", "max", "≤ 5 pts off"]
    header += ["≤ best of one-vl, equal, bandwidth"] if below_base else []
    header += ["share of the optimum's gain: median", "mean S"]
    return [
        "",
        "Over all mixes:",
        "",
        *table([*header, "total contention, all mixes (ms)"], rows, "lr"),
    ]


# -- the closed loop ----------------------------------------------------------------------

BASELINES = ("one-vl", "equal", "bandwidth")


def loop_tuning(args: argparse.Namespace) -> TuningConfig:
    """The loops' ``tuning`` section: its defaults with the options given."""
    given = {
        "margin": args.margin,
        "margin_sigmas": args.margin_sigmas,
        "predicted_slack": args.predicted_slack,
    }
    return TuningConfig(**{k: v for k, v in given.items() if v is not None})


def closed_report(results: list[ClosedResult], top: int, cfg: TuningConfig) -> list[str]:
    """The closed-loop evaluation's Markdown report (*cfg*: the loops' tuning)."""
    out = ["## ibqos tuning in the closed loop (fluid model, trials included)", ""]
    out += [
        f"Tuning: candidates {cfg.candidates}, shortlist {cfg.shortlist}, trial_sweeps"
        f" {cfg.trial_sweeps}, margin {cfg.margin:g}, margin_sigmas {cfg.margin_sigmas:g},"
        f" predicted_slack {cfg.predicted_slack:g}, floor {cfg.floor:g}, drift"
        f" {cfg.drift:g}, max_reloads_per_hour {cfg.max_reloads_per_hour} (settle_s 0).",
        "",
    ]
    out += [
        "S (node-weighted mean slowdown) at the N `ibqos simulate --policy ibqos` takes (4"
        " rounds of tuning for the longest job), every trial's time counted;"
        f" optimal = the best by S of the fixed policies and of the {top} best setups of"
        " the exhaustive search at 10 iterations, re-run at N; gap = the optimum's gain"
        " over the best fixed policy less the policy's, in points of its excess S - 1;"
        " `≤ base` = ibqos at or below the best of one-vl, equal and bandwidth (yes, or its"
        " excess S over it); contention (ms, one-vl / ibqos / optimal) beside.",
        "",
    ]
    rows = []
    for r in results:
        row = [r.mix.name, str(r.iterations), f"{r.sweep_s * 1e3:.1f}"]
        row += [f"{r.s(p):.3f}" for p in CLOSED_MAIN]
        row += [pts(r.gap(LOOP)), pts(r.gap(LOOP_UNRANKED)), pts(r.gap("ibqos-fixed"))]
        row.append(_versus_base(r, LOOP))
        st = r.loops[LOOP].status
        row.append(f"{st.wanted}; {st.rounds}/{st.reloads}")
        row.append(" / ".join(ms(r.total(p)) for p in ("one-vl", LOOP, "optimal")))
        row.append(f"{r.wall_s:.0f}")
        rows.append(row)
    out += table(
        [
            "mix",
            "N",
            "sweep ms",
            *(f"S {p}" for p in CLOSED_MAIN),
            "gap ibqos",
            "gap no-predict",
            "gap fixed",
            "≤ base",
            "kept; rounds/reloads",
            "contention ms",
            "wall s",
        ],
        rows,
        "lr",
    )
    out += overall(results, (LOOP, LOOP_UNRANKED, "ibqos-fixed", *BASELINES), below_base=True)
    out += ["", "What the closed loop did per mix (with the prediction):", ""]
    for r in results:
        out.append(f"- {r.mix.name}: {r.loops[LOOP].summary()}")
    return out


def _versus_base(r: ClosedResult, policy: str) -> str:
    """ "yes" when *policy*'s S is at or below the best of the baselines' (within
    round-off), else its excess S over that best."""
    best = min(r.s(p) for p in BASELINES)
    mine = r.s(policy)
    if mine <= best + EXCESS_EPS:
        return "yes"
    return f"+{mine - best:.3f}"


def main_closed(args: argparse.Namespace) -> int:
    """``--closed-loop``: ibqos's tuning in the closed loop against the fixed policies."""
    start = time.perf_counter()
    print(f"machine: {machine()}", flush=True)
    load0 = os.getloadavg()[0]
    todo = mixes(TREES, SHAPES_64, args.seeds or 2, 1e-3)
    todo = [m for m in todo if not args.only or args.only in m.name]
    results = []
    docs = []
    for i, mix in enumerate(todo):
        tuning = loop_tuning(args)
        r = run_closed(mix, args.fluid_buffers, args.top, tuning=tuning)
        results.append(r)
        say(
            f"[{i + 1}/{len(todo)}] {mix.name}: N {r.iterations}, S one-vl"
            f" {r.s('one-vl'):.3f}, equal {r.s('equal'):.3f}, ibqos {r.s(LOOP):.3f}"
            f" ({pts(r.gap(LOOP))}), no-predict {r.s(LOOP_UNRANKED):.3f}, optimal"
            f" {r.s('optimal'):.3f}, {r.wall_s:.0f} s"
        )
        docs.append(
            {
                "mix": mix.name,
                "iterations": r.iterations,
                "sweep_s": r.sweep_s,
                "slowdown": {p: r.s(p) for p in r.outcomes},
                "totals": {p: r.total(p) for p in r.outcomes},
                "setups": {p: setup_text(o.setup, mix.jobs) for p, o in r.outcomes.items()},
                "loops": {p: loop.summary() for p, loop in r.loops.items()},
            }
        )
        if args.json:  # as it goes: a long run that is stopped keeps what it did
            args.json.write_text(json.dumps({"machine": machine(), "closed_loop": docs}, indent=1))
    print(
        f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after;"
        f" {time.perf_counter() - start:.0f} s in all\n"
    )
    print("\n".join(closed_report(results, args.top, loop_tuning(args))))
    return 0


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if "--validate" in args_in:  # the validation is its own program: run it
        rest = [a for a in args_in if a != "--validate"]
        argv_child = [sys.executable, "-m", "bench.sim.validate", *rest]
        return subprocess.run(argv_child, env=child_env(), check=False).returncode
    parser = argparse.ArgumentParser(
        prog="python -m bench.sim.eval", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="fluid against packet model: run bench.sim.validate with the other options",
    )
    parser.add_argument("--seeds", type=int, help="mixes per tree, placement, shape (default 2)")
    parser.add_argument("--iterations", type=int, help="default 10")
    parser.add_argument("--only", help="run the mixes whose name contains this")
    parser.add_argument("--svg", type=Path, help="write the evaluation's SVG charts here")
    parser.add_argument("--json", type=Path, help="write every S and total here")
    parser.add_argument(
        "--workers", type=int, default=1, help="processes for each optimum's search (default 1)"
    )
    parser.add_argument(
        "--search-limit-s",
        type=float,
        help="stop each optimum's search after this many wall seconds; its answer is then a"
        " bound (default: search to the end)",
    )
    parser.add_argument(
        "--closed-loop",
        action="store_true",
        help="ibqos tuning in the closed loop (trials included) against the fixed policies,"
        " at the N `ibqos simulate --policy ibqos` takes",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=5,
        help="--closed-loop: setups of the 10-iteration search re-run at N for the optimum"
        " (default 5)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        help="--closed-loop: the loops' tuning.margin (default the tuning section's, 0)",
    )
    parser.add_argument(
        "--margin-sigmas",
        type=float,
        help="--closed-loop: the loops' tuning.margin_sigmas (default the tuning section's, 0)",
    )
    parser.add_argument(
        "--predicted-slack",
        type=float,
        help="--closed-loop: the loops' tuning.predicted_slack (default the tuning section's,"
        " 0.05)",
    )
    add_fluid_buffers_option(parser)
    args = parser.parse_args(args_in)
    check_fluid_buffers(parser, args)
    if args.closed_loop:
        return main_closed(args)
    start = time.perf_counter()
    print(f"machine: {machine()}", flush=True)
    load0 = os.getloadavg()[0]
    doc: dict[str, object] = {"machine": machine()}
    iterations = args.iterations or 10
    todo = mixes(TREES, SHAPES_64, args.seeds or 2, 1e-3)
    todo = [m for m in todo if not args.only or args.only in m.name]
    results = []
    for i, mix in enumerate(todo):
        r = run_fluid(
            mix, iterations, args.fluid_buffers, workers=args.workers, limit_s=args.search_limit_s
        )
        results.append(r)
        say(
            f"[{i + 1}/{len(todo)}] {mix.name}: S one-vl {r.s('one-vl'):.3f}, ibqos-fixed"
            f" {r.s('ibqos-fixed'):.3f}, optimal {_optimal_s(r)} (gap {pts(r.gap())}),"
            f" {r.wall_s:.1f} s"
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
            "slowdown": {p: r.s(p) for p in r.outcomes},
            "optimum_bound": r.optimum_bound,
            "totals": {p: r.total(p) for p in r.outcomes},
            "setups": {p: setup_text(o.setup, r.mix.jobs) for p, o in r.outcomes.items()},
            "jobs": {
                p: {j.id: [j.t_alone_s, j.t_sharing_s] for j in o.jobs}
                for p, o in r.outcomes.items()
            },
        }
        for r in results
    ]
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
