"""A standby OpenSM, and a failover: two OpenSMs on two hosts of the lab, an agent beside each.

The lab's first OpenSM (priority 10) is the master; a second one on cn0008 (priority 5)
stands by.  Each has its own files, log and pid file, and its own agent (state directory,
lock, socket, metrics), as on two SM hosts (docs/deploy.md).  The agent beside the standby
measures and plans but writes, signals and hands out nothing; once the master is stopped
(by pid) and the standby has taken over, its agent takes over too, and the jobs get the SLs
the new master's SA serves, while the old master's agent hands out none.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ibqos.errors import HandoffError
from ibqos.lab.opensm import FAST_FAILOVER, OpenSMFiles
from tests.faults.faultcheck import SWEEP_DONE, Guard, job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")
JOBS = ("A", "B", "C")
#: the second SM host
STANDBY_HOST = "cn0008"


class OtherGuard(Guard):
    """A :class:`Guard` for an agent beside another OpenSM of the lab, on *host*: its
    config names that OpenSM's files, log and pid file, and it runs attached to *host*."""

    def __init__(self, lab: Any, tmp_path: Path, osm: OpenSMFiles, host: str) -> None:
        tmp_path.mkdir()
        super().__init__(
            lab,
            tmp_path,
            opensm={
                "conf": str(osm.conf),
                "policy_file": str(osm.policy),
                "log": str(osm.log),
                "pid_file": str(osm.pid),
            },
            fabric={"lft_dump": str(osm.lfts_dump)},
        )
        self.osm = osm
        self.host = host

    def start(self, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()):
        host_env = {"SIM_HOST": self.lab.env(self.host)["SIM_HOST"]}
        return super().start(*args, env=host_env | (env or {}), prefix=prefix)

    def files(self) -> dict[Path, str]:
        return {path: path.read_text() for path in (self.osm.conf, self.osm.policy)}

    def sweeps(self) -> int:
        return self.osm.log.read_text(errors="replace").count(SWEEP_DONE)


def serves_none(guard: Guard) -> None:
    """The agent answers every job's question, and with no SL."""
    for job_id in JOBS:
        with pytest.raises(HandoffError) as err:
            guard.sl(job_id, 1.0)
        assert "not running" not in str(err.value), err.value


def test_a_failover_moves_the_sls_to_the_agent_beside_the_new_master(agent_on_lab) -> None:
    first = agent_on_lab(A, B, lab_options=FAST_FAILOVER | {"sm_priority": "10"})
    lab = first.lab
    osm = lab.add_opensm(STANDBY_HOST, priority=5)
    assert osm.role() == "standby"
    second = OtherGuard(lab, first.tmp_path / "standby", osm.files, STANDBY_HOST)
    second.good = second.files()
    second.start()
    try:
        # beside the standby: it measures and plans, and writes, signals and hands out nothing
        second.drive(lambda: second.proc is not None and second.proc.metrics_url() is not None, 60)
        second.drive(lambda: second.metric("ibqos_opensm_sm_state") == 2, 30)
        write_jobs(lab, A, B, C)
        first.steady(*JOBS)  # C measured and its class in force: no plan change is due
        cycles = second.metric("ibqos_cycles_total") or 0
        second.settle(4)
        # no 30 s waits for a sweep that never comes: the cycles go on at their pace
        assert (second.metric("ibqos_cycles_total") or 0) >= cycles + 3
        assert (second.state().get("plan") or {}).get("jobs"), "the standby's agent plans"
        for name in ("applies", "reloads"):
            assert second.metric(f"ibqos_opensm_{name}_total") == 0
        assert second.metric("ibqos_rollbacks_total") == 0
        assert second.sweeps() == 0
        second.check_files()
        serves_none(second)
        assert "not the master" in second.log()
        first.check_sls(JOBS)

        # the master stopped by pid: the standby takes over, and its agent too
        t0 = time.monotonic()
        lab.stop_opensm()
        osm.wait_role(("master",), timeout=60)
        t1 = time.monotonic()
        sls = second.in_force(*JOBS, timeout=60)
        print(
            f"failover: the standby OpenSM master {t1 - t0:.1f} s after the master stopped,"
            f" its agent's SLs served by its SA {time.monotonic() - t0:.1f} s after"
        )
        assert set(sls) == set(JOBS)
        assert second.metric("ibqos_opensm_sm_state") == 3
        assert second.metric("ibqos_opensm_takeovers_total") == 1
        assert second.metric("ibqos_rollbacks_total") == 0
        # its files were the standby's own: one apply, one reload (the budget's burst is 6)
        assert (second.metric("ibqos_opensm_reloads_total") or 0) <= 2
        second.check_sls(JOBS)
        second.check_alive("C")
        assert "taking over" in second.log()

        # the old master's agent: another SM runs the fabric now, so it hands out no SL
        first.drive(lambda: first.metric("ibqos_opensm_sm_state") == 0, 30)
        first.check_sls(JOBS)
        serves_none(first)
        first.check_files()
        first.check_alive("C")

        # the old master back with a lower priority (with its higher one it would take the
        # fabric back): it stands by, and so does its agent
        conf = lab.paths.opensm.conf
        assert "\nsm_priority 10\n" in conf.read_text()
        conf.write_text(conf.read_text().replace("sm_priority 10\n", "sm_priority 1\n"))
        first.good = first.files()
        sweeps = first.sweeps()
        lab.start_opensm()
        assert lab.opensm.role() == "standby"
        first.drive(lambda: first.metric("ibqos_opensm_sm_state") == 2, 30)
        first.settle(3)
        assert first.sweeps() == sweeps
        serves_none(first)
        first.check_files()
        second.check_sls(JOBS)
        assert second.in_force(*JOBS) == sls
    finally:
        assert second.stop() == 0
