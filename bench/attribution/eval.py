"""Attribution against the lab's ground truth: the routes fit, the subtree split and the
naive equal split, on jobs that declare no pattern.

Usage: python -m bench.attribution.eval [--only NAME,...] [--interval S]

Each mix (:mod:`bench.attribution.labs`) is a lab (``ibqos lab``: ibsim, OpenSM, the
traffic model) whose jobs share leaf switches and spines, on 2- and 3-level trees, slimmed
(fewer uplinks than hosts per leaf) and full.  The traffic model moves the jobs' bytes by
their patterns over OpenSM's routes and writes the counters into ibsim; they are read
back through PMA MADs (the perfquery backend) in two sweeps around one model tick.  The
jobs' patterns are then taken away, as a scheduler gives jobs, and each method estimates
every job's bytes/s leaving its level-l subtrees, l >= 1:

- ``routes``: the fit through OpenSM's forwarding tables (``opensm-lfts.dump``), gravity
  prior (:mod:`ibqos.attribute.tomography`);
- ``subtree``: each subtree's uplink total split by the gravity prior;
- ``equal``: each subtree's uplink total split equally among its jobs;
- ``routes+pattern`` and ``subtree+pattern``: the same two with the jobs' declared
  patterns as the prior.

Prints the mean relative error per job and level of each method, per mix, as a Markdown
table (docs/plan.md holds one run), with the fit's residual and measured share.

With ``--phased``, each mix runs again with jobs that communicate half the time in
periods of 1.7 to 6.1 s (``PERIODS``), so that what they send moves from sweep to sweep,
and ``--sweeps`` sweeps one model tick apart are attributed in turn by one attributor (as
the agent does): ``routes`` then learns each job's share of the links the prior splits
from how the counters move (:mod:`ibqos.attribute.shares`).  The error is that of the
last sweeps against the traffic of their own tick.  Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

import ibqos
from bench.attribution.labs import LAST, METHODS, MIXES, PERIODS, Mix, run_mix, run_phased
from bench.machine import machine
from bench.report import say, table


def error_table(rows: list[tuple[Mix, dict[str, float | dict[int, float]]]]) -> str:
    """Each mix's mean relative error per method and the routes fit's residual and
    measured share, then the methods' means over the mixes."""
    cells: list[list[str | None]] = []
    for mix, res in rows:
        resid = res["residual"]
        assert isinstance(resid, dict)
        worst = max(resid.values(), default=0.0)
        fit = f"{worst:.2%} / {res['measured']:.2f}"
        errors = [f"{res[m]:.1%}" for m in METHODS]
        cells.append([f"{mix.name} (`{mix.xgft}`)", mix.tree, *errors, fit])
    means = [
        f"**{np.mean([float(res[m]) for _, res in rows]):.1%}**"  # type: ignore[arg-type]
        for m in METHODS
    ]
    cells.append(["mean", None, *means, None])
    columns = ["mix", "tree", *METHODS, "routes: residual / measured"]
    return "\n".join(table(columns, cells, spaced=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.attribution.eval", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--only", default="", help="comma-separated mix names")
    parser.add_argument("--interval", type=float, default=1.0, help="model tick, seconds")
    parser.add_argument("--phased", action="store_true", help="also run the phased mixes")
    parser.add_argument("--sweeps", type=int, default=12, help="sweeps of a phased run")
    args = parser.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    mixes = [m for m in MIXES if not only or m.name in only]
    if only - {m.name for m in MIXES}:
        parser.error(f"unknown mix: {sorted(only - {m.name for m in MIXES})[0]}")
    root = Path(tempfile.mkdtemp(prefix="ibqos-evalattr-"))
    rows = []
    moving = []
    try:
        for mix in mixes:
            say(f"{mix.name}: {mix.xgft}")
            rows.append((mix, run_mix(mix, root, args.interval)))
            if args.phased:
                say(f"{mix.name}: {mix.xgft}, phased, {args.sweeps} sweeps")
                moving.append((mix, run_phased(mix, root, args.sweeps)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"ibqos {ibqos.__version__}, {machine()}; mean relative error per job and level (l >= 1)\n"
    )
    print(error_table(rows))
    if moving:
        print(f"\nPhased jobs (duty 0.5, periods {PERIODS} s), {args.sweeps} sweeps:\n")
        print(phased_table(moving, args.sweeps))
    return 0


def phased_table(rows: list[tuple[Mix, dict[str, float]]], sweeps: int) -> str:
    """Each phased mix's error of the routes fit on its first sweep and on its last, and of
    the subtree split on its last, then their means over the mixes."""
    keys = ("routes first", "routes", "subtree")
    cells: list[list[str | None]] = [
        [f"{mix.name} (`{mix.xgft}`)", mix.tree, *(f"{res[k]:.1%}" for k in keys)]
        for mix, res in rows
    ]
    means = [np.mean([r[k] for _, r in rows]) for k in keys]
    cells.append(["mean", None, f"{means[0]:.1%}", f"**{means[1]:.1%}**", f"{means[2]:.1%}"])
    columns = [
        "mix",
        "tree",
        "routes, first sweep",
        f"routes, last {LAST} of {sweeps}",
        f"subtree, last {LAST}",
    ]
    return "\n".join(table(columns, cells, spaced=True))


if __name__ == "__main__":
    sys.exit(main())
