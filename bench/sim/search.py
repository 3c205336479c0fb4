"""Benchmark the tuner's search: setups beyond the fixed candidates, within a time budget.

Usage: python -m bench.sim.search [--only 64|2048|generated] [--budget-64 S]
[--budget-2048 S] [--evaluations N] [--generated K] [--seed S] [--closed-loop]

What the agent's background thread runs before a round of tuning
(:func:`ibqos.sim.search.rank_pool`): the jobs calibrated to what they measured under
the plan in force, the fixed candidates of :func:`ibqos.plan.setups.candidates`
predicted in the steady state (the **baseline**: the best of them is what tuning had
without the search), then the search from them until its budget runs out
(:func:`ibqos.sim.search.search`).  The plan is ibqos's favour-light law after the jobs
ran on one VL (the ``ibqos-fixed`` policy's), and the agent's decision after the jobs
ran 4 iterations under it: its jobs estimated from those counters as the agent would,
their phases (duty, period) as their profiles would record them.  The search may make
``--evaluations`` predictions beyond the candidates (1,000: the time budget ends it
first).

- **64 hosts, 4 jobs**: ``2;16,4;1,4`` (4:1 at the leaves) with the mix of
  :func:`bench.sim.benchmixes.jobs_64` (every job on every leaf; periods of 40-100 us);
- **64 hosts, 3 jobs**: ``2;8,8;1,2`` (4:1), on every leaf of 8 a 32-node all-to-all at
  11 GB/s (duty 0.5) on 4 hosts, a 16-node random-pairs job at 8 GB/s (duty 0.35) and a
  16-node 4x4 halo at 4 GB/s (duty 0.2) on 2 each, 20 ms periods: a mix whose best
  weights are not monotonic in intensity;
- **2,048 nodes, 20 jobs**: the mix of :mod:`bench.sim.bench` (``3;16,16,8;1,8,8``);
- with ``--generated K``, K random mixes of 2 to 5 jobs on ``2;8,8;1,2``
  (:func:`generated`, drawn from ``--seed``), each with the 64-host budget.

Lanes: the simulator's (8 VLArb entries, as ibsim), SL 0 reserved.

With ``--closed-loop``, the three-job mix and every generated mix whose best candidate
is predicted above S 1.05 also run as ``ibqos simulate --policy ibqos`` runs them (its
default N, buffers and lanes, the jobs' phases known), once with the candidates alone
and once with the search (40 predictions a round), beside the fixed policies: their S,
trials counted.

Printed, per mix: the wall time from the start of the prediction (calibration
included) to the search's end, the predictions made (the candidates' included) and the
cache's hits, why it stopped, the baseline's best candidate and its score S (the
node-weighted mean slowdown the fluid model predicts), and the search's best and its S;
then the best setup found.  docs/simulate-benchmark.md holds one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

import ibqos
from bench.machine import machine
from bench.report import head, row
from bench.sim.benchmixes import XGFT_2048, compute_hosts, jobs_64, jobs_2048
from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import TuningConfig
from ibqos.fabric.model import Fabric
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.plan.decide import Decider
from ibqos.plan.planner import law_setup
from ibqos.plan.setups import candidates
from ibqos.sim.closedloop import (
    SEARCH_EVALUATIONS,
    closed_loop,
    default_iterations,
    default_sweep_s,
    fluid_predictor,
)
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.policies import DEFAULT_LANES, SweepTable, one_vl, setup_of
from ibqos.sim.predict import Steady
from ibqos.sim.qos import from_tables
from ibqos.sim.search import Budget, SearchResult, evaluator_for, search
from ibqos.sim.senders import auto_buffers, forget_mix
from ibqos.sim.workload import prepare

FIXED_POLICIES = ("one-vl", "equal", "bandwidth", "ibqos-fixed")
XGFT_64 = "2;16,4;1,4"
XGFT_3 = "2;8,8;1,2"
TARGET_64_S = 10.0
TARGET_2048_S = 120.0


def jobs_3(net: Network) -> list[Job]:
    """Three jobs interleaved on every leaf of 8 (module docstring)."""
    hosts = compute_hosts(net)

    def on(slots: Sequence[int]) -> tuple[str, ...]:
        return tuple(h for i, h in enumerate(hosts) if i % 8 in slots)

    return [
        Job("a2a", on((0, 1, 4, 5)), "all-to-all", 11e9, 0.5, 0.02),
        Job("pairs", on((2, 6)), "random-pairs", 8e9, 0.35, 0.02),
        Job("halo", on((3, 7)), "halo", 4e9, 0.2, 0.02, halo_dims=(4, 4)),
    ]


PATTERNS = ("all-to-all", "halo", "ring", "random-pairs")


def generated(net: Network, rng: np.random.Generator) -> list[Job]:
    """A random mix on *net*'s hosts: 2 to 5 jobs of 4 to 24 hosts, each pattern, rate
    (10 to 95 % of a link), duty (0.1 to 0.8) and period (2 to 50 ms) drawn; the hosts
    interleaved or contiguous, drawn per mix."""
    hosts = compute_hosts(net)
    link = float(net.capacity[net.router.port_index[net.hosts[hosts[0]]]])
    n = int(rng.integers(2, 6))
    order = list(rng.permutation(len(hosts))) if rng.random() < 0.5 else list(range(len(hosts)))
    jobs = []
    for k in range(n):
        size = int(rng.integers(1, 7)) * 4
        if len(order) < size:
            break
        nodes = tuple(sorted(hosts[i] for i in order[:size]))
        order = order[size:]
        pattern = str(rng.choice(PATTERNS))
        dims = (4, size // 4) if pattern == "halo" else None
        rate = round(float(rng.uniform(0.1, 0.95)) * link, -6)
        duty = round(float(rng.uniform(0.1, 0.8)), 2)
        period = round(float(rng.uniform(2.0, 50.0)), 1) * 1e-3
        jobs.append(Job(f"j{k + 1}", nodes, pattern, rate, duty, period, halo_dims=dims))
    return jobs


def bench(net: Network, jobs: list[Job], budget: Budget) -> SearchResult:
    """The search of *jobs* on *net* as the agent's thread runs it (module docstring)."""
    forget_mix()
    sim_jobs = prepare(net, jobs)
    lanes = DEFAULT_LANES
    fabric = Fabric(net.topo, source="simulated")
    sweep = SweepTable(net, fabric)
    decider = Decider(fabric, replace(lanes, min_hold_s=0.0, min_interval_s=0.0))
    arb = one_vl(sim_jobs, lanes)
    for k in range(2):  # the law from one VL's counters, then the counters under the law
        seen = simulate_fluid(net, sim_jobs, arb, 4, buffer_packets=0)
        decision = decider.decide(sweep(seen.link_bytes / max(seen.sim_time_s, 1e-12)), jobs, k)
        plan = decision.plan
        assert plan.tables is not None
        arb = from_tables(plan.tables, plan.job_sl, lanes.mtu)
    pool = candidates(law_setup(plan), TuningConfig().candidates, lanes.weight_ratio)
    started = time.perf_counter()  # the agent's thread starts here: it has the decision
    phases = {j.id: Phases(j.duty, j.period_s) for j in jobs}  # as profiles record them
    ev, _ = evaluator_for(net, jobs, decision, plan, phases=phases)
    assert ev is not None
    return search(ev, pool, budget, started_s=started)


