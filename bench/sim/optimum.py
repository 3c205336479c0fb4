"""Benchmark the exhaustive optimum (``--policy optimal``) on 4-job mixes of 64 hosts.

Usage: python -m bench.sim.optimum [--only TEXT] [--iterations N] [--workers W]
                                   [--no-before] [--limit-s S]

Mixes: the ``4 jobs`` shape of :mod:`bench.sim.mixes` (heavy all-to-all on 24 hosts,
two moderate jobs on 16 and 12, a light one on 8; 8 data VLs) on both 64-host trees and
both placements, first seed; ``--only`` keeps the mixes whose name contains TEXT.

Per mix, three ways to the same answer, each timed once in this process:

- **before**: every setup of the search (the grid, then the other policies' setups) run
  to its end in one process, the least S kept (:meth:`ibqos.sim.evaluate.RunSettings.
  best_of`): what ``optimal`` did before the symmetry, the bound and the processes;
- **1 process**: :func:`ibqos.sim.policies.optimum` with one worker (symmetry and bound);
- **W processes**: the same with ``--workers`` processes.

Printed as Markdown: wall seconds, the ratio to *before*, setups run to the end and cut by
the bound, the S found and whether the setup is the one *before* found (the same S within
1e-9, since equal setups may differ in name).  ``--limit-s`` adds a run with that time
limit, whose answer is a bound.  docs/simulate-benchmark.md holds one run.
"""

from __future__ import annotations

import argparse
import sys
import time

import ibqos
from bench.machine import code_hash, machine
from bench.report import say, table
from bench.sim.mixes import SHAPES_64, TREES, mixes, network
from ibqos.sim import policies
from ibqos.sim.evaluate import RunSettings
from ibqos.sim.senders import auto_buffers
from ibqos.sim.workload import prepare

SHAPE = "4 jobs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim.optimum", description=__doc__)
    ap.add_argument("--only", default="", help="mixes whose name contains this")
    ap.add_argument("--iterations", type=int, default=10, help="N (default 10)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--no-before", dest="before", action="store_false")
    ap.add_argument("--limit-s", type=float, default=None, help="also a limited run")
    args = ap.parse_args(argv)
    chosen = [m for m in mixes(TREES, {SHAPE: SHAPES_64[SHAPE]}, 1, 1e-3) if args.only in m.name]
    if not chosen:
        print(f"no mix matches {args.only!r}", file=sys.stderr)
        return 2
    rows: list[list[str]] = []
    for mix in chosen:
        net = network(mix.xgft)
        jobs = prepare(net, list(mix.jobs))
        fluid = RunSettings(
            "fluid", net, jobs, args.iterations, "auto", auto_buffers(jobs, "auto", None)
        )
        ref: float | None = None
        ref_s: float | None = None
        if args.before:
            t0 = time.monotonic()
            t_alone = fluid.alone(policies.one_vl(jobs, mix.lanes))
            tried = policies.grid(jobs, mix.lanes) + [
                policies.setup_of(p, fluid, mix.lanes)
                for p in ("one-vl", "equal", "bandwidth", policies.FIXED)
            ]
            best, _ = fluid.best_of(tried, t_alone)
            ref_s = time.monotonic() - t0
            ref = best.slowdown
            rows.append(
                [mix.name, "before", f"{ref_s:.0f}", "1.00", str(len(tried)), "0",
                 f"{ref:.4f}", "yes"]
            )  # fmt: skip
            say(f"{mix.name}: before {ref_s:.0f} s, S {ref:.4f}")
        runs: list[tuple[str, int, float | None]] = [
            ("1 process", 1, None),
            (f"{args.workers} processes", args.workers, None),
        ]
        if args.limit_s is not None:
            runs.append((f"{args.workers} processes, limit {args.limit_s:g} s", args.workers,
                         args.limit_s))  # fmt: skip
        for label, workers, limit in runs:
            t0 = time.monotonic()
            found = policies.optimum(fluid, mix.lanes, workers=workers, limit_s=limit)
            wall = time.monotonic() - t0
            s = found.outcome.slowdown
            same = (
                "-" if ref is None else ("yes" if abs(s - ref) <= 1e-9 else f"no ({s - ref:+.1e})")
            )
            if not found.complete:
                label += " (bound)"
            rows.append(
                [mix.name, label, f"{wall:.0f}",
                 "-" if ref_s is None else f"{ref_s / wall:.2f}",
                 str(found.run), str(found.cut), f"{s:.4f}", same]
            )  # fmt: skip
            say(f"{mix.name}: {label} {wall:.0f} s; {found.summary()}")
    code = code_hash(["sim/optimum.py", "sim/fluid.py", "sim/policies.py"])
    print(f"ibqos {ibqos.__version__}, code {code}; {machine()}; N = {args.iterations}\n")
    print(
        "\n".join(
            table(
                ["mix", "search", "wall s", "speed-up", "run", "cut", "S", "same as before"],
                rows,
                "llrrrrrl",
            )
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
