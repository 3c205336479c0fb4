"""The closed loop, measured: does the adaptive agent keep the setup the jobs run best under?

Usage: python -m bench.closedloop.bench [--mix NAME ...] [--window S] [--svg]
[--json FILE] [--from-json FILE]
       python -m bench.closedloop.bench --jobs FILE [--xgft SPEC | --topology FILE] [...]

Each mix runs on a lab with fluid contention, so the jobs are slowed by the tables OpenSM
really programmed.  The named mixes (:mod:`bench.closedloop.mixes`: ``two``, ``three``,
``four``, ``six-on-3`` and ``apps``, four real applications' matrices) run on XGFT
``2;8,4;1,2`` (4 leaves of 8 hosts, 2 spines, 4x EDR) unless ``--xgft`` or ``--topology``
(an ibnetdiscover file) gives another fabric with their hosts.  ``--jobs FILE`` runs an
admin's own job file instead (every job with its traffic keys: pattern, rate, duty,
period), on the fabric given, to try a mix before enforcing.  Each mix runs under four
policies, each on a fresh lab (OpenSM's defaults in force when it starts):

- ``one-vl``: no agent: OpenSM's default QoS, every job on SL 0, one lane;
- ``equal``: the agent, tuning off, ``lanes.weight_law: equal`` (a lane per job group,
  equal weights);
- ``ibqos-fixed``: the agent, tuning off: the favour-light law;
- ``adaptive``: the agent, tuning on, with short sweeps and trials (``tuning.settle_s`` 2,
  ``trial_sweeps`` 3, ``drift`` 0.3).

The agents share ``collect.interval_s`` 3, ``classify.tau_s`` 6, ``lanes.min_hold_s`` 4,
``lanes.min_interval_s`` 0 and an OpenSM reload budget of 20 a minute, so classes settle
and trials run in seconds.  (The lab writes its counters tick by tick, and a tick waits
for its read-back of OpenSM's tables: sweeps much shorter than 3 s see the jobs' rates
tens of per cent off their progress.)  The adaptive run goes first and lasts until tuning
settled plus ``--window`` seconds (lab time); the other policies run as long, so the
whole-run figures cover the same span.  Each job's iterations per second alone come from
the same lab, one job at a time, before the runs (its slowdown is measured against them,
not against its declared period: a job's own flows can contend on the uplinks).

Per run: the **total slowdown** ``S = sum_j nodes_j * alone_j / rate_j / sum_j nodes_j``
(1.0 = no contention) over the last ``--window`` seconds ("settled") and over the whole
run from the agent's start ("whole run", the trials included), and the OpenSM reloads the
agent caused (``ibqos_opensm_reloads_total``; tuning's own, ``ibqos_tuning_reloads_total``,
against ``tuning.max_reloads_per_hour``; every run lasts well under an hour).  Prints a
Markdown table and the targets per mix; ``--svg`` writes ``docs/img/closedloop.svg``,
``--json`` the raw results, ``--from-json`` renders saved results again.
Ends only the processes it started (labs by their recorded pids, agents by pid).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ibqos
from bench import ROOT
from bench.closedloop import report
from bench.closedloop import run as cr
from bench.closedloop.mixes import ALL_MIXES, XGFT, Mix, fabric, own_mix
from bench.report import say
from ibqos.errors import IbqosError
from ibqos.fabric.topology import Topology
from ibqos.jobs.hosts import expand_hosts
from ibqos.lab import manage
from ibqos.lab.agentrun import write_jobs

#: settled window, seconds of lab time
WINDOW_S = 12.0
#: most seconds tuning may take to settle before the run gives up waiting
SETTLE_LIMIT_S = 90.0
#: seconds every job of the mix runs before a policy starts
WARM_S = 2.0
MAX_RELOADS = 12  # tuning.max_reloads_per_hour (its default), said in the table


POLICIES = ("one-vl", "equal", "ibqos-fixed", "adaptive")


def policy(name: str, mix: Mix) -> cr.Policy:
    """The agent's config for policy *name* on *mix* (module docstring)."""
    if name == "one-vl":
        return cr.Policy(name, None)
    lanes = {"min_hold_s": 4.0, "min_interval_s": 0.0, **mix.lanes}
    if name == "equal":
        lanes["weight_law"] = "equal"
    tuning: dict[str, Any] = {"enabled": name == "adaptive"}
    if name == "adaptive":
        tuning |= {
            "settle_s": 2.0,
            "trial_sweeps": 3,
            "drift": 0.3,
            "max_reloads_per_hour": MAX_RELOADS,
        }
    sections = {
        "collect": {"interval_s": 3.0},
        "classify": {"tau_s": 6.0},
        "lanes": lanes,
        "tuning": tuning,
        # trials every few seconds: more than the 2 reloads a minute a real fabric allows
        "opensm": {"reload_budget": {"burst": 6, "per_minute": 20.0}},
    }
    return cr.Policy(name, sections)


