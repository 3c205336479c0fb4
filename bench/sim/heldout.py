"""Mixes nobody tuned for: every policy on generated mixes, real applications and the
held-out mix, measured in S at the closed loop's N.

Usage: python -m bench.sim.heldout [--generated N] [--seed S] [--start K] [--no-named]
                                   [--only TEXT] [--jobs K] [--search-jobs K]
                                   [--short N] [--json FILE]
       python -m bench.sim.heldout --from-json FILE

Mixes: the held-out mix (:func:`bench.sim.mixes.held_out`), the real applications' mixes
(:func:`bench.sim.generate.app_mixes`), then *N* mixes drawn from seed *S*
(:func:`bench.sim.generate.draw`, indices *K* to *K + N - 1*).  Per mix, in the fluid
model at the N ``ibqos simulate --policy ibqos`` takes (:func:`ibqos.sim.closedloop.
default_iterations`, the same for every policy), with ``ibqos simulate``'s buffers:

- ``one-vl``, ``equal``, ``bandwidth``, ``ibqos-fixed`` (:mod:`ibqos.sim.policies`);
- ``ibqos``: the closed loop (:func:`ibqos.sim.closedloop.closed_loop`, the fluid model's
  prediction ranking the candidates), tuning's default section, its trials' time counted;
- ``optimal``: the search of ``--policy optimal`` run at *--short* iterations (the
  search at N would take hours), its setup re-run at N, kept only if it beats the fixed
  policies' and ibqos's setups there.  The search runs on mixes of at most
  *--search-jobs* jobs it can search (:func:`ibqos.sim.policies.too_large_to_search`); on
  the others the column holds the best setup known (the least S of the rest), a bound
  marked ``≥`` (the setup ibqos ended with is among them there).  Mixes where one-vl has
  no contention are not searched (nothing to gain).

Each cell is S (node-weighted mean slowdown, :attr:`ibqos.sim.evaluate.Outcome.slowdown`)
with total contention per iteration beside it.  The summary counts, over all mixes and
over the contended ones (one-vl's S above 1.0005), the share where ibqos is at or below
the best of one-vl, equal and bandwidth (within 0.0001 of its S), and the share within
5 points of the optimum's gain (:meth:`~ibqos.sim.evaluate.Outcome.gain`: the share of
that best fixed policy's excess slowdown each removes), where the optimum was searched.
Progress goes to stderr, one line per mix as it ends; the Markdown report to stdout, in
mix order; ``--jobs K`` runs K mixes at once in processes.  The same arguments draw the
same mixes; docs/simulate-evaluation.md holds runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench.machine import machine
from bench.report import say, table
from bench.sim.generate import SEED, app_mixes, generate
from bench.sim.mixes import Mix, held_out, host_link, network
from ibqos.config.tuning import TuningConfig
from ibqos.errors import SimError
from ibqos.sim import policies, senders
from ibqos.sim.closedloop import (
    closed_loop,
    default_iterations,
    default_sweep_s,
    fluid_predictor,
    fluid_refiner,
)
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import Outcome, RunSettings
from ibqos.sim.predict import Steady
from ibqos.sim.workload import prepare

FIXED = ("one-vl", "equal", "bandwidth", "ibqos-fixed")
BASELINES = ("one-vl", "equal", "bandwidth")
LOOP = "ibqos"
POLICIES = (*FIXED, LOOP, "optimal")
#: one-vl's S at or below this is no contention
CLEAN_S = 1.0005
#: ibqos within this many points of the optimum's gain counts as near it
NEAR = 0.05
#: S within this of the best baseline's counts as at or below it: the fluid model's
#: round-off between setups that run alike (S is printed to 3 decimals)
TIE = 1e-4


@dataclass
class Result:
    """One mix under every policy, as plain data (it crosses process boundaries).

    Attributes:
        mix: the mix's name.
        jobs: the jobs in one line.
        iterations: N.
        s: policy -> S.
        contention_ms: policy -> total contention per iteration, ms.
        searched: the optimum comes from the search (else it is the best known: a bound).
        gains: policy -> its gain over the best baseline (share of its excess removed).
        loop: what the closed loop did, one line.
        wall_s: seconds the mix took.
    """

    mix: str
    jobs: str
    iterations: int
    s: dict[str, float]
    contention_ms: dict[str, float]
    searched: bool
    gains: dict[str, float]
    loop: str
    wall_s: float

    @property
    def contended(self) -> bool:
        return self.s["one-vl"] > CLEAN_S

    @property
    def best_base(self) -> str:
        return min(BASELINES, key=lambda p: self.s[p])

    @property
    def at_or_below(self) -> bool:
        """ibqos's S at or below the best baseline's."""
        return self.s[LOOP] <= self.s[self.best_base] + TIE

    @property
    def near_optimum(self) -> bool:
        """ibqos's gain within :data:`NEAR` of the optimum's (meaningful where searched;
        no contention, no gain to miss)."""
        return not self.contended or self.gains[LOOP] >= self.gains["optimal"] - NEAR


def describe(mix: Mix) -> str:
    """The jobs in one line: id, pattern (an application's name), hosts, rate (share of
    the host link), duty, period."""
    link = host_link(network(mix.xgft))
    parts = []
    for j in mix.jobs:
        pat = {"all-to-all": "a2a", "matrix": j.name}.get(j.pattern, j.pattern)
        parts.append(
            f"{pat} {len(j.nodes)}h {j.rate_bytes_per_s / link:.0%}"
            f" d{j.duty:.2f} {j.period_s * 1e3:.0f}ms"
        )
    return "; ".join(parts)


def run_mix(mix: Mix, search_jobs: int, short: int) -> Result:
    """*mix* under every policy (module docstring)."""
    start = time.perf_counter()
    net = network(mix.xgft)
    jobs = prepare(net, mix.jobs)
    bp = senders.auto_buffers(jobs)
    tuning = TuningConfig()
    sweep = default_sweep_s(jobs)
    n = default_iterations(jobs, sweep, tuning)
    runs = RunSettings("fluid", net, jobs, n, buffer_packets=bp)
    base = policies.one_vl(jobs, mix.lanes)
    t_alone = runs.alone(base)
    base_run = runs.run(base)
    out: dict[str, Outcome] = {}
    for p in FIXED:
        arb = policies.setup_of(p, runs, mix.lanes, base_run)
        out[p] = runs.evaluate(arb, t_alone, base_run if p == "one-vl" else None)
    phases = {j.id: Phases(j.job.duty, j.job.period_s) for j in jobs}
    steady = Steady(buffer_packets=bp)
    predictor = fluid_predictor(net, mix.jobs, steady, phases)
    # tuning as the agent runs it by default: the search, then refinement after a round
    refiner = fluid_refiner(net, mix.jobs, steady, phases)
    loop = closed_loop(runs, mix.lanes, tuning, sweep, predictor, refiner)
    out[LOOP] = replace(runs.evaluate(loop.final, t_alone, loop.run), policy=LOOP)
    # the best known setup at N: the fixed ones, the one the loop ended with, the search's
    known = [out[p] for p in FIXED]
    searched = False
    if out["one-vl"].slowdown > CLEAN_S and len(jobs) <= search_jobs:
        try:
            short_runs = RunSettings("fluid", net, jobs, short, buffer_packets=bp)
            arb = policies.setup_of("optimal", short_runs, mix.lanes)
        except SimError:
            pass  # too large to search: the bound stands
        else:
            known.append(runs.evaluate(replace(arb, name="optimal"), t_alone))
            searched = True
    elif out["one-vl"].slowdown <= CLEAN_S:
        searched = True  # no contention: nothing beats one-vl
    if not searched:  # the bound: the loop's last setup is known too
        known.append(runs.evaluate(loop.final, t_alone))
    out["optimal"] = replace(min(known, key=lambda o: o.slowdown), policy="optimal")
    best = out[min(BASELINES, key=lambda p: out[p].slowdown)]
    return Result(
        mix.name,
        describe(mix),
        n,
        {p: o.slowdown for p, o in out.items()},
        {p: o.total_contention_s / n * 1e3 for p, o in out.items()},
        searched,
        {p: o.gain(best) for p, o in out.items()},
        loop.summary(),
        time.perf_counter() - start,
    )


def _run(job: tuple[Mix, int, int]) -> Result:
    return run_mix(*job)


def _results(work: Sequence[tuple[Mix, int, int]], processes: int) -> Iterator[tuple[int, Result]]:
    """Each mix's index and result as it ends: here in order, or in *processes*
    processes (a slow mix holds back no other's progress line, nor its saving)."""
    if processes == 1:
        yield from enumerate(map(_run, work))
        return
    with ProcessPoolExecutor(processes) as pool:
        futures = {pool.submit(_run, w): k for k, w in enumerate(work)}
        for future in as_completed(futures):
            yield futures[future], future.result()


# -- report -------------------------------------------------------------------------------


def cell(r: Result, p: str) -> str:
    bound = "≥ " if p == "optimal" and not r.searched else ""
    return f"{bound}{r.s[p]:.3f} ({r.contention_ms[p]:.2f})"


def report(results: Sequence[Result]) -> list[str]:
    """The Markdown report: mixes, S per mix and policy, the summary."""
    out = ["## Mixes", ""]
    out += table(
        ["mix", "jobs: pattern hosts rate duty period"], [[r.mix, r.jobs] for r in results]
    )
    out += ["", "## S per mix and policy", ""]
    out += [
        "S (node-weighted mean slowdown) at N, total contention per iteration in ms in"
        " brackets; `≥`: the optimum was not searched, the best known setup stands (a"
        " bound); gain = share of the best of one-vl, equal and bandwidth's excess S"
        " removed; `≤ base`: ibqos at or below that best.",
        "",
    ]
    rows = [
        [
            r.mix,
            str(r.iterations),
            *(cell(r, p) for p in POLICIES),
            f"{r.gains[LOOP]:+.0%}" if r.contended else "-",
            f"{r.gains['optimal']:+.0%}" if r.contended else "-",
            "yes" if r.at_or_below else "no",
            f"{r.wall_s:.0f}",
        ]
        for r in results
    ]
    out += table(
        ["mix", "N", *POLICIES, "gain ibqos", "gain optimal", "≤ base", "wall s"], rows, "lr"
    )
    out += ["", "## Summary", ""]
    out += summary(results)
    out += ["", "What the closed loop did per mix:", ""]
    out += [f"- {r.mix}: {r.loop}" for r in results]
    return out


def _share(hits: int, of: int) -> str:
    return f"{hits}/{of} ({hits / of:.0%})" if of else "-"


def summary(results: Sequence[Result]) -> list[str]:
    """Per group (all, contended; held-out and applications, generated): ibqos at or
    below the best baseline, and near the optimum where it was searched."""
    groups = {
        "all mixes": list(results),
        "contended": [r for r in results if r.contended],
        "generated, contended": [r for r in results if r.contended and r.mix.startswith("gen")],
        "named (held-out, apps)": [r for r in results if not r.mix.startswith("gen")],
    }
    rows = []
    for name, rs in groups.items():
        known = [r for r in rs if r.searched]
        live = [r for r in rs if r.contended]  # gains over no contention are round-off

        def mean(p: str, live: list[Result] = live) -> str:
            return f"{sum(r.gains[p] for r in live) / len(live):+.1%}" if live else "-"

        rows.append(
            [
                name,
                str(len(rs)),
                _share(sum(r.at_or_below for r in rs), len(rs)),
                _share(sum(r.near_optimum for r in known), len(known)),
                mean(LOOP),
                mean("ibqos-fixed"),
            ]
        )
    return table(
        [
            "mixes",
            "count",
            "ibqos ≤ best of one-vl, equal, bandwidth",
            "ibqos within 5 points of the optimum's gain (searched)",
            "mean gain ibqos (contended)",
            "mean gain ibqos-fixed (contended)",
        ],
        rows,
        "lr",
    )


# -- main -----------------------------------------------------------------------------------


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.sim.heldout", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--generated", type=int, default=100, help="generated mixes (default 100)")
    ap.add_argument("--seed", type=int, default=SEED, help=f"their seed (default {SEED})")
    ap.add_argument("--start", type=int, default=0, help="index of the first (default 0)")
    ap.add_argument("--no-named", action="store_true", help="leave out held-out and apps")
    ap.add_argument("--only", help="run the mixes whose name contains this")
    ap.add_argument("--jobs", type=int, default=1, help="mixes run at once (processes)")
    ap.add_argument(
        "--search-jobs",
        type=int,
        default=3,
        help="search the optimum on mixes of at most this many jobs (default 3)",
    )
    ap.add_argument("--short", type=int, default=10, help="the search's iterations (default 10)")
    ap.add_argument("--json", type=Path, help="write the results here, as they come")
    ap.add_argument(
        "--from-json", type=Path, help="render the results a --json file holds, run nothing"
    )
    args = ap.parse_args(argv)
    for opt in ("generated", "start", "search_jobs"):
        if getattr(args, opt) < 0:
            ap.error(f"--{opt.replace('_', '-')}: expected 0 or more")
    if args.jobs < 1 or args.short < 1:
        ap.error("--jobs, --short: expected 1 or more")
    return args