#: a mix whose best candidate is predicted above this S is run in the closed loop
CONTENDS = 1.05
LOOP_COLUMNS = (*FIXED_POLICIES, "ibqos, candidates only", "ibqos, with the search")


def closed_loops(net: Network, jobs: list[Job]) -> list[float]:
    """S of *jobs* under each fixed policy, then in ``ibqos simulate --policy ibqos``'s
    closed loop without the search and with it (its defaults: N for 4 rounds, the fluid
    model's buffers by default, the jobs' phases known)."""
    forget_mix()
    sim_jobs = prepare(net, jobs)
    lanes, tuning = LaneConfig(), TuningConfig()
    sweep = default_sweep_s(sim_jobs)
    buffers = auto_buffers(sim_jobs, "auto", None)
    n = default_iterations(sim_jobs, sweep, tuning)
    runs = RunSettings("fluid", net, sim_jobs, n, "auto", buffers)
    t_alone = runs.alone(one_vl(sim_jobs, lanes))
    out = [runs.evaluate(setup_of(p, runs, lanes, None), t_alone).slowdown for p in FIXED_POLICIES]
    phases = {j.id: Phases(j.job.duty, j.job.period_s) for j in sim_jobs}
    steady = Steady(buffer_packets=buffers)
    for evaluations in (0, SEARCH_EVALUATIONS):
        predictor = fluid_predictor(net, jobs, steady, phases, evaluations)
        loop = closed_loop(runs, lanes, tuning, sweep, predictor)
        out.append(runs.evaluate(loop.final, t_alone, loop.run).slowdown)
    return out


