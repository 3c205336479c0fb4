"""Evaluate learning the jobs' phases from trials: the prediction's error before and after.

Usage: python -m bench.sim.learn [--mixes N] [--seed S] [--noise R] [--xgft X ...]

On seeded generated mixes where the truth is the simulated mix: 2 to 4 jobs of 4 to 24
hosts (:func:`draw`), patterns all-to-all, ring, halo (near-square grid) or random-pairs,
bursts at 20-100 % of the host link, duty 0.1-0.9 and periods 2-50 ms (log-uniform),
placed contiguously or dealt over the leaves at random, on ``2;16,4;1,4`` and
``2;8,8;1,2`` (both 64 hosts, 4:1 at the leaves).

Per mix: three setups, each run as the truth in the steady state of a prediction
(:class:`ibqos.sim.predict.Steady`, its defaults), its per-job mean injection the
measurement (times ``1 + noise x N(0, 1)`` with ``--noise``): the favour-light law
(``ibqos-fixed``, the setup in force when the jobs were measured: the reference), one VL,
then one lane per job with equal weights, the trial held out.  The jobs are estimated as
the agent does with a job's pattern known and its phases not: the assumed phases
(:data:`~ibqos.sim.estimate.ASSUMED_PHASES`), bursts giving the mean measured under the
reference.  :func:`ibqos.sim.learn.learn` fits on the first two and predicts the third.

Printed per tree: the mean relative error of the per-job means on the trial fitted (one VL)
and on the one held out (equal), with the phases assumed (before), fitted (after) and true
(the truth's phases calibrated the same way: what is left is the model's own error, its
shorter runs and its calibration); the mixes where the held-out error fell or rose by more
than a point; and the fit's cost, fluid runs and seconds per mix (median, max).
docs/tuning.md holds one run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

import ibqos
from bench.machine import machine
from bench.report import say, table
from bench.sim.mixes import halo_dims, host_link, leaves, network, place
from ibqos.attribute.patterns import traffic_matrix
from ibqos.jobs.model import PATTERNS, Job
from ibqos.sim import policies
from ibqos.sim.estimate import ASSUMED_PHASES
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.learn import Trial, learn, trial_error
from ibqos.sim.network import Network
from ibqos.sim.predict import Steady, calibrate, steady_times
from ibqos.sim.workload import prepare

TREES = ("2;16,4;1,4", "2;8,8;1,2")
#: the patterns drawn: all but matrix (no matrix to draw from)
DRAWN = tuple(p for p in PATTERNS if p != "matrix")
#: the setups of a mix's trials: reference, fitted, held out
SETUPS = (policies.FIXED, "one-vl", "equal")


@dataclass(frozen=True)
class Result:
    """One mix: the errors (fitted trial, held out) with phases assumed, fitted, true."""

    before: float
    after: float
    held_before: float
    held_after: float
    held_true: float
    runs: int
    seconds: float


def draw(net: Network, rng: np.random.Generator) -> list[Job]:
    """A mix of 2 to 4 jobs (see the module docstring)."""
    by_leaf = leaves(net)
    n_hosts = sum(len(hs) for hs in by_leaf)
    k = int(rng.integers(2, 5))
    sizes = [int(rng.integers(4, 25)) for _ in range(k)]
    while sum(sizes) > n_hosts:
        sizes = [max(2, s // 2) for s in sizes]
    placement = "contiguous" if rng.random() < 0.5 else "fragmented"
    link = host_link(net)
    jobs = []
    for i, nodes in enumerate(place(sizes, placement, by_leaf, rng)):
        pattern = DRAWN[int(rng.integers(len(DRAWN)))]
        jobs.append(
            Job(
                str(i + 1),
                nodes,
                pattern,
                round(float(rng.uniform(0.2, 1.0)) * link, -6),
                round(float(rng.uniform(0.1, 0.9)), 2),
                round(math.exp(rng.uniform(math.log(2e-3), math.log(50e-3))), 4),
                halo_dims=halo_dims(len(nodes)) if pattern == "halo" else None,
            )
        )
    return jobs


def observe(
    net: Network,
    truth: list[Job],
    noise: float,
    rng: np.random.Generator,
    setups: Sequence[str] = SETUPS,
) -> list[Trial]:
    """The trials of *setups*, measured on the truth."""
    sim_jobs = prepare(net, truth)
    fluid = RunSettings("fluid", net, sim_jobs, 10, "auto", 0)
    out: list[Trial] = []
    for name in setups:
        arb = policies.setup_of(name, fluid, policies.DEFAULT_LANES)
        times = steady_times(net, sim_jobs, arb, Steady())
        means = {
            j.id: j.bytes_per_iteration / times[j.id] * (1 + noise * float(rng.normal()))
            for j in sim_jobs
        }
        out.append((arb, means))
    return out


def estimate(net: Network, truth: list[Job], measured: dict[str, float]) -> list[Job]:
    """The jobs as the agent estimates them: pattern known, phases assumed, bursts giving
    the mean measured (capped at the host link, as :func:`~ibqos.sim.estimate.
    estimate_jobs`)."""
    link = host_link(net)
    out = []
    for job in truth:
        unit = replace(job, rate_bytes_per_s=1.0, duty=1.0, period_s=1.0)
        mean = measured[job.id] / float(traffic_matrix(unit).sum())
        duty = ASSUMED_PHASES.duty
        rate = mean / duty
        if rate > link:
            rate, duty = link, min(mean / link, 1.0)
        out.append(replace(job, rate_bytes_per_s=rate, duty=duty, period_s=ASSUMED_PHASES.period_s))
    return out


def one(
    net: Network,
    truth: list[Job],
    noise: float,
    rng: np.random.Generator,
    setups: Sequence[str] = SETUPS,
) -> Result:
    """Observe, estimate, fit and score one mix."""
    trials = observe(net, truth, noise, rng, setups)
    est = estimate(net, truth, dict(trials[0][1]))
    got = learn(net, est, trials)
    # the true phases, each job keeping the mean measured: the model's own error
    true = [
        replace(e, rate_bytes_per_s=t.rate_bytes_per_s, duty=t.duty, period_s=t.period_s)
        for e, t in zip(est, truth, strict=True)
    ]
    ref, measured = trials[0]
    held_true = trial_error(net, calibrate(net, true, measured, ref), trials[-1])
    assert got.held_out_before is not None and got.held_out_after is not None
    return Result(
        got.error_before,
        got.error_after,
        got.held_out_before,
        got.held_out_after,
        held_true,
        got.runs,
        got.seconds,
    )


def summary(tree: str, results: Sequence[Result]) -> list[str]:
    """A row of the table."""

    def mean(xs: Sequence[float]) -> str:
        return f"{100 * statistics.fmean(xs):.1f} %"

    better = sum(r.held_after < r.held_before - 0.01 for r in results)
    worse = sum(r.held_after > r.held_before + 0.01 for r in results)
    secs = [r.seconds for r in results]
    return [
        f"`{tree}`" if tree != "all" else "all",
        str(len(results)),
        mean([r.before for r in results]),
        mean([r.after for r in results]),
        mean([r.held_before for r in results]),
        mean([r.held_after for r in results]),
        mean([r.held_true for r in results]),
        f"{better} / {worse}",
        f"{statistics.median(r.runs for r in results):.0f}",
        f"{statistics.median(secs):.2f} / {max(secs):.2f}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.sim.learn", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--mixes", type=int, default=50, help="mixes per tree")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.0, help="relative noise of a measurement")
    ap.add_argument("--xgft", nargs="+", default=list(TREES))
    ap.add_argument(
        "--setups",
        nargs="+",
        default=list(SETUPS),
        choices=[p for p in policies.POLICIES if p not in (policies.ADAPTIVE, "optimal")],
        help="the trials: the reference first, the one held out last",
    )
    args = ap.parse_args(argv)
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"ibqos {ibqos.__version__} ({rev or '?'}); {machine()}")
    print(f"{args.mixes} mixes per tree, seed {args.seed}, measurement noise {args.noise:g}")
    print()
    rows, every = [], []
    for t, tree in enumerate(args.xgft):
        net = network(tree)
        results = []
        for m in range(args.mixes):
            rng = np.random.default_rng([args.seed, t, m])
            results.append(one(net, draw(net, rng), args.noise, rng, args.setups))
            got = results[-1]
            say(f"{tree} mix {m}: held out {got.held_before:.3f} -> {got.held_after:.3f}")
        rows.append(summary(tree, results))
        every += results
    if len(args.xgft) > 1:
        rows.append(summary("all", every))
    columns = [
        "tree",
        "mixes",
        "fitted: before",
        "after",
        "held out: before",
        "after",
        "true phases",
        "held out better / worse",
        "fluid runs",
        "fit s (median / max)",
    ]
    print("\n".join(table(columns, rows, "lr")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
