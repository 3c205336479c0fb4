"""Faults in OpenSM's files that someone else wrote: lines OpenSM rejects, markers edited.

In each, a job starts while the fault lasts: it must not be handed an SL that OpenSM does
not serve, OpenSM must not be signalled, and once the admin fixes the file the new job's
SL comes into force.
"""

from __future__ import annotations

from pathlib import Path

from tests.faults.faultcheck import Guard, job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def fault_then_fix(guard: Guard, path: Path, broken: str) -> None:
    """Write *broken* to *path*, start job C, check the guarantees, put the file back."""
    sweeps = guard.sweeps()
    good = path.read_text()
    path.write_text(broken)
    guard.good[path] = broken
    write_jobs(guard.lab, A, B, C)
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


def test_an_admin_line_opensm_would_reject_is_not_written_around(agent_on_lab) -> None:
    """``ipoib, pkey 0x0123`` with no such partition makes OpenSM drop the whole policy."""
    guard = agent_on_lab(A, B)
    policy = guard.lab.paths.opensm.policy
    ulps = "qos-ulps\n    ipoib, pkey 0x0123 : 3\nend-qos-ulps\n"
    fault_then_fix(guard, policy, policy.read_text() + ulps)
    assert "the admin's line" in guard.log()


def test_an_admin_option_opensm_misreads_is_not_written_around(agent_on_lab) -> None:
    guard = agent_on_lab(A, B)
    conf = guard.lab.paths.opensm.conf
    fault_then_fix(guard, conf, conf.read_text() + "qos_max_vls notanumber\n")
    assert "qos_max_vls" in guard.log()


def test_a_marker_deleted_by_hand_stops_the_writes(agent_on_lab) -> None:
    """Without its begin marker ibqos's old block would stay as the admin's rules, ahead of
    the new ones: the SA would serve the old SLs."""
    guard = agent_on_lab(A, B)
    policy = guard.lab.paths.opensm.policy
    lines = policy.read_text().splitlines(keepends=True)
    begin = next(i for i, line in enumerate(lines) if line.startswith("# BEGIN ibqos"))
    fault_then_fix(guard, policy, "".join(lines[:begin] + lines[begin + 1 :]))


def test_an_admin_rule_opensm_only_warns_about_costs_no_reload_storm(agent_on_lab) -> None:
    """``pkey: 0x0123`` in a match rule with no such partition: OpenSM logs ERR AC14 on
    every reload but keeps the policy.  A job start costs one reload, no rollback."""
    guard = agent_on_lab(A, B)
    policy = guard.lab.paths.opensm.policy
    rule = "qos-match-rules\n    qos-match-rule\n        pkey: 0x0123\n"
    rule += "        qos-level-name: DEFAULT\n    end-qos-match-rule\nend-qos-match-rules\n"
    policy.write_text(policy.read_text() + rule)
    sweeps = guard.sweeps()
    rollbacks = guard.metric("ibqos_rollbacks_total")
    applies = guard.metric("ibqos_opensm_applies_total") or 0
    write_jobs(guard.lab, A, B, C)
    guard.in_force("A", "B", "C")
    guard.settle(4)
    # one reload per change (C's start, then C's measured class): none to roll back
    changes = (guard.metric("ibqos_opensm_applies_total") or 0) - applies
    assert 1 <= changes <= 2 and guard.sweeps() == sweeps + changes
    assert guard.metric("ibqos_rollbacks_total") == rollbacks
    assert (guard.metric("ibqos_opensm_file_warnings") or 0) >= 1
    log = guard.log()  # the checker's warning and OpenSM's error: each logged once
    assert log.count("OpenSM's files: ") == 1
    assert log.count("OpenSM reports an error it goes on after") == 1
    guard.check_sls(["A", "B", "C"])


def test_files_opensm_rejects_after_the_checker_are_held_not_retried(
    agent_on_lab, tmp_path: Path
) -> None:
    """A trap the checker cannot see: partitions.conf gives P_Key 0x0123 two full members
    by GUIDs of ports that are not in the fabric, so OpenSM drops the partition and then the
    whole policy for the admin's ``ipoib, pkey 0x0123`` line (ERR AC05).  ibqos rolls back
    once, sees OpenSM reject the admin's own file too, and holds: no reload storm, no SL
    handed out, until the admin changes the files."""
    partitions = tmp_path / "partitions.conf"
    partitions.write_text(
        "Default=0x7fff, ipoib : ALL=full ;\n"
        "storage=0x0123, ipoib : 0x0002c903000000a1=full, 0x0002c903000000a2=full ;\n"
    )
    guard = agent_on_lab(A, B, lab_options={"partition_config_file": str(partitions)})
    policy = guard.lab.paths.opensm.policy
    good = policy.read_text()
    sweeps = guard.sweeps()
    policy.write_text(good + "qos-ulps\n    ipoib, pkey 0x0123 : 3\nend-qos-ulps\n")
    write_jobs(guard.lab, A, B, C)
    guard.drive(lambda: guard.metric("ibqos_opensm_rejected") == 1, 20)
    guard.good = guard.files()  # the admin's file, put back by the rollback
    write_jobs(guard.lab, A, B, C, job("D", "cn0005"))
    guard.settle(6)
    assert guard.sweeps() - sweeps <= 2  # the apply and its rollback, no more
    log = guard.log()  # said once, and each held cycle is not logged again
    assert log.count("ibqos.opensm.hold: OpenSM rejects") == 1
    assert log.count("held, nothing written") <= 1
    guard.check_files(checker=False)
    assert not guard.served("C") and not guard.served("D")
    guard.check_alive("D")
    policy.write_text(good)  # the admin removes the line
    guard.in_force("A", "B", "C", "D")
    assert guard.metric("ibqos_opensm_rejected") == 0
