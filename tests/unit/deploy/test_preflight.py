"""``ibqos check-config``'s look at what a config points at (ibqos.deploy.preflight)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml

from ibqos.agent.lock import AgentLock
from ibqos.config.load import load_config
from ibqos.deploy.preflight import allowed, preflight
from ibqos.slurm.source import Completed
from tests.support.paths import TESTS

DATA = TESTS / "data" / "squeue"


def host(tmp_path: Path, **sections: dict) -> Path:
    """A config whose OpenSM files, job file, state directory and socket all exist and
    are usable (no OpenSM process to signal, no metrics port), with *sections* merged."""
    osm = tmp_path / "opensm"
    osm.mkdir()
    (osm / "opensm.conf").write_text("log_max_size 0\n")
    (osm / "opensm.log").write_text("")
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    doc: dict = {
        "mode": "enforce",
        "opensm": {
            "conf": str(osm / "opensm.conf"),
            "policy_file": str(osm / "qos-policy.conf"),
            "log": str(osm / "opensm.log"),
        },
        "jobs": {"source": "file", "path": str(tmp_path / "jobs.yaml")},
        "agent": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "s.sock")},
        "metrics": {"listen": ""},
    }
    for key, value in sections.items():
        doc.setdefault(key, {}).update(value) if isinstance(value, dict) else doc.update(
            {key: value}
        )
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def lines(tmp_path: Path, **kw) -> list[str]:
    return [str(f) for f in preflight(load_config(host(tmp_path)), **kw)]


def test_a_ready_host_has_nothing_to_report(tmp_path) -> None:
    assert lines(tmp_path) == []


def test_every_problem_is_reported_at_once(tmp_path) -> None:
    config = load_config(host(tmp_path))
    (tmp_path / "opensm" / "opensm.conf").unlink()
    (tmp_path / "opensm" / "opensm.log").unlink()
    (tmp_path / "jobs.yaml").unlink()
    (tmp_path / "s.sock").write_text("not a socket")
    found = [str(f) for f in preflight(config)]
    conf, log = tmp_path / "opensm" / "opensm.conf", tmp_path / "opensm" / "opensm.log"
    assert found == [
        f"error: opensm.conf: {conf}: no such file (OpenSM reads it at start and at every"
        " SIGHUP; ibqos adds its QoS keys to the admin's file)",
        f"error: jobs.path: {tmp_path / 'jobs.yaml'}: cannot read job file: No such file or"
        " directory",
        f"error: agent.socket: {tmp_path / 's.sock'}: exists and is not a socket",
        f"warning: opensm.log: {log}: no such file (OpenSM's errors after a reload are then"
        " seen only by verification, after a fixed wait)",
    ]


def test_modes_bind_root_as_the_unit_runs_it(tmp_path) -> None:
    """The unit drops CAP_DAC_OVERRIDE: a 0555 directory is closed to root there too."""
    config = load_config(host(tmp_path))
    directory = tmp_path / "opensm"
    directory.chmod(0o555)
    (directory / "opensm.conf").chmod(0o444)
    try:
        found = [str(f) for f in preflight(config)]
        assert not allowed(directory, os.W_OK)
    finally:
        directory.chmod(0o755)
    assert found == [
        f"error: opensm.conf: {directory / 'opensm.conf'}: ibqos may not write it",
        f"error: opensm.conf: {directory}: ibqos may not create its temp files when it"
        " replaces OpenSM's files there",
    ]
    assert allowed(directory, os.W_OK)


def test_observe_mode_only_warns_of_files_it_does_not_write_yet(tmp_path) -> None:
    path = host(tmp_path, mode="observe")
    (tmp_path / "opensm" / "opensm.conf").chmod(0o444)
    found = [str(f) for f in preflight(load_config(path))]
    assert found == [
        f"warning: opensm.conf: {tmp_path / 'opensm' / 'opensm.conf'}: ibqos may not write it"
        " (enforce mode needs to)"
    ]


def test_a_state_dir_that_cannot_be_made(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    path = host(tmp_path, agent={"state_dir": str(tmp_path / "file" / "state")})
    found = [str(f) for f in preflight(load_config(path))]
    assert found == [
        f"error: agent.state_dir: {tmp_path / 'file' / 'state'}: cannot be made:"
        f" {tmp_path / 'file'} is not a directory"
    ]


def test_a_metrics_port_in_use_and_a_socket_path_too_long(tmp_path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        long_sock = tmp_path / ("x" * 120) / "ibqos.sock"
        path = host(
            tmp_path,
            metrics={"listen": f"127.0.0.1:{port}"},
            agent={"socket": str(long_sock)},
        )
        config = load_config(path)
        found = [str(f) for f in preflight(config)]
    assert found == [
        f"error: metrics.listen: 127.0.0.1:{port}: in use by another process (another agent,"
        " or a lab's?)",
        f"error: agent.socket: {long_sock}: longer than the 107 bytes a UNIX socket path may have",
    ]
    assert [f.key for f in preflight(config)] == ["agent.socket"]  # the port is free again


def test_a_live_socket_of_another_agent(tmp_path) -> None:
    config = load_config(host(tmp_path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(tmp_path / "s.sock"))
        other.listen(1)
        found = [str(f) for f in preflight(config)]
    assert found == [
        f"error: agent.socket: {tmp_path / 's.sock'}: another process answers there (an agent"
        " with another state directory?)"
    ]
    assert preflight(config) == []  # a dead agent's socket: the next one removes it


def test_the_running_agents_own_port_is_not_a_clash(tmp_path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = load_config(host(tmp_path, metrics={"listen": f"127.0.0.1:{port}"}))
        lock = AgentLock(config.agent.state_dir, "enforce")
        try:
            found = [str(f) for f in preflight(config)]
        finally:
            lock.close()
    assert found == [
        f"note: agent.state_dir: an ibqos agent (enforce, pid {os.getpid()}) runs on"
        f" {config.agent.state_dir}: its metrics port and socket are not probed"
    ]


def test_a_policy_file_opensm_does_not_read(tmp_path) -> None:
    config = load_config(host(tmp_path))
    other = tmp_path / "elsewhere.conf"
    config.opensm.conf.write_text(f"qos_policy_file {other}\n")
    found = [str(f) for f in preflight(config)]
    assert found == [
        f"warning: opensm.policy_file: {config.opensm.policy_file}: {config.opensm.conf}"
        f" names qos_policy_file {other}: OpenSM reads the file ibqos writes only if started"
        " with --qos_policy_file pointing at it"
    ]
    config.opensm.conf.write_text(f"qos_policy_file {config.opensm.policy_file}\n")
    assert preflight(config) == []


def test_a_stale_pid_file_is_a_warning(tmp_path) -> None:
    pid_file = tmp_path / "opensm.pid"
    pid_file.write_text(f"{os.getpid()}\n")  # alive, but not OpenSM
    config = load_config(host(tmp_path, opensm={"pid_file": str(pid_file)}))
    (found,) = preflight(config)
    assert found.severity == "warning" and found.key == "opensm.pid_file"
    assert "applies nothing until OpenSM runs" in found.message


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (None, None),
        (
            Completed(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"),
            "error: slurm.squeue: squeue has not answered yet: squeue --all --json: exit 1:"
            " slurm_load_jobs error: Unable to contact slurm controller",
        ),
    ],
)
def test_slurm_must_answer(tmp_path, reply, problem) -> None:
    config = load_config(host(tmp_path, jobs={"source": "slurm"}, slurm={"notify_dir": ""}))
    answer = reply or Completed(0, (DATA / "22.05-mix.json").read_text(), "")

    def squeue(argv, timeout_s):
        if argv[-1] == "--version":
            return Completed(0, "slurm-wlm 22.05.8\n", "")
        return answer

    found = [str(f) for f in preflight(config, squeue=squeue)]
    assert found == ([problem] if problem else [])


@pytest.mark.parametrize(
    ("routes", "meanwhile"),
    [
        ("auto", "the agent reads the switches' tables with ibroute meanwhile"),
        (
            "dump",
            "no routes until it is: attribution splits by subtree, tuning predicts over"
            " D-mod-K routes",
        ),
    ],
)
def test_a_missing_lft_dump_is_a_warning(tmp_path, routes, meanwhile) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    config = load_config(host(tmp_path, fabric={"lft_dump": str(dump), "routes": routes}))
    assert [str(f) for f in preflight(config)] == [
        f"warning: fabric.lft_dump: {dump}: not a readable file (OpenSM writes it after a heavy"
        f" sweep while the ROUTING log flag is on); {meanwhile}"
    ]
    dump.write_text("")
    assert preflight(config) == []


def test_an_lft_dump_not_used_is_not_checked(tmp_path) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    config = load_config(host(tmp_path, fabric={"lft_dump": str(dump), "routes": "ibroute"}))
    assert preflight(config) == []


def test_a_bad_job_in_a_job_directory_is_a_warning(tmp_path) -> None:
    """The agent leaves a directory's bad job out and takes the others: a warning here."""
    jobs = tmp_path / "jobs.d"
    jobs.mkdir()
    (jobs / "1.yaml").write_text("jobs: [{id: '1', nodes: cn0001}]\n")
    (jobs / "2.yaml").write_text("jobs: [{id: '2', nodes: 'cn[0002-'}]\n")
    config = load_config(host(tmp_path, jobs={"path": str(jobs)}))
    (found,) = [str(f) for f in preflight(config)]
    assert found.startswith(f"warning: jobs.path: {jobs / '2.yaml'}: jobs[0].nodes: bad host list")
    assert found.endswith("(job left out)")
