"""OpenSM's log rotated under the agent, each way logrotate does it: renamed with OpenSM not
told (it writes on into the renamed file), renamed then SIGUSR1 (Debian's logrotate: OpenSM
reopens its log), copied then truncated in place.

Each rotation is followed by a job start, which OpenSM must take with one reload: no wait
for a sweep line that went to another file, no rollback, no second reload.  The rotations
come either just before the job change, or while the agent waits for OpenSM's sweep (right
after it wrote the files).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ibqos.lab.faults import ROTATIONS, rotate_log
from tests.faults.faultcheck import SWEEP_DONE, Guard, job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
#: the job that starts after each rotation (each way its own: a new SL to put in force)
STARTS = {
    "rename": job("C", "cn[0004,0008]"),
    "signal": job("D", "cn[0005-0006]"),
    "copytruncate": job("E", "cn[0004,0008]"),
}


def sweeps(log: Path) -> int:
    """Heavy sweeps OpenSM logged, in its log and the rotated ones (``<log>.N``)."""
    files = [log, *(p for p in log.parent.glob(f"{log.name}.*") if p.suffix[1:].isdigit())]
    return sum(p.read_text(errors="replace").count(SWEEP_DONE) for p in files)


def when_written(path: Path, then: Callable[[], None]) -> Callable[[], None]:
    """Run *then* in a thread as soon as *path* changes (the agent wrote OpenSM's files and
    is about to signal, or waits for the sweep); the returned call joins it and re-raises
    what it raised."""
    before = path.read_text()
    failed: list[BaseException] = []

    def watch() -> None:
        deadline = time.monotonic() + 60
        try:
            while path.read_text() == before:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{path} was not written within 60 s")
                time.sleep(0.002)
            then()
        except BaseException as err:  # handed to the test's thread
            failed.append(err)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def join() -> None:
        thread.join(65)
        assert not thread.is_alive()
        if failed:
            raise failed[0]

    return join


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_rotated_log_costs_one_reload_per_change(agent_on_lab, when: str) -> None:
    # seven applies in a minute: more than the default budget allows, and a deferred
    # apply would only make the test slower
    guard: Guard = agent_on_lab(A, B, opensm={"reload_budget": {"burst": 20, "per_minute": 20}})
    lab = guard.lab
    log = lab.paths.opensm.log
    running = [A, B]
    for how in ROTATIONS:
        new = STARTS[how]
        if how == "copytruncate":
            running = [j for j in running if j["id"] != "C"]  # C ends, E takes its hosts
        running.append(new)
        ids = [j["id"] for j in running]
        before = {
            name: guard.metric(name) or 0
            for name in (
                "ibqos_opensm_applies_total",
                "ibqos_opensm_reloads_total",
                "ibqos_rollbacks_total",
                "ibqos_opensm_log_rotations_total",
            )
        }
        swept = sweeps(log)

        def rotate(how: str = how) -> None:
            rotate_log(log, how, pid=lab.opensm_info()["pid"])

        if when == "before":
            rotate()
            write_jobs(lab, *running)
        else:
            join = when_written(lab.paths.opensm.policy, rotate)
            write_jobs(lab, *running)
        guard.steady(*ids)
        if when == "during":
            join()
        after = {name: guard.metric(name) or 0 for name in before}
        applies = after["ibqos_opensm_applies_total"] - before["ibqos_opensm_applies_total"]
        # one reload per change (the job's start, then its measured class): none rolled back
        assert 1 <= applies <= 2, how
        assert after["ibqos_opensm_reloads_total"] - before["ibqos_opensm_reloads_total"] == (
            applies
        ), how
        assert sweeps(log) - swept == applies, how
        assert after["ibqos_rollbacks_total"] == before["ibqos_rollbacks_total"], how
        # the rotation is seen (the fault in a metric), and followed
        assert (
            after["ibqos_opensm_log_rotations_total"] > (before["ibqos_opensm_log_rotations_total"])
        ), how
        assert "OpenSM did not take the new files" not in guard.log(), how
        assert "no heavy sweep" not in guard.log(), how
        guard.check_files()
        guard.check_sls(ids)
        assert guard.served(new["id"]), how
        guard.check_alive(new["id"])


def test_a_log_renamed_before_the_agent_started_is_found(agent_on_lab) -> None:
    """Renamed with OpenSM not told before the agent first looked: the agent never had the
    file OpenSM writes open, and finds it among OpenSM's open files (/proc)."""
    guard: Guard = agent_on_lab(A, B, start=False)
    lab = guard.lab
    log = lab.paths.opensm.log
    rotate_log(log, "rename")
    swept = sweeps(log)
    guard.start()
    guard.steady("A", "B")
    reloads = guard.metric("ibqos_opensm_reloads_total") or 0
    assert reloads >= 1 and sweeps(log) - swept == reloads
    assert guard.metric("ibqos_rollbacks_total") == 0
    assert "OpenSM did not take the new files" not in guard.log()
    assert "writes its log into" in guard.log()
    guard.check_files()
    guard.check_sls(["A", "B"])
    guard.check_alive("A")
