"""Faults of the job sources: a bad job in a job directory, a big job file that changes."""

from __future__ import annotations

from pathlib import Path

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


def _big_job_file(path, jobs, count: int) -> None:
    """*jobs* (the lab's), then *count* jobs on hosts the fabric does not have, as a
    scheduler's file of a big cluster lists them (written whole, then renamed)."""
    lines = ["jobs:\n"]
    for j in jobs:
        lines.append(f"  - id: {j['id']}\n    name: {j['name']}\n    nodes: {j['nodes']}\n")
        lines.append(f"    pattern: {j['pattern']}\n")
    for i in range(count):
        lines.append(f'  - id: "{100000 + i}"\n    name: big\n')
        lines.append(f"    nodes: far[{4 * i:06d}-{4 * i + 3:06d}]\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_big_job_file_that_changes_costs_no_stall(agent_on_lab, tmp_path) -> None:
    """A job file of 50k jobs (all but the lab's on hosts the fabric does not have): a new
    job in it is in force within seconds, as in a small file, and the agent's memory does
    not grow from change to change."""
    jobs = tmp_path / "jobs.yaml"
    _big_job_file(jobs, [A, B], 50_000)
    guard = agent_on_lab(A, B, C, start=False, jobs={"path": str(jobs)})
    guard.start()
    guard.steady("A", "B", timeout=120)
    assert guard.proc is not None
    rss = []
    for k, lab_jobs in enumerate(([A, B, C], [A, B], [A, B, C])):
        _big_job_file(jobs, lab_jobs, 50_000)
        want = len(lab_jobs) == 3  # C runs, or has ended
        took = guard.drive(lambda want=want: guard.served("C") == want, 15)
        print(f"change {k}: {took:.1f} s")
        assert guard.metric("ibqos_job_source_up") == 1
        rss.append(_rss_mb(guard.proc.pid))
    guard.in_force("A", "B", "C")
    guard.check_files()
    guard.check_sls(["A", "B", "C"])
    guard.check_alive("A")
    print(f"agent RSS after each change: {rss} MB")
    assert rss[-1] - rss[0] < 50, rss
