"""How long ``ibqos`` takes to start: three commands' ``--help`` beside Python importing
click and PyYAML, the least any click command with a YAML config can import.

Usage: python -m bench.cli.startup [--rounds 30] [--target 4]

``ibqos job-sl`` runs in Slurm's Prolog for every job (docs/slurm.md), ``ibqos status`` in
health checks and ``ibqos check-config`` before every start; their ``--help`` is the start
of the command without its work: the interpreter, ibqos's command line, and the modules
the command imports to declare its options.  Each round runs the baseline and the three
commands once each, as processes one after the other, in an order that turns one step
per round (no command always runs first after another's caches); a first round warms
the caches and is not counted.  A time is the wall-clock time from the start of the
process to its end.

Prints one Markdown table: per command the median, fastest and slowest time, and the
median over the baseline's (the target: at most ``--target`` times); then the ibqos
version, the date, the machine and the rounds.  Run it from the top of the checkout with
the environment's Python (``.venv/bin/python -m bench.cli.startup``); the ``ibqos``
command is the one beside that Python.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import ibqos
from bench import report

BASELINE = "python -c 'import click, yaml'"
COMMANDS = ("job-sl", "status", "check-config")


def argvs(ibqos_exe: Path) -> dict[str, list[str]]:
    """What is timed, by the name the table gives it."""
    runs = {BASELINE: [sys.executable, "-c", "import click, yaml"]}
    for command in COMMANDS:
        runs[f"ibqos {command} --help"] = [str(ibqos_exe), command, "--help"]
    return runs


def time_once(argv: Sequence[str]) -> float:
    """Seconds from the start of *argv*'s process to its end (it must exit 0)."""
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()}")
    return elapsed


def measure(runs: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    """*rounds* times of each run, interleaved (after one round not counted)."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):
        turn = r % len(names)
        for name in names[turn:] + names[:turn]:
            elapsed = time_once(runs[name])
            if r:  # round 0 warms the caches
                times[name].append(elapsed)
    return times


def table(times: dict[str, list[float]], target: float) -> str:
    """The Markdown table of *times* (the first entry is the baseline)."""
    base = statistics.median(times[BASELINE])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        ratio = median / base
        ok = "-" if name == BASELINE else ("yes" if ratio <= target else "no")
        ms = (f"{v * 1e3:.0f}" for v in (median, min(values), max(values)))
        rows.append([f"`{name}`", *ms, f"{ratio:.2f}x", ok])
    columns = ["command", "median ms", "fastest ms", "slowest ms", "median / baseline"]
    return "\n".join(report.table([*columns, "within target"], rows, "lrrrrl", spaced=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds counted (default 30)")
    parser.add_argument(
        "--target", type=float, default=4.0, help="most times the baseline (default 4)"
    )
    args = parser.parse_args()
    exe = Path(sys.executable).parent / "ibqos"
    if not exe.is_file():
        raise SystemExit(f"{exe}: no ibqos beside this Python: run the environment's Python")
    times = measure(argvs(exe), args.rounds)
    print(table(times, args.target))
    print()
    print(
        f"ibqos {ibqos.__version__}, {dt.date.today().isoformat()};"
        f" {os.cpu_count()} CPUs, Python {platform.python_version()};"
        f" {args.rounds} rounds, interleaved, after one not counted"
    )


if __name__ == "__main__":
    main()
