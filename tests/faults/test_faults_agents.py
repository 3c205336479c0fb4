"""Faults around the agent itself: a second agent, a restart, bad inputs that get fixed."""

from __future__ import annotations

import signal
import subprocess

import yaml

from tests.faults.faultcheck import Guard, job

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")


def test_a_second_agent_on_the_same_opensm_does_not_start(agent_on_lab) -> None:
    """Another state directory, the same OpenSM: the second agent stops at once with one line
    naming the first; the first goes on as if nothing happened."""
    guard = agent_on_lab(A, B)
    lab = guard.lab
    sweeps = guard.sweeps()
    other = guard.tmp_path / "other"
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
    assert guard.proc is not None and f"(pid {guard.proc.pid})" in lines[0]
    guard.settle(2)
    assert guard.sweeps() == sweeps  # OpenSM was not signalled by the second one
    guard.check_files()
    guard.check_sls(["A", "B"])
    guard.check_alive("A")


def test_a_second_agent_on_the_same_socket_leaves_the_first_ones_alone(agent_on_lab) -> None:
    """Another OpenSM's agent (its own files) configured with the same job-SL socket: its
    bind is refused, it goes on without serving SLs, and it never removes the first
    agent's socket, running or stopping."""
    guard = agent_on_lab(A, B)
    lab = guard.lab
    other = guard.tmp_path / "other"
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
    second.start()
    try:
        second.drive(lambda: "job SLs are not served" in second.log(), 20)
        assert second.proc is not None and second.proc.poll() is None
        guard.check_sls(["A", "B"])
        assert guard.served("A")
    finally:
        assert second.stop() == 0
    assert guard.socket.exists() and guard.served("A") and guard.served("B")
    guard.check_files()


def test_a_restart_costs_opensm_no_reload(agent_on_lab) -> None:
    """The plan in force comes back from the state file: no re-packing, no heavy sweep."""
    guard = agent_on_lab(A, B, C)
    before = guard.in_force("A", "B", "C")
    assert guard.stop() == 0
    sweeps = guard.sweeps()
    guard.start()
    assert guard.in_force("A", "B", "C") == before
    guard.settle(4)
    assert guard.sweeps() == sweeps
    guard.check_files()
    assert guard.metric("ibqos_opensm_reloads_total") == 0


def test_a_job_file_that_turns_invalid_is_visible_and_recovers(agent_on_lab, tmp_path) -> None:
    jobs = tmp_path / "jobs.yaml"  # the agent reads its own job file; the lab runs A, B, C
    jobs.write_text(yaml.safe_dump({"jobs": [A, B]}))
    guard = agent_on_lab(A, B, C, start=False, jobs={"path": str(jobs)})
    guard.start()
    guard.steady("A", "B")
    assert guard.metric("ibqos_job_source_up") == 1
    sweeps = guard.sweeps()
    jobs.write_text("jobs: [{id: C, nodes: 'cn[0004-'}]\n")
    guard.drive(lambda: guard.metric("ibqos_job_source_up") == 0, 10)
    guard.settle(2)
    assert guard.sweeps() == sweeps
    guard.check_files()  # the last good jobs are kept
    guard.check_sls(["A", "B"])
    guard.check_alive("A")
    jobs.write_text(yaml.safe_dump({"jobs": [A, B, C]}))
    guard.drive(lambda: guard.metric("ibqos_job_source_up") == 1, 10)
    guard.in_force("A", "B", "C")


def test_a_config_error_shows_until_the_file_is_fixed(agent_on_lab) -> None:
    guard = agent_on_lab(A)
    assert guard.proc is not None
    good = guard.config.read_text()
    doc = yaml.safe_load(good) | {"collect": {"interval_s": "soon"}}
    guard.config.write_text(yaml.safe_dump(doc))
    guard.proc.send_signal(signal.SIGHUP)
    guard.drive(lambda: guard.metric("ibqos_config_load_error") == 1, 10)
    guard.check_alive("A")
    guard.config.write_text(good)  # the admin puts the file back as it was
    guard.proc.send_signal(signal.SIGHUP)
    guard.drive(lambda: guard.metric("ibqos_config_load_error") == 0, 10)
    guard.check_files()