def version() -> str:
    """ibqos's version, +dev and the commit when run from a checkout."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    commit = out.stdout.strip()
    return f"{ibqos.__version__}+dev ({commit})" if commit else ibqos.__version__


def nodes(mix: Mix) -> dict[str, int]:
    return {str(j["id"]): len(expand_hosts(j["nodes"], "bench")) for j in mix.jobs}


def run_mix(mix: Mix, root: Path, window_s: float, topo: Topology) -> dict[str, Any]:
    """Alone rates, then the four policies on fabric *topo*; their measurements as plain
    data."""
    out: dict[str, Any] = {"mix": mix.name, "note": mix.note, "nodes": nodes(mix)}
    out["lanes"] = dict(mix.lanes)
    traces: dict[str, Any] = {}
    duration: float | None = None
    for k, name in enumerate(("adaptive", "one-vl", "equal", "ibqos-fixed")):
        lab_name = f"cl-{mix.name}-{k}"
        t = time.monotonic()
        lab = cr.lab_up(lab_name, root, topo, mix.jobs)
        try:
            if k == 0:
                out["alone"] = cr.alone_rates(lab, mix.jobs)
                say(f"{mix.name}: alone {_fmt(out['alone'])} ({time.monotonic() - t:.0f} s)")
            write_jobs(lab.paths.jobs, mix.jobs)
            cr.wait_running(lab, [str(j["id"]) for j in mix.jobs], WARM_S)
            pol = policy(name, mix)
            work = root / f"{lab_name}.agent"
            if name == "adaptive":
                trace = cr.run_policy(
                    lab, pol, work, run_s=0.0, until_settled_s=SETTLE_LIMIT_S, after_s=window_s
                )
                duration = trace.points[-1].model_s - trace.start_model_s
            else:
                assert duration is not None
                trace = cr.run_policy(lab, pol, work, run_s=duration)
        finally:
            manage.down(lab_name, root=root)
        traces[name] = report.summarize(trace, out["alone"], out["nodes"], window_s)
        say(
            f"{mix.name}: {name}: settled {traces[name]['settled']:.3f},"
            f" whole {traces[name]['whole']:.3f} ({time.monotonic() - t:.0f} s)"
        )
    out["runs"] = traces
    return out


def _fmt(rates: Mapping[str, float]) -> str:
    return ", ".join(f"{j} {r:.1f}/s" for j, r in rates.items())


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, checked (usage errors exit 2)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.closedloop.bench", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--mix", action="append", choices=[m.name for m in ALL_MIXES])
    ap.add_argument(
        "--jobs",
        type=Path,
        help="run this job file (traffic keys required) instead of the named mixes",
    )
    ap.add_argument("--xgft", help=f"the lab's fabric, an XGFT spec (default {XGFT})")
    ap.add_argument("--topology", type=Path, help="the lab's fabric, an ibnetdiscover file")
    ap.add_argument("--window", type=float, default=WINDOW_S, help="settled window, seconds")
    ap.add_argument("--svg", action="store_true", help="write docs/img/closedloop.svg")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--from-json", type=Path, help="render saved results, run nothing")
    args = ap.parse_args(argv)
    if args.jobs is not None and args.mix:
        ap.error("--jobs: runs the file's mix; leave out --mix")
    if args.xgft is not None and args.topology is not None:
        ap.error("--xgft SPEC or --topology FILE, not both")
    if args.from_json and (args.jobs or args.xgft or args.topology):
        ap.error("--from-json: renders saved results; it takes no --jobs, --xgft, --topology")
    if not args.window > 0:
        ap.error(f"--window {args.window}: expected more than 0 seconds")
    return args


def plan(args: argparse.Namespace) -> tuple[list[Mix], Topology, str]:
    """The mixes to run, the fabric and its label, as *args* ask; every mix's hosts
    checked against the fabric.

    Raises:
        IbqosError: a fabric or job file that cannot be read, or hosts not on the fabric.
    """
    topo, label = fabric(args.xgft, args.topology)
    if args.jobs is not None:
        return [own_mix(args.jobs, topo)], topo, label
    mixes = [m for m in ALL_MIXES if not args.mix or m.name in args.mix]
    known = {ca.hostname for ca in topo.cas()}
    for mix in mixes:
        missing = sorted(
            set().union(*(expand_hosts(j["nodes"], "bench") for j in mix.jobs)) - known
        )
        if missing:
            raise IbqosError(f"mix {mix.name}: hosts not on {label}: {', '.join(missing[:5])}")
    return mixes, topo, label


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
    else:
        try:
            mixes, topo, label = plan(args)
        except IbqosError as err:
            say(f"error: {err}")
            return 2
        t0 = time.monotonic()
        load0 = os.getloadavg()
        results = []
        with tempfile.TemporaryDirectory(prefix="ibqos-closedloop.") as tmp:
            for mix in mixes:
                results.append(run_mix(mix, Path(tmp) / "labs", args.window, topo))
        doc = {
            "version": version(),
            "fabric": label,
            "window_s": args.window,
            "max_reloads_per_hour": MAX_RELOADS,
            "wall_s": time.monotonic() - t0,
            "load": [load0, os.getloadavg()],
            "machine": report.machine(),
            "mixes": results,
        }
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(report.markdown(doc))
    if args.svg:
        path = ROOT / "docs" / "img" / "closedloop.svg"
        path.write_text(report.svg(doc))
        say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
