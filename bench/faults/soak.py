"""A long run of faults at once, on a lab with two OpenSMs and an agent beside each.

Usage: python -m bench.faults.soak [--minutes 10] [--keep DIR]

The lab is ``2;4,2;1,2`` with a master OpenSM (priority 10) and a standby on cn0008
(priority 5), each with its own files, log and pid file, and an agent in enforce mode beside
each (its own state directory, lock, socket and metrics), as on two SM hosts
(docs/deploy.md).  Over the run, at once:

- jobs start and end every :data:`CHURN_S` seconds (each start is an apply);
- the master's log is rotated every :data:`ROTATE_S` seconds, in turn renamed without
  telling OpenSM, renamed then SIGUSR1 (Debian's logrotate) and copied then truncated;
- another writer puts the master's original files back (a template without ibqos's blocks)
  every :data:`WRITER_EVERY_S` seconds, with no SIGHUP, over one window;
- a user holds :data:`FLOOD` connections to the master agent's socket, each an unfinished
  question, over another window, with the agent under ``prlimit --nofile``
  :data:`NOFILE`;
- the master OpenSM is stopped (by pid) at :data:`FAILOVER_AT` of the run: the standby
  takes over, and its agent too.

Every :data:`SAMPLE_S` seconds each running job's SL is asked of both agents; each SL
handed out is compared at once with the PathRecord SL the SA serves between the job's first
and last host.  At the end both agents must be alive, every SL handed out must have been
the SA's, and the reloads each agent sent must be within its reload budget (burst plus rate
times the run).  Prints one table; exits 1 when any of it fails.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import ibqos
from bench.machine import machine
from bench.report import head, row, say
from ibqos.agent.handoff import ask_sl
from ibqos.errors import HandoffError
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.hosts import expand_hosts
from ibqos.lab.agentrun import (
    AgentRun,
    Sections,
    agent_config,
    samples,
    scrape,
    steady_job,
    write_jobs,
)
from ibqos.lab.fabric import fabric_from_lab
from ibqos.lab.faults import SocketFlood, rotate_log
from ibqos.lab.lab import Lab
from ibqos.lab.opensm import FAST_FAILOVER, OpenSMFiles

XGFT = "2;4,2;1,2"
STANDBY_HOST = "cn0008"
#: seconds between two job changes
CHURN_S = 30.0
#: seconds between two rotations of the master's log
ROTATE_S = 60.0
ROTATIONS = ("rename", "signal", "copytruncate")
#: the outside writer's window (fractions of the run) and its period, seconds
WRITER = (0.15, 0.30)
WRITER_EVERY_S = 5.0
#: the flood's window (fractions of the run), its connections, and the agent's file limit
FLOOD_WINDOW = (0.40, 0.50)
FLOOD = 600
NOFILE = 512
#: when the master OpenSM is stopped (fraction of the run)
FAILOVER_AT = 0.60
#: seconds between two samples of job-sl against the SA
SAMPLE_S = 2.0
#: the agents' reload budget (opensm.reload_budget's defaults)
BURST, PER_MINUTE = 6.0, 2.0
#: a quiet period after another writer stops before ibqos writes again (opensm.outside_quiet_s)
OUTSIDE_QUIET_S = 30.0


STEADY = [
    steady_job("A", "cn[0001-0002]", 1.0e8),
    steady_job("B", "cn[0003,0007]", 2.0e9, "all-to-all"),
]
#: jobs that come and go, one at a time, in turn
CHURN = [
    steady_job("C", "cn[0004,0008]", 1.0e8),
    steady_job("D", "cn[0005-0006]", 3.0e9, "all-to-all"),
]


@dataclass
class Side:
    """One OpenSM and the agent beside it."""

    name: str
    files: OpenSMFiles
    host: str | None
    socket: Path
    agent: AgentRun
    answered: int = 0  # SLs handed out, sampled
    wrong: list[str] = field(default_factory=list)  # ... that the SA did not serve

    def metric(self, name: str) -> float | None:
        url = self.agent.metrics_url()
        if url is None:
            return None
        try:
            found = samples(scrape(url).decode())
        except OSError:
            return None
        return found.get((name, ()))


def _config(lab: Lab, work: Path, side: str, osm: OpenSMFiles) -> tuple[Path, Path]:
    """The agent's config beside *osm*: its own state, socket, metrics; returns (config,
    socket)."""
    sock = work / f"{side}.sock"
    sections: Sections = {
        "collect": {"interval_s": 1.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 2.0, "min_interval_s": 0.0},
        "agent": {"state_dir": str(work / f"{side}-state"), "job_poll_s": 0.2, "socket": str(sock)},
        "metrics": {"listen": "127.0.0.1:0"},
        "tuning": {"enabled": False},
        "opensm": {
            "conf": str(osm.conf),
            "policy_file": str(osm.policy),
            "log": str(osm.log),
            "pid_file": str(osm.pid),
            "outside_quiet_s": OUTSIDE_QUIET_S,
        },
        "fabric": {"lft_dump": str(osm.lfts_dump)},
    }
    return agent_config(lab.paths.config, work / f"{side}.yaml", sections), sock


class Soak:
    """The run: the lab, the two sides, the schedule, the samples."""

    def __init__(self, lab: Lab, work: Path, minutes: float) -> None:
        self.lab = lab
        self.work = work
        self.run_s = minutes * 60.0
        self.jobs = list(STEADY)
        self.lid = {
            fp.node_desc.split()[0]: fp.lid
            for fp in fabric_from_lab(lab).ports.values()
            if not fp.is_switch and fp.lid is not None
        }
        self.events: list[str] = []
        self.sides: list[Side] = []
        self.template: dict[Path, str] = {}
        self.writes = 0
        self.rotations = 0
        self.flood_busy = 0

    def start(self) -> None:
        lab = self.lab
        write_jobs(lab.paths.jobs, self.jobs)
        osm2 = lab.add_opensm(STANDBY_HOST, priority=5)
        master = lab.paths.opensm
        # the master's files as the site's config management keeps them: ibqos's blocks
        # are not in its template
        self.template = {p: p.read_text() for p in (master.conf, master.policy) if p.exists()}
        for name, osm, host in (("master", master, None), ("standby", osm2.files, STANDBY_HOST)):
            config, sock = _config(lab, self.work, name, osm)
            env = {} if host is None else {"SIM_HOST": lab.env(host)["SIM_HOST"]}
            prefix = ("prlimit", f"--nofile={NOFILE}", "--")
            agent = AgentRun.on(lab, config, self.work / f"{name}.log", env=env, prefix=prefix)
            self.sides.append(Side(name, osm, host, sock, agent.start()))

    def stop(self) -> list[int]:
        return [side.agent.stop() for side in self.sides]

    def run(self) -> None:
        t0 = last = time.monotonic()
        next_churn, next_rotate, next_write, next_sample = CHURN_S, ROTATE_S, 0.0, SAMPLE_S
        failed_over = False
        flood: SocketFlood | None = None
        while (t := time.monotonic() - t0) < self.run_s:
            for side in self.sides:
                code = side.agent.poll()
                if code is not None:
                    raise SystemExit(f"soak: the {side.name} agent exited ({code})")
            now = time.monotonic()
            self.lab.reload_jobs()
            self.lab.tick(now - last)
            last = now
            if t >= next_churn:
                next_churn += CHURN_S
                self._churn(t)
            if t >= next_rotate:
                next_rotate += ROTATE_S
                self._rotate(t, failed_over)
            if WRITER[0] * self.run_s <= t < WRITER[1] * self.run_s and t >= next_write:
                next_write = t + WRITER_EVERY_S
                for path, text in self.template.items():
                    path.write_text(text)
                self.writes += 1
            in_flood = FLOOD_WINDOW[0] * self.run_s <= t < FLOOD_WINDOW[1] * self.run_s
            if in_flood and flood is None:
                flood = SocketFlood(self.sides[0].socket, FLOOD).__enter__()
                self.events.append(f"{t:5.0f} s: flood of {FLOOD} connections begins")
            elif not in_flood and flood is not None:
                flood.__exit__(None, None, None)
                self.flood_busy = flood.busy
                self.events.append(f"{t:5.0f} s: flood ends ({flood.busy} refused)")
                flood = None
            if not failed_over and t >= FAILOVER_AT * self.run_s:
                failed_over = True
                pid = self.lab.stop_opensm()
                self.events.append(f"{t:5.0f} s: master OpenSM (pid {pid}) stopped")
            if t >= next_sample:
                next_sample += SAMPLE_S
                self._sample(t)
            time.sleep(0.1)
        if flood is not None:
            flood.__exit__(None, None, None)
            self.flood_busy = flood.busy

    def _churn(self, t: float) -> None:
        k = int(t // CHURN_S)
        extra = CHURN[(k // 2) % len(CHURN)]
        starting = k % 2 == 1
        self.jobs = [*STEADY, extra] if starting else list(STEADY)
        write_jobs(self.lab.paths.jobs, self.jobs)
        self.events.append(f"{t:5.0f} s: job {extra['id']} {'starts' if starting else 'ends'}")

    def _rotate(self, t: float, failed_over: bool) -> None:
        side = self.sides[1] if failed_over else self.sides[0]
        how = ROTATIONS[self.rotations % len(ROTATIONS)]
        pid = int(side.files.pid.read_text().split()[0]) if side.files.pid.exists() else None
        rotate_log(side.files.log, how, pid)
        self.rotations += 1
        self.events.append(f"{t:5.0f} s: {side.name}'s OpenSM log rotated ({how})")

    def _sample(self, t: float) -> None:
        for spec in self.jobs:
            hosts = list(expand_hosts(spec["nodes"], "job file"))
            for side in self.sides:
                try:
                    sl = ask_sl(spec["id"], 0.5, socket_path=side.socket)
                except HandoffError:
                    continue  # a miss: the job's tasks start on the default SL
                served = self._sa_sl(hosts[0], hosts[-1])
                side.answered += 1
                if served != sl:
                    side.wrong.append(f"{t:.0f} s: job {spec['id']}: SL {sl}, SA {served}")

    def _sa_sl(self, src: str, dst: str) -> int | None:
        argv = ["saquery", "PR", "--slid", str(self.lid[src]), "--dlid", str(self.lid[dst])]
        out = self.lab.run(argv, timeout=10).stdout
        m = re.search(r"^\s*sl\.+0x([0-9a-fA-F]+)", out, re.M)
        return None if m is None else int(m.group(1), 16)


def _sweeps(log: Path) -> int:
    """Heavy sweeps OpenSM logged, in its log and the rotated copies."""
    return sum(
        p.read_text(errors="replace").count("SUBNET UP")
        for p in [log, *sorted(log.parent.glob(log.name + ".*"))]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--keep", type=Path, help="keep the lab's and agents' files here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ibqos-soak-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        topo = build_xgft(parse_xgft(XGFT))
        options = {"sweep_interval": "0", "sm_priority": "10"} | FAST_FAILOVER
        lab = Lab.create("soak", topo, root=work / "labs", opensm_options=options)
        try:
            lab.start()
            soak = Soak(lab, work, args.minutes)
            soak.start()
            try:
                soak.run()
                alive = [side.agent.poll() is None for side in soak.sides]
                reloads = [side.metric("ibqos_opensm_reloads_total") or 0.0 for side in soak.sides]
                takeovers = soak.sides[1].metric("ibqos_opensm_takeovers_total") or 0.0
            finally:
                codes = soak.stop()
            sweeps = [_sweeps(side.files.log) for side in soak.sides]
        finally:
            lab.destroy()
    budget = BURST + PER_MINUTE * args.minutes
    return _report(soak, args.minutes, alive, codes, reloads, sweeps, takeovers, budget)


def _report(
    soak: Soak,
    minutes: float,
    alive: list[bool],
    codes: list[int],
    reloads: list[float],
    sweeps: list[int],
    takeovers: float,
    budget: float,
) -> int:
    say(f"ibqos {ibqos.__version__}: {minutes:g} minutes on {XGFT}, two OpenSMs; {machine()}")
    say(
        f"{len(soak.events)} events: {soak.rotations} log rotations, {soak.writes} outside"
        f" rewrites, a flood of {FLOOD} connections ({soak.flood_busy} refused), one failover"
    )
    columns = (
        "agent",
        "alive at the end",
        "exit status",
        "SLs handed out (sampled)",
        "not the SA's",
        "reloads sent",
        "budget",
        "OpenSM heavy sweeps",
    )
    for line in head(columns):
        say(line)
    for side, up, code, sent, n in zip(soak.sides, alive, codes, reloads, sweeps, strict=True):
        cells = (side.name, "yes" if up else "NO", code, side.answered, len(side.wrong))
        say(row([*(str(c) for c in cells), f"{sent:.0f}", f"{budget:.0f}", str(n)]))
    say(f"standby agent's takeovers: {takeovers:.0f}")
    ok = all(alive) and all(c == 0 for c in codes) and not any(s.wrong for s in soak.sides)
    ok = ok and all(r <= budget for r in reloads) and takeovers >= 1
    for side in soak.sides:
        for line in side.wrong[:10]:
            say(f"  {side.name}: {line}")
    say("all held" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