def todo(args: argparse.Namespace) -> list[Mix]:
    """The mixes the arguments ask for, in report order."""
    mixes = [] if args.no_named else [held_out(), *app_mixes()]
    mixes += generate(args.generated, args.seed, args.start)
    return [m for m in mixes if not args.only or args.only in m.name]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.from_json:  # a run saved (or stopped) earlier: its mixes, in its order
        doc = json.loads(args.from_json.read_text())
        print(
            f"machine: {doc['machine']}; {len(doc['results'])} mixes, from {args.from_json.name}\n"
        )
        print("\n".join(report([Result(**r) for r in doc["results"]])))
        return 0
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    mixes = todo(args)
    work = [(m, args.search_jobs, args.short) for m in mixes]
    done: dict[int, Result] = {}
    for k, r in _results(work, args.jobs):
        done[k] = r
        say(
            f"[{len(done)}/{len(work)}] {r.mix}: S one-vl {r.s['one-vl']:.3f}, ibqos"
            f" {r.s[LOOP]:.3f}, optimal {'' if r.searched else '≥'}{r.s['optimal']:.3f},"
            f" {r.wall_s:.0f} s"
        )
        if args.json:  # as it goes: a long run stopped keeps what it did, in mix order
            kept = [asdict(done[i]) for i in sorted(done)]
            args.json.write_text(json.dumps({"machine": machine(), "results": kept}, indent=1))
    results = [done[i] for i in sorted(done)]
    print(f"machine: {machine()}")
    print(
        f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after;"
        f" {time.perf_counter() - t0:.0f} s in all, {args.jobs} process(es)\n"
    )
    print("\n".join(report(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
