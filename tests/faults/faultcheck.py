"""What every fault test asserts about ibqos beside a real OpenSM.

A fault test starts a lab (real OpenSM and ibsim), runs ``ibqos run`` against it in enforce
mode, waits for the plan to be in force, injects one fault, and then checks with
:class:`Guard`:

- OpenSM's files pass ``ibqos check-opensm`` and are the last good ones (nothing
  half-written, nothing new while OpenSM could not take it);
- no SL is handed out that the SA does not serve: every answer ``job-sl`` gives is the
  PathRecord SL between two of the job's hosts;
- OpenSM was signalled no more often than the reload budget allows (heavy sweeps counted
  in OpenSM's own log);
- the agent is alive, answers ``job-sl`` and serves ``/metrics``;
- the fault shows in a metric;
- and once the fault is cleared, the agent recovers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ibqos.agent.handoff import ask_sl
from ibqos.errors import HandoffError
from ibqos.jobs.hosts import expand_hosts
from ibqos.lab.agentrun import AgentRun, steady_job
from tests.support.agentrun import agent_config, drive, lids, path_sl, start_agent, state

#: a lab of 8 hosts on 4 leaves and 2 spines (``2;4,2;1,2``)
XGFT = "2;4,2;1,2"
#: OpenSM logs this at the end of every heavy sweep (only heavy ones: sweep_interval 0)
SWEEP_DONE = "SUBNET UP"


#: a job of the lab's traffic model
job = steady_job


class Guard:
    """One agent on one lab, and the checks every fault test makes.

    Args:
        lab: the lab (started).
        tmp_path: the test's directory (the agent's config, log, state and socket).
        extra: config sections merged into the agent's config.
    """

    def __init__(self, lab: Any, tmp_path: Path, **extra: Any) -> None:
        self.lab = lab
        self.tmp_path = tmp_path
        self.socket = tmp_path / "sl.sock"
        agent = {"socket": str(self.socket)} | extra.pop("agent", {})
        self.config = agent_config(lab, tmp_path, agent=agent, **extra)
        self.proc: AgentRun | None = None
        self.lid = lids(lab)
        self.good: dict[Path, str] = {}

    # -- the agent -------------------------------------------------------------------------

    def start(
        self, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
    ) -> AgentRun:
        self.proc = start_agent(self.lab, self.config, self.tmp_path, *args, env=env, prefix=prefix)
        return self.proc

    def stop(self) -> int:
        """SIGTERM, and its exit status (the agent is killed after 30 s)."""
        assert self.proc is not None
        return self.proc.stop()

    def log(self) -> str:
        return (self.tmp_path / "agent.log").read_text()

    def drive(self, until: Callable[[], bool], timeout: float) -> float:
        """Run the lab's traffic in real time until *until* holds (the agent must live)."""
        return drive(self.lab, until, timeout, self.proc)

    def settle(self, seconds: float) -> None:
        """Let the lab and the agent run for *seconds* (the agent must live)."""
        end = time.monotonic() + seconds
        self.drive(lambda: time.monotonic() >= end, seconds + 5)

    def in_force(self, *job_ids: str, timeout: float = 30) -> dict[str, int]:
        """Wait until OpenSM serves every job's SL; return job -> SL."""

        def served() -> bool:
            return all(self.served(j) for j in job_ids)

        self.drive(served, timeout)
        self.good = self.files()
        return {j: self.sl(j) for j in job_ids}

    def steady(self, *job_ids: str, timeout: float = 30) -> dict[str, int]:
        """Wait until the jobs are measured and the classes the counters give are in force
        (no plan change is due); return job -> SL."""

        def settled() -> bool:
            jobs = {j["id"]: j for j in (self.state().get("plan") or {}).get("jobs", [])}
            done = [
                j
                for j in job_ids
                if j in jobs
                and jobs[j]["measured_class"]
                and jobs[j]["class"] == jobs[j]["measured_class"]
            ]
            return len(done) == len(job_ids) and self.state()["last_apply"]["ok"]

        self.in_force(*job_ids, timeout=timeout)
        self.drive(settled, timeout)
        return self.in_force(*job_ids, timeout=timeout)

    # -- what OpenSM has --------------------------------------------------------------------

    def files(self) -> dict[Path, str]:
        osm = self.lab.paths.opensm
        return {path: path.read_text() for path in (osm.conf, osm.policy)}

    def check_files(self, *, checker: bool = True) -> None:
        """OpenSM's files are the last good ones (or as the admin left them) and, with
        *checker*, pass ``check-opensm`` (not while the admin's own line is the fault)."""
        assert self.files() == self.good, "OpenSM's files changed during the fault"
        if not checker:
            return
        out = subprocess.run(
            ["ibqos", "check-opensm", *(str(p) for p in self.good)],
            env=self.lab.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr

    def sweeps(self) -> int:
        """Heavy sweeps OpenSM logged so far (each reload is one)."""
        return self.lab.paths.opensm.log.read_text(errors="replace").count(SWEEP_DONE)

    def hosts(self, job_id: str) -> list[str]:
        jobs = yaml.safe_load(self.lab.paths.jobs.read_text())["jobs"]
        spec = next(j for j in jobs if j["id"] == job_id)
        return list(expand_hosts(spec["nodes"], "job file"))

    def sa_sl(self, job_id: str) -> int | None:
        """The PathRecord SL the SA serves between the job's first and last host."""
        hosts = self.hosts(job_id)
        return path_sl(self.lab, self.lid[hosts[0]], self.lid[hosts[-1]])

    # -- what the agent says ----------------------------------------------------------------

    def sl(self, job_id: str, timeout: float = 3.0) -> int:
        """``job-sl``'s answer (HandoffError: a miss)."""
        return ask_sl(job_id, timeout, socket_path=self.socket)

    def served(self, job_id: str) -> bool:
        """The agent hands out an SL for the job, and the SA serves that SL."""
        try:
            sl = self.sl(job_id, 1.0)
        except HandoffError:
            return False
        return self.sa_sl(job_id) == sl

    def check_sls(self, job_ids: Sequence[str]) -> None:
        """No SL is handed out that the SA does not serve (a miss is allowed)."""
        for job_id in job_ids:
            try:
                sl = self.sl(job_id)
            except HandoffError:
                continue  # the job's tasks start on the default SL
            assert self.sa_sl(job_id) == sl, f"job {job_id}: handed out SL {sl}, SA serves other"

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) -> value."""
        assert self.proc is not None and self.proc.metrics_url() is not None, (
            "the agent serves no metrics"
        )
        return self.proc.samples()

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def check_alive(self, job_id: str) -> None:
        """The agent runs, serves metrics, and answers job-sl (any answer)."""
        assert self.proc is not None and self.proc.poll() is None, "the agent died"
        assert self.metric("ibqos_cycles_total") is not None
        try:
            self.sl(job_id)
        except HandoffError as err:
            assert "not running" not in str(err), err

    def state(self) -> Mapping[str, Any]:
        return state(self.tmp_path)