def cells(name: str, hosts: int, jobs: int, target_s: float, got: SearchResult) -> list[str]:
    """The mix's row of the table."""
    base = min(got.starts, key=lambda e: e.score)
    return [
        name,
        f"{hosts:,}",
        str(jobs),
        f"{target_s:g}",
        f"{got.elapsed_s:.1f}",
        f"{got.evaluations} ({len(got.starts)} + {got.evaluations - len(got.starts)})",
        str(got.hits),
        got.stopped,
        f"{base.setup.name} {base.score:.3f}",
        f"{got.best.score:.3f}",
        f"{(base.score - got.best.score) / (base.score - 1.0):.0%}" if base.score > 1.0 else "-",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.sim.search", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--only", choices=("64", "2048", "generated"))
    ap.add_argument("--generated", type=int, default=0, help="seeded random 64-host mixes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--closed-loop", action="store_true", help="and each mix in the loop")
    ap.add_argument("--budget-64", type=float, default=TARGET_64_S)
    ap.add_argument("--budget-2048", type=float, default=TARGET_2048_S)
    ap.add_argument("--evaluations", type=int, default=1000)
    args = ap.parse_args(argv)
    print(f"ibqos {ibqos.__version__}; {machine()}")
    print()
    columns = [
        "mix",
        "hosts",
        "jobs",
        "budget s",
        "wall s",
        "predictions (candidates + search)",
        "cache hits",
        "stopped",
        "baseline: best candidate, S",
        "search: best S",
        "excess removed",
    ]
    print("\n".join(head(columns, "lllr")))
    shown = []
    looped: list[list[str]] = []
    runs: list[tuple[str, float]] = []
    if args.only in (None, "64"):
        runs += [(XGFT_64, args.budget_64), (XGFT_3, args.budget_64)]
    if args.only in (None, "2048"):
        runs.append((XGFT_2048, args.budget_2048))
    if args.only in (None, "generated"):
        runs += [(f"{XGFT_3}#{k}", args.budget_64) for k in range(args.generated)]
    rng = np.random.default_rng(args.seed)
    for xgft, budget_s in runs:
        name = f"`{xgft}`"
        net = xgft_network(parse_xgft(xgft.split("#")[0]))
        if xgft == XGFT_2048:
            jobs = jobs_2048(net)
        elif "#" in xgft:
            jobs = generated(net, rng)
        else:
            jobs = jobs_64(net) if xgft == XGFT_64 else jobs_3(net)
        got = bench(net, jobs, Budget(budget_s, args.evaluations))
        hosts = sum(len(j.nodes) for j in jobs)
        print(row(cells(name, hosts, len(jobs), budget_s, got)), flush=True)
        shown.append((name, got))
        contends = min(e.score for e in got.starts) > CONTENDS
        if args.closed_loop and xgft != XGFT_2048 and (xgft == XGFT_3 or contends):
            looped.append([name, str(len(jobs)), *(f"{v:.3f}" for v in closed_loops(net, jobs))])
    if looped:
        print("\nclosed loop (N for 4 rounds of tuning, trials counted), S per policy:\n")
        print("\n".join(head(["mix", "jobs", *LOOP_COLUMNS], "llr")))
        print("\n".join(row(r) for r in looped))
    for name, got in shown:
        best = got.best
        lanes = "; ".join(
            f"SLs {','.join(map(str, g))}: {t:g}"
            for g, t in zip(best.setup.groups, best.setup.targets, strict=True)
        )
        print(f"\n{name}: {got.describe()}\n  {best.setup.name}: packets per round {lanes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
