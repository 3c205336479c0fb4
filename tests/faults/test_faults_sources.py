"""Faults of the job sources: a bad job in a job directory, a big job file that changes."""

from __future__ import annotations

import yaml

from tests.faults.faultcheck import job

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def test_one_bad_host_in_a_job_directory_leaves_out_only_its_job(agent_on_lab, tmp_path) -> None:
    """A Slurm prolog's directory, one file per job: a file whose host list does not parse
    is left out (one line, ``ibqos_job_source_rejected``), the jobs beside it and after it
    are taken, and the source stays up.  Once the file is fixed, its job is taken too."""
    jobs = tmp_path / "jobs.d"  # the agent reads its own directory; the lab runs A, B, C
    jobs.mkdir()
    for j in (A, B):
        (jobs / f"{j['id']}.yaml").write_text(yaml.safe_dump({"jobs": [j]}))
    guard = agent_on_lab(A, B, C, start=False, jobs={"path": str(jobs)})
    guard.start()
    guard.steady("A", "B")
    assert guard.metric("ibqos_job_source_up") == 1
    assert guard.metric("ibqos_job_source_rejected") == 0
    reloads = guard.metric("ibqos_opensm_reloads_total") or 0
    bad = jobs / "X.yaml"
    bad.write_text("jobs: [{id: X, nodes: 'cn[0005-'}]\n")
    (jobs / "C.yaml").write_text(yaml.safe_dump({"jobs": [C]}))  # a good job after it
    guard.drive(lambda: guard.metric("ibqos_job_source_rejected") == 1, 10)
    guard.in_force("A", "B", "C")  # the new good job gets its SL
    assert guard.metric("ibqos_job_source_up") == 1
    guard.check_files()
    guard.check_sls(["A", "B", "C"])
    guard.check_alive("A")
    # the bad file is said once, not at every read of the directory
    (jobs / "A.yaml").write_text(yaml.safe_dump({"jobs": [A | {"name": "appA2"}]}))
    guard.settle(3)
    assert guard.log().count("X.yaml: jobs[0].nodes: bad host list") == 1, guard.log()
    assert guard.metric("ibqos_opensm_reloads_total") - reloads <= 2  # C's plan, at most
    bad.write_text(yaml.safe_dump({"jobs": [job("X", "cn0005")]}))
    guard.drive(lambda: guard.metric("ibqos_job_source_rejected") == 0, 10)
    guard.in_force("A", "B", "C")
    guard.check_files()
    guard.check_sls(["A", "B", "C"])
