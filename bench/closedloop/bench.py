"""The closed loop, measured: does the adaptive agent keep the setup the jobs run best under?

Usage: python -m bench.closedloop.bench [--mix NAME ...] [--window S] [--svg]
[--json FILE] [--from-json FILE]

Each mix runs on a lab with fluid contention (XGFT ``2;8,4;1,2``: 4 leaves of 8 hosts, 2
spines, 4x EDR), so the jobs are slowed by the tables OpenSM really programmed, under four
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ibqos
from bench import ROOT
from bench.closedloop import report
from bench.closedloop import run as cr
from bench.report import say
from ibqos.jobs.hosts import expand_hosts
from ibqos.lab import manage
from ibqos.lab.agentrun import write_jobs

XGFT = "2;8,4;1,2"
#: settled window, seconds of lab time
WINDOW_S = 12.0
#: most seconds tuning may take to settle before the run gives up waiting
SETTLE_LIMIT_S = 90.0
#: seconds every job of the mix runs before a policy starts
WARM_S = 2.0
MAX_RELOADS = 12  # tuning.max_reloads_per_hour (its default), said in the table


def _job(
    jid: str,
    name: str,
    nodes: str,
    pattern: str,
    rate: float,
    duty: float,
    period: float,
    **extra: Any,
) -> dict[str, Any]:
    job = {
        "id": jid,
        "name": name,
        "nodes": nodes,
        "pattern": pattern,
        "rate_bytes_per_s": rate,
        "duty": duty,
        "period_s": period,
    }
    return job | extra


@dataclass(frozen=True)
class Mix:
    """A job mix of the benchmark: its jobs, lanes the agent may use, and what it shows."""

    name: str
    note: str
    jobs: tuple[dict[str, Any], ...]
    lanes: Mapping[str, Any]


MIXES = (
    Mix(
        "two",
        "heavy all-to-all + moderate all-to-all, interleaved on leaves 1-2",
        (
            _job("H", "ft", "cn[0001-0004,0009-0012]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job("M", "cg", "cn[0005-0006,0013-0014]", "all-to-all", 1.0e10, 0.4, 0.05),
        ),
        {},
    ),
    Mix(
        "three",
        "heavy all-to-all, moderate halo, light ring; interleaved over 4 leaves",
        (
            _job(
                "H",
                "ft",
                "cn[0001-0002,0009-0010,0017-0018,0025-0026]",
                "all-to-all",
                1.0e10,
                0.8,
                0.1,
            ),
            _job(
                "M",
                "lammps",
                "cn[0003,0011,0019,0027]",
                "halo",
                1.0e10,
                0.5,
                0.05,
                halo_dims=[2, 2],
            ),
            _job("L", "wrf", "cn[0004,0012,0020,0028]", "ring", 4.0e9, 0.3, 0.05),
        ),
        {},
    ),
    Mix(
        "four",
        "heavy all-to-all, moderate halo, two light; contiguous placement",
        (
            _job("H", "ft", "cn[0001-0012]", "all-to-all", 8.0e9, 0.8, 0.1),
            _job("M", "lammps", "cn[0013-0020]", "halo", 1.0e10, 0.5, 0.05, halo_dims=[2, 4]),
            _job("L1", "wrf", "cn[0021-0026]", "ring", 5.0e9, 0.3, 0.05),
            _job("L2", "cp2k", "cn[0027-0032]", "all-to-all", 2.0e9, 0.4, 0.1),
        ),
        {},
    ),
    Mix(
        "six-on-3",
        "2 heavy, 2 moderate, 2 light on 3 data VLs (lanes.data_vls 3); interleaved",
        (
            _job("H1", "ft", "cn[0001-0002,0009-0010]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job("H2", "fft", "cn[0017-0018,0025-0026]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job(
                "M1",
                "lammps",
                "cn[0003,0011,0019,0027]",
                "halo",
                8.0e9,
                0.5,
                0.05,
                halo_dims=[2, 2],
            ),
            _job("M2", "namd", "cn[0004-0005,0012-0013]", "all-to-all", 8.0e9, 0.4, 0.1),
            _job("L1", "wrf", "cn[0006,0014,0020,0028]", "ring", 3.0e9, 0.3, 0.05),
            _job("L2", "cp2k", "cn[0007,0015,0021,0029]", "ring", 2.0e9, 0.3, 0.1),
        ),
        {"data_vls": 3, "vlarb_low_cap": 3},
    ),
)

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


def run_mix(mix: Mix, root: Path, window_s: float) -> dict[str, Any]:
    """Alone rates, then the four policies; their measurements as plain data."""
    out: dict[str, Any] = {"mix": mix.name, "note": mix.note, "nodes": nodes(mix)}
    out["lanes"] = dict(mix.lanes)
    traces: dict[str, Any] = {}
    duration: float | None = None
    for k, name in enumerate(("adaptive", "one-vl", "equal", "ibqos-fixed")):
        lab_name = f"cl-{mix.name}-{k}"
        t = time.monotonic()
        lab = cr.lab_up(lab_name, root, XGFT, mix.jobs)
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.closedloop.bench", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--mix", action="append", choices=[m.name for m in MIXES])
    ap.add_argument("--window", type=float, default=WINDOW_S, help="settled window, seconds")
    ap.add_argument("--svg", action="store_true", help="write docs/img/closedloop.svg")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--from-json", type=Path, help="render saved results, run nothing")
    args = ap.parse_args(argv)
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
    else:
        mixes = [m for m in MIXES if not args.mix or m.name in args.mix]
        t0 = time.monotonic()
        load0 = os.getloadavg()
        results = []
        with tempfile.TemporaryDirectory(prefix="ibqos-closedloop.") as tmp:
            for mix in mixes:
                results.append(run_mix(mix, Path(tmp) / "labs", args.window))
        doc = {
            "version": version(),
            "xgft": XGFT,
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
