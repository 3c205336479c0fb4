"""Faults of the job sources and of the counters: a bad job in a job directory, a big job
file that changes, 32-bit PMA counters near their top."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

from ibqos.lab.fabric import fabric_from_lab
from tests.faults.faultcheck import XGFT, job
from tests.integration.labcheck import QUIET, port_of

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def _put(path: Path, text: str) -> None:
    """Write a job file whole, then rename it into place, as a Slurm prolog would."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_one_bad_host_in_a_job_directory_leaves_out_only_its_job(agent_on_lab, tmp_path) -> None:
    """A Slurm prolog's directory, one file per job: a file whose host list does not parse
    is left out (one line, ``ibqos_job_source_rejected``), the jobs beside it and after it
    are taken, and the source stays up.  Once the file is fixed, its job is taken too."""
    jobs = tmp_path / "jobs.d"  # the agent reads its own directory; the lab runs A, B, C
    jobs.mkdir()
    for j in (A, B):
        _put(jobs / f"{j['id']}.yaml", yaml.safe_dump({"jobs": [j]}))
    guard = agent_on_lab(A, B, C, start=False, jobs={"path": str(jobs)})
    guard.start()
    guard.steady("A", "B")
    assert guard.metric("ibqos_job_source_up") == 1
    assert guard.metric("ibqos_job_source_rejected") == 0
    sweeps = guard.sweeps()
    bad = jobs / "X.yaml"
    _put(bad, "jobs: [{id: X, nodes: 'cn[0005-'}]\n")
    guard.drive(lambda: guard.metric("ibqos_job_source_rejected") == 1, 10)
    guard.settle(2)
    assert guard.sweeps() == sweeps  # the bad job costs OpenSM nothing
    assert guard.metric("ibqos_job_source_up") == 1
    _put(jobs / "C.yaml", yaml.safe_dump({"jobs": [C]}))  # a good job after it
    guard.in_force("A", "B", "C")  # gets its SL
    guard.check_files()
    guard.check_sls(["A", "B", "C"])
    guard.check_alive("A")
    # the bad file is said once, not at every read of the directory
    _put(jobs / "B.yaml", yaml.safe_dump({"jobs": [B]}))  # the same job, a new file
    guard.settle(2)
    assert guard.log().count("X.yaml: jobs[0].nodes: bad host list") == 1, guard.log()
    assert guard.metric("ibqos_job_source_rejected") == 1
    _put(bad, yaml.safe_dump({"jobs": [job("X", "cn0005")]}))
    guard.drive(lambda: guard.metric("ibqos_job_source_rejected") == 0, 10)
    # X is measured and its class in force (the class change after its start is an apply
    # too): the files are the last good ones only after that
    guard.drive(lambda: _settled(guard, "X"), 30)
    guard.in_force("A", "B", "C")
    guard.check_files()
    guard.check_sls(["A", "B", "C"])


def _settled(guard, job_id: str) -> bool:
    """The job is planned, measured, its measured class in force, and the last apply good."""
    state = guard.state()
    jobs = {j["id"]: j for j in (state.get("plan") or {}).get("jobs", [])}
    got = jobs.get(job_id)
    settled = got is not None and got["measured_class"] and got["class"] == got["measured_class"]
    return bool(settled) and (state.get("last_apply") or {}).get("ok", False)


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


# A native backend that takes a lab CA for a PMA without PortCountersExtended (as ibsim
# says PCE for every port, no lab port is read with 32-bit counters otherwise): two sweeps.
NARROW_CHILD = """
import json, sys
from ibqos.collect.native import NativeBackend, NodeCaps
from ibqos.collect.rates import RateTracker
from ibqos.fabric.targets import Target
target = Target(*json.load(sys.stdin))
tracker, out = RateTracker(), []
with NativeBackend(timeout_s=0.2, retries=1) as nb:
    nb.caps[target.node_guid] = NodeCaps(cap_mask=0, cap_mask2=0)  # no PCE, no XmitWait
    for _ in range(2):
        s = nb.sweep([target])
        rates = tracker.update(s)
        cleared = None if s.cleared_s is None else float(s.cleared_s[0])
        out.append({"bits": int(s.table["counter_bits"][0]), "error": s.table["error"][0],
                    "xmit": int(s.table["xmit_bytes"][0]), "rcv": int(s.table["rcv_bytes"][0]),
                    "cleared": cleared, "clears": s.stats.get("pc_clears", 0),
                    "reset": bool(rates["reset"][0]), "rate": float(rates["xmit_bytes_per_s"][0])})
print(json.dumps(out))
"""


def test_32_bit_counters_near_their_top_are_cleared_in_ibsim(make_lab) -> None:
    """ibsim's own PMA takes the clear: a port read through PortCounters (32 bits) whose
    PortXmitData passed half its range is cleared right after the reading, so it never
    sticks; the next reading counts from 0 at the clear, and is no reset."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    target = next(t for t in fabric_from_lab(lab).targets() if not t.is_switch)
    port = port_of(lab.topo, target)
    words = 3_000_000_000  # past half the 32-bit range (2^31 words)
    lines = [f'PerformanceSet "{port.node}"[{port.num}] PortCounters.PortXmitData={words}']
    assert lab.ibsim.command(lines) == []
    proc = lab.run(
        [sys.executable, "-c", NARROW_CHILD],
        check=False,
        timeout=60,
        stdin=json.dumps([*vars(target).values()]),
    )
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)
    assert (first["bits"], first["error"], first["xmit"]) == (32, "", 4 * words)
    assert first["clears"] == 1 and first["cleared"] is not None
    # after the clear only the collector's own MADs count (288 bytes per hop and Get)
    assert second["bits"] == 32 and second["xmit"] < 10_000, second
    # the lab's EDR link carries more than 2^32 words in 1.5 x collect.interval_s (10 s):
    # its level is 0, so it is cleared at every reading that saw traffic
    assert second["clears"] == 1 and second["cleared"] is not None
    assert not second["reset"] and math.isfinite(second["rate"]) and second["rate"] >= 0
