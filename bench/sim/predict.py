"""Benchmark the tuner's prediction: candidate setups of the running jobs in the steady state.

Usage: python -m bench.sim.predict [--rounds N] [--only 64|2048] [--warmup W] [--measure M]

A live agent predicts its candidates from what it measured (:func:`ibqos.sim.predict.
estimate_jobs`); here the mixes' jobs are given with their traffic keys, as
:func:`ibqos.sim.predict.predict` takes them, so that the timing is the prediction's alone.

**2,048 nodes, 20 jobs**: the mix of :mod:`bench.sim.bench` (``3;16,16,8;1,8,8``, job
sizes 16-384, periods 2-20 ms, fluid model with a sender per job, which ``auto`` gives
above 512 sending hosts, and no switch buffers).  **64 nodes, 3 jobs**: the mix of
``docs/simulate-validation.md``'s closed-loop check (``2;8,8;1,2``, heavy all-to-all,
moderate halo, light ring, interleaved, 20 ms periods; senders per host).

Eight candidates, as the tuner makes them: ibqos's plan (the favour-light law, kept in
every shortlist), everything on one VL, one lane per job with equal weights, weights in
proportion to bandwidth, and ibqos's grouping of the jobs with its lanes' weights in the
ratios 1, 4, 1/2 and 1/4 from the heaviest lane to the lightest.  Timed: the plan's build
(not part of the prediction: the agent has it); :func:`calibrate` of the jobs to means
measured on one VL (its default three shorter steady-state runs; the means are the declared ones
less 5 %, as the timing does not depend on them); then :func:`predict` of the eight: each
job alone once, then each candidate's steady-state run.  Each stage is timed ``--rounds``
times; the median and the minimum are printed as Markdown with the 30 s target.
docs/simulate-benchmark.md holds one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import ibqos
from bench.machine import machine
from bench.report import head, row
from bench.sim.benchmixes import XGFT_2048, jobs_2048
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.sim import policies
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.predict import Prediction, Steady, calibrate, predict, render_prediction
from ibqos.sim.qos import Arbitration
from ibqos.sim.senders import forget_mix
from ibqos.sim.workload import SimJob, prepare

TARGET_S = 30.0
XGFT_64 = "2;8,8;1,2"
LINK = 12.5e9  # 4x EDR, bytes/s
#: weight ratios from one lane to the next lighter one, besides the plan's own
RATIOS = (1.0, 4.0, 0.5, 0.25)

T = TypeVar("T")


def jobs_64() -> list[Job]:
    """The closed-loop check's mix: per leaf of 8, hosts 1, 2, 5, 6 heavy, 3, 7 moderate,
    4, 8 light."""
    hosts = [f"cn{i:04d}" for i in range(1, 65)]

    def on(slots: Sequence[int]) -> tuple[str, ...]:
        return tuple(h for i, h in enumerate(hosts) if i % 8 in slots)

    return [
        Job("1", on((0, 1, 4, 5)), "all-to-all", 0.5 * LINK, 0.7, 0.02, name="heavy"),
        Job("2", on((2, 6)), "halo", 0.5 * LINK, 0.4, 0.02, name="mod", halo_dims=(4, 4)),
        Job("3", on((3, 7)), "ring", 0.2 * LINK, 0.2, 0.02, name="light"),
    ]


def candidates(plan: Arbitration, jobs: Sequence[SimJob]) -> list[Arbitration]:
    """The eight setups (see the module docstring)."""
    lanes = policies.DEFAULT_LANES
    by_vl: dict[int, list[str]] = {}
    for j in jobs:
        by_vl.setdefault(plan.vl_of(j.id), []).append(j.id)
    packets = plan.low_packets()
    # heaviest lane first: the law gives the heaviest lane the fewest packets
    order = sorted(by_vl, key=lambda vl: (packets.get(vl, 0), vl))
    groups = [by_vl[vl] for vl in order]
    out = [
        replace(plan, name="law"),
        replace(policies.one_vl(jobs, lanes), name="one-vl"),
        policies.grouped([[j.id] for j in jobs], [1.0] * len(jobs), lanes, "equal"),
        policies.grouped(
            [[j.id] for j in jobs],
            [float(j.flows.rate.sum()) * j.job.duty for j in jobs],
            lanes,
            "bandwidth",
        ),
    ]
    for r in RATIOS:
        weights = [r**k for k in range(len(groups))]
        low = min(weights)
        out.append(policies.grouped(groups, [w / low for w in weights], lanes, f"ratio {r:g}"))
    return out


def timed(fn: Callable[[], T], rounds: int) -> tuple[T, list[float]]:
    """fn's result and its wall time in every round (each from scratch)."""
    times = []
    out: T | None = None
    for _ in range(rounds):
        forget_mix()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    assert out is not None
    return out, times


def bench(
    name: str, net: Network, jobs: list[Job], steady: Steady, rounds: int
) -> tuple[list[str], Prediction]:
    """The mix's row of the table (its cells), and its prediction."""
    sim_jobs = prepare(net, jobs)
    plan, build_s = timed(
        lambda: policies.build("ibqos-fixed", net, sim_jobs, 10, buffer_packets=0), rounds
    )
    setups = candidates(plan, sim_jobs)
    measured = {j.id: 0.95 * j.bytes_per_iteration / j.job.period_s for j in sim_jobs}
    in_force = setups[1]
    _, cal_s = timed(lambda: calibrate(net, jobs, measured, in_force), rounds)
    pred, pred_s = timed(lambda: predict(net, sim_jobs, setups, steady), rounds)
    hosts = sum(len(j.nodes) for j in jobs)
    per = statistics.median(pred_s) / len(setups)
    total = statistics.median(cal_s) + statistics.median(pred_s)
    cells = [
        name,
        str(hosts),
        str(len(jobs)),
        str(len(setups)),
        f"{statistics.median(build_s):.2f}",
        f"{statistics.median(cal_s):.2f}",
        f"{statistics.median(pred_s):.2f}",
        f"{min(pred_s):.2f}",
        f"{per:.2f}",
        "yes" if total < TARGET_S else "no",
    ]
    return cells, pred


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.sim.predict", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("64", "2048"))
    ap.add_argument("--warmup", type=int, default=Steady().warmup)
    ap.add_argument("--measure", type=int, default=Steady().measure)
    args = ap.parse_args(argv)
    steady = Steady(args.warmup, args.measure)
    print(f"ibqos {ibqos.__version__}; {machine()}")
    print(f"steady state: warm-up {steady.warmup} iterations, at least {steady.measure} measured")
    print()
    columns = [
        "mix",
        "hosts",
        "jobs",
        "candidates",
        "plan build s",
        "calibrate s",
        "predict s (median)",
        "min s",
        "s per candidate",
        f"calibrate + predict under {TARGET_S:g} s",
    ]
    print("\n".join(head(columns)))
    shown = []
    if args.only in (None, "64"):
        net = xgft_network(parse_xgft(XGFT_64))
        cells, pred = bench(f"`{XGFT_64}`", net, jobs_64(), steady, args.rounds)
        print(row(cells), flush=True)
        shown.append(pred)
    if args.only in (None, "2048"):
        net = xgft_network(parse_xgft(XGFT_2048))
        cells, pred = bench(f"`{XGFT_2048}`", net, jobs_2048(net), steady, args.rounds)
        print(row(cells), flush=True)
        shown.append(pred)
    for pred in shown:
        print()
        print(render_prediction(pred), end="")
        print("shortlist of 3:", ", ".join(pred.shortlist(3, keep="law")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
