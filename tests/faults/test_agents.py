"""Faults around the agent itself: a second agent, a restart, bad inputs that get fixed."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import yaml
from agentrun import QUIET, write_jobs
from faultcheck import XGFT, Guard, job

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def test_a_second_agent_on_the_same_opensm_does_not_start(make_lab, tmp_path: Path) -> None:
    """Another state directory, the same OpenSM: the second agent stops at once with one line
    naming the first; the first goes on as if nothing happened."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        guard.in_force("A", "B")
        sweeps = guard.sweeps()
        other = tmp_path / "other"
        other.mkdir()
        second = Guard(lab, other, agent={"socket": str(other / "sl.sock")})
        out = subprocess.run(
            ["ibqos", "run", "--config", str(second.config)],
            env=lab.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert "another ibqos agent manages OpenSM's files" in lines[0]
        assert f"(pid {guard.proc.pid})" in lines[0]
        guard.settle(2)
        assert guard.sweeps() == sweeps  # OpenSM was not signalled by the second one
        guard.check_files()
        guard.check_sls(["A", "B"])
        guard.check_alive("A")
    finally:
        assert guard.stop() == 0


def test_a_restart_costs_opensm_no_reload(make_lab, tmp_path: Path) -> None:
    """The plan in force comes back from the state file: no re-packing, no heavy sweep."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B, C)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        before = guard.steady("A", "B", "C")
    finally:
        assert guard.stop() == 0
    sweeps = guard.sweeps()
    guard.start()
    try:
        assert guard.in_force("A", "B", "C") == before
        guard.settle(4)
        assert guard.sweeps() == sweeps
        guard.check_files()
        assert guard.metric("ibqos_opensm_reloads_total") == 0
    finally:
        assert guard.stop() == 0


def test_a_job_file_that_turns_invalid_is_visible_and_recovers(make_lab, tmp_path: Path) -> None:
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B, C)  # the traffic; the agent reads its own job file
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": [A, B]}))
    guard = Guard(lab, tmp_path, jobs={"path": str(jobs)})
    guard.start()
    try:
        guard.in_force("A", "B")
        assert guard.metric("ibqos_job_source_up") == 1
        jobs.write_text("jobs: [{id: C, nodes: 'cn[0004-'}]\n")
        guard.drive(lambda: guard.metric("ibqos_job_source_up") == 0, 10)
        guard.check_files()  # the last good jobs are kept
        guard.check_sls(["A", "B"])
        guard.check_alive("A")
        jobs.write_text(yaml.safe_dump({"jobs": [A, B, C]}))
        guard.drive(lambda: guard.metric("ibqos_job_source_up") == 1, 10)
        guard.in_force("A", "B", "C")
    finally:
        assert guard.stop() == 0


def test_a_config_error_shows_until_the_file_is_fixed(make_lab, tmp_path: Path) -> None:
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A)
    guard = Guard(lab, tmp_path)
    guard.start()
    try:
        guard.in_force("A")
        good = guard.config.read_text()
        doc = yaml.safe_load(good) | {"collect": {"interval_s": "soon"}}
        guard.config.write_text(yaml.safe_dump(doc))
        assert guard.proc is not None
        guard.proc.send_signal(signal.SIGHUP)
        guard.drive(lambda: guard.metric("ibqos_config_load_error") == 1, 10)
        guard.check_alive("A")
        guard.config.write_text(good)  # the admin puts the file back as it was
        guard.proc.send_signal(signal.SIGHUP)
        guard.drive(lambda: guard.metric("ibqos_config_load_error") == 0, 10)
        guard.check_files()
    finally:
        assert guard.stop() == 0


def test_a_second_agent_on_the_same_socket_leaves_the_first_ones_alone(
    make_lab, tmp_path: Path
) -> None:
    """Another OpenSM's agent (its own files) configured with the same job-SL socket: its
    bind is refused, it goes on without serving SLs, and it never removes the first
    agent's socket, running or stopping."""
    lab = make_lab(XGFT, opensm_options=QUIET)
    write_jobs(lab, A, B)
    guard = Guard(lab, tmp_path)
    guard.start()
    other = tmp_path / "other"
    (other / "etc").mkdir(parents=True)
    osm = lab.paths.opensm
    files = {"conf": other / "etc/opensm.conf", "policy_file": other / "etc/qos-policy.conf"}
    files["conf"].write_text(osm.conf.read_text())
    files["policy_file"].write_text(osm.policy.read_text())
    second = Guard(
        lab,
        other,
        agent={"socket": str(guard.socket)},
        opensm={k: str(v) for k, v in files.items()} | {"pid_file": None},
    )
    try:
        guard.in_force("A", "B")
        second.start()
        second.drive(lambda: "job SLs are not served" in second.log(), 20)
        assert second.proc is not None and second.proc.poll() is None
        guard.check_sls(["A", "B"])
        assert guard.served("A")
        assert second.stop() == 0
        assert guard.socket.exists() and guard.served("A") and guard.served("B")
        guard.check_files()
    finally:
        if second.proc is not None:
            second.stop()
        assert guard.stop() == 0
