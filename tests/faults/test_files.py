"""Faults in OpenSM's files that someone else wrote: lines OpenSM rejects, markers edited.

In each, a job starts while the fault lasts: it must not be handed an SL that OpenSM does
not serve, OpenSM must not be signalled, and once the admin fixes the file the new job's
SL comes into force.
"""

from __future__ import annotations

from pathlib import Path

from agentrun import QUIET, write_jobs
from faultcheck import XGFT, Guard, job

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def fault_then_fix(guard: Guard, path: Path, broken: str) -> None:
    """Write *broken* to *path*, start job C, check the guarantees, put the file back."""
    lab = guard.lab
    sweeps = guard.sweeps()
    good = path.read_text()
    path.write_text(broken)
    guard.good[path] = broken
    write_jobs(lab, A, B, C)
    guard.drive(lambda: guard.metric("ibqos_opensm_files_refused") == 1, 15)
    guard.settle(2)
    assert guard.sweeps() == sweeps  # OpenSM was not signalled
    guard.check_files(checker=False)  # nothing written over the admin's file
    guard.check_sls(["A", "B", "C"])
    assert not guard.served("C")
    guard.check_alive("C")
    path.write_text(good)
    guard.in_force("A", "B", "C")
    assert guard.metric("ibqos_opensm_files_refused") == 0


def test_an_admin_line_opensm_would_reject_is_not_written_around(make_lab, tmp_path: Path) -> None:
    """``ipoib, pkey 0x0123`` with no such partition makes OpenSM drop the whole policy."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        guard.in_force("A", "B")
        policy = lab.paths.opensm.policy
        ulps = "qos-ulps\n    ipoib, pkey 0x0123 : 3\nend-qos-ulps\n"
        fault_then_fix(guard, policy, policy.read_text() + ulps)
        assert "the admin's line" in guard.log()
    finally:
        assert guard.stop() == 0


def test_an_admin_option_opensm_misreads_is_not_written_around(make_lab, tmp_path: Path) -> None:
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        guard.in_force("A", "B")
        conf = lab.paths.opensm.conf
        fault_then_fix(guard, conf, conf.read_text() + "qos_max_vls notanumber\n")
        assert "qos_max_vls" in guard.log()
    finally:
        assert guard.stop() == 0


def test_a_marker_deleted_by_hand_stops_the_writes(make_lab, tmp_path: Path) -> None:
    """Without its begin marker ibqos's old block would stay as the admin's rules, ahead of
    the new ones: the SA would serve the old SLs."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        guard.in_force("A", "B")
        policy = lab.paths.opensm.policy
        lines = policy.read_text().splitlines(keepends=True)
        begin = next(i for i, line in enumerate(lines) if line.startswith("# BEGIN ibqos"))
        fault_then_fix(guard, policy, "".join(lines[:begin] + lines[begin + 1 :]))
    finally:
        assert guard.stop() == 0
