"""Benchmark one decision cycle (map, attribute, classify, plan) on synthetic fabrics.

Usage: python -m bench.plan.bench [--cases 1k/100,50k/5000] [--rounds N] [--cycles N]
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
import json
import logging
import os
import pstats
import statistics
import sys
from pathlib import Path

import numpy as np

from bench.machine import code_hash, machine
from bench.plan.inputs import (
    SEED,
    SHAPES,
    churned,
    hosts_of,
    rates_tables,
    routed_tables,
    workload,
)
from bench.plan.report import report, targets
from bench.plan.timing import Case, FabricTimes, run_round, time_fabric
from bench.report import say

CASES: tuple[tuple[str, int], ...] = (
    ("1k", 100),
    ("10k", 100),
    ("10k", 1000),
    ("50k", 100),
    ("50k", 1000),
    ("50k", 5000),
)
TABLES = 4  # rates tables per case, used in turn
#: the sources whose speed is measured (their hash is printed with the results)
CODE = (
    "plan/decide.py",
    "plan/report.py",
    "plan/planner.py",
    "plan/grouping.py",
    "attribute/jobmap.py",
    "attribute/attribution.py",
    "attribute/tomography.py",
    "classify/classifier.py",
    "classify/expected.py",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.plan.bench", description=__doc__.split("\n", 1)[0]
    )
    names = ",".join(f"{s}/{n}" for s, n in CASES)
    parser.add_argument("--cases", default=names, help=f"subset of {names}")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over every case")
    parser.add_argument("--cycles", type=int, default=8, help="steady and churn cycles per round")
    parser.add_argument("--json", type=Path, help="write every timing here")
    parser.add_argument("--profile", metavar="CASE", help="cProfile the steady cycles of CASE")
    parser.add_argument(
        "--routes",
        action="store_true",
        help="attribute through D-mod-K routes (the routes fit), on routed traffic",
    )
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
    routed = "; attribution through D-mod-K routes, routed traffic" if args.routes else ""
    print(f"machine: {machine()}; code {code_hash(CODE)}{frozen}{routed}", flush=True)
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
        fabric, times, lfts = time_fabric(size, args.rounds, args.routes)
        fabrics.append(times)
        say(
            f"fabric {size}: XGFT {times.shape}: {times.ports} ports,"
            f" model {statistics.median(times.model_s):.2f} s"
        )
        group = []
        for _, n_jobs in todo:
            rng = np.random.default_rng([SEED, times.ports, n_jobs])
            jobs = workload(hosts_of(fabric), n_jobs, rng)
            if lfts is None:
                tables = rates_tables(fabric, jobs, rng, TABLES)
            else:
                tables = routed_tables(fabric, lfts, jobs, rng, TABLES)
            churn = churned(jobs, rng, args.cycles)
            case = Case(size, n_jobs, times.ports, times.hosts, jobs, churn, tables)
            case.lfts = lfts
            group.append(case)
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
                say(
                    f"round {r + 1}/{args.rounds} {case.name}: first {case.first_s[-1]:.3f} s,"
                    f" steady {statistics.median(case.steady_s[steps:]):.3f} s,"
                    f" churn {statistics.median(case.churn_s[steps:]):.3f} s"
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
            "code": code_hash(CODE),
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
