"""Faults of the OpenSM beside ibqos: a stale pid file, OpenSM stopped, its log gone, a
directory ibqos may not write, and more job changes than the reload budget allows.

In each, job C starts during the fault: it is not handed an SL OpenSM does not serve, and
its SL comes into force once the fault clears.
"""

from __future__ import annotations

import os
import time

from ibqos.lab.faults import hidden_log, stale_pid
from tests.faults.faultcheck import job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def test_a_stale_pid_file_is_never_signalled(agent_on_lab) -> None:
    guard = agent_on_lab(A, B)
    lab = guard.lab
    sweeps = guard.sweeps()
    with stale_pid(lab.paths.opensm.pid) as decoy:
        write_jobs(lab, A, B, C)
        guard.drive(lambda: guard.metric("ibqos_opensm_up") == 0, 15)
        guard.settle(2)
        assert decoy.hups() == 0 and decoy.proc.poll() is None
        assert f"pid {decoy.pid}" in guard.log() and "is not OpenSM" in guard.log()
        assert guard.sweeps() == sweeps
        guard.check_files()
        guard.check_sls(["A", "B", "C"])
        assert not guard.served("C")
        guard.check_alive("C")
    guard.in_force("A", "B", "C")
    assert guard.metric("ibqos_opensm_up") == 1


def test_a_stopped_opensm_is_reported_not_rolled_back(agent_on_lab) -> None:
    guard = agent_on_lab(A, B)
    lab = guard.lab
    rollbacks = guard.metric("ibqos_rollbacks_total")
    lab.stop_opensm()
    write_jobs(lab, A, B, C)
    guard.drive(lambda: guard.metric("ibqos_opensm_up") == 0, 15)
    cycles = guard.metric("ibqos_cycles_total") or 0
    guard.settle(4)
    # no 30 s waits for a sweep that cannot come: the cycles go on at their pace
    assert (guard.metric("ibqos_cycles_total") or 0) >= cycles + 3
    assert guard.metric("ibqos_rollbacks_total") == rollbacks
    assert "OpenSM is not running" in guard.log()
    guard.check_files()
    guard.check_alive("C")
    lab.start_opensm()
    guard.in_force("A", "B", "C")
    assert guard.metric("ibqos_opensm_up") == 1
    assert guard.metric("ibqos_rollbacks_total") == rollbacks


def test_a_missing_log_costs_no_rollback(agent_on_lab) -> None:
    """OpenSM's log renamed away: the apply is checked through the SA alone."""
    guard = agent_on_lab(A, B)
    lab = guard.lab
    rollbacks = guard.metric("ibqos_rollbacks_total")
    with hidden_log(lab.paths.opensm.log):
        write_jobs(lab, A, B, C)
        guard.drive(lambda: guard.metric("ibqos_opensm_log_missing") == 1, 15)
        guard.in_force("A", "B", "C")
        assert guard.metric("ibqos_rollbacks_total") == rollbacks
        guard.check_alive("C")
    guard.check_files()


def test_a_directory_ibqos_may_not_write(agent_on_lab) -> None:
    """OpenSM's directory read-only for the agent (as under the unit's empty capability
    bounding set, where root has no DAC_OVERRIDE): a soft failure, nothing changed."""
    guard = agent_on_lab(A, B, start=False)
    lab = guard.lab
    # root in tests: drop every capability, so the directory's mode binds the agent too
    prefix = ("setpriv", "--bounding-set", "-all", "--inh-caps", "-all") if os.getuid() == 0 else ()
    guard.start(prefix=prefix)
    guard.steady("A", "B")
    directory = lab.paths.opensm.conf.parent
    mode = directory.stat().st_mode & 0o7777
    sweeps = guard.sweeps()
    directory.chmod(0o555)
    try:
        write_jobs(lab, A, B, C)
        guard.drive(lambda: (guard.metric("ibqos_opensm_write_errors_total") or 0) >= 1, 15)
        guard.settle(2)
        assert guard.sweeps() == sweeps
        guard.check_files()
        guard.check_sls(["A", "B", "C"])
        assert not guard.served("C")
        guard.check_alive("C")
        assert not [p for p in directory.iterdir() if p.name.startswith(".")]  # no temp file
    finally:
        directory.chmod(mode)
    guard.in_force("A", "B", "C")


def test_job_changes_beyond_the_reload_budget_wait(agent_on_lab) -> None:
    """Two reloads at most at once, then one every 6 s: jobs that start faster wait (and are
    not handed an SL meanwhile); OpenSM never sweeps more often than that."""
    guard = agent_on_lab(A, B, opensm={"reload_budget": {"burst": 2, "per_minute": 10}})
    lab = guard.lab
    time.sleep(13)  # (no ticks) the bucket refills to its burst
    sweeps, t0 = guard.sweeps(), time.monotonic()
    jobs = [A, B]
    for n, hosts in enumerate(("cn0004", "cn0008", "cn0005"), start=3):
        jobs.append(job(f"J{n}", hosts))
        write_jobs(lab, *jobs)
        guard.settle(1.0)
    guard.drive(lambda: (guard.metric("ibqos_opensm_reloads_deferred_total") or 0) >= 1, 10)
    assert not guard.served("J5")
    guard.in_force("A", "B", "J3", "J4", "J5", timeout=40)
    elapsed = time.monotonic() - t0
    assert guard.sweeps() - sweeps <= 2 + elapsed / 6 + 1
    guard.check_files()
