"""The agent's own guards against faults, without a fabric: SLs handed out only once in
force, one agent per OpenSM, a state directory that does not depend on the cwd, metrics
that clear when the fault does."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler

import pytest
import yaml

from ibqos.agent.daemon import Agent
from ibqos.agent.lock import AgentLock, opensm_dirs
from ibqos.attribute.jobmap import FileJobSource
from ibqos.config.load import load_config, parse_config
from ibqos.errors import AgentLockError, ConfigError
from ibqos.metrics.server import _Server
from tests.support.replay_agent import JOBS, plan_now, replay_config


@pytest.fixture
def config(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    """An enforce-mode config on a file topology, a recording, and a reload command
    that fails (OpenSM would not take the files)."""
    yield replay_config(tmp_path)


def sweep_done(tmp_path: Path) -> list[str]:
    """A reload command after which OpenSM's log shows the heavy sweep's end."""
    return ["sh", "-c", f"echo 'SUBNET UP' >> {tmp_path / 'opensm.log'}"]


def test_an_sl_is_handed_out_only_once_opensm_serves_it(
    config: tuple[Path, dict], tmp_path: Path
) -> None:
    path, doc = config
    agent = Agent(load_config(path), path)
    try:
        assert not plan_now(agent)
        assert "exit 1" in agent.telemetry.counters.last_error  # OpenSM could not be signalled
        planned = agent.parts.pipeline.decider.previous
        assert planned is not None and set(planned.job_sl) == {"A", "B"}
        assert agent.sl.board.known("A") is None and agent.sl.board.known("B") is None
        assert agent.cycles.state.in_force is None  # nothing in force yet
    finally:
        agent.close()
    doc["opensm"]["reload_command"] = sweep_done(tmp_path)
    path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(path), path)
    try:
        assert plan_now(agent)
        assert agent.cycles.last is not None
        job_sl = agent.cycles.last.plan.job_sl
        assert agent.sl.board.known("A") == job_sl["A"] and agent.sl.board.known("B") == job_sl["B"]
        saved = json.loads((tmp_path / "state/state.json").read_text())
        assert saved["in_force"]["job_sl"] == job_sl
    finally:
        agent.close()


def test_a_restarted_agent_leaves_opensm_alone(config: tuple[Path, dict], tmp_path: Path) -> None:
    path, doc = config
    doc["opensm"]["reload_command"] = sweep_done(tmp_path)
    path.write_text(yaml.safe_dump(doc))
    in_force: dict[str, int] = {}
    for run in range(2):
        agent = Agent(load_config(path), path)
        try:
            if run:  # the restarted agent knows the SLs in force before its first cycle
                assert agent.cycles.in_force == in_force and in_force
            assert plan_now(agent)
            in_force = dict(agent.cycles.in_force)
            applies = agent.telemetry.counters.applies
        finally:
            agent.close()
    assert applies == 0  # the second run found OpenSM's files as they should be
    log = (tmp_path / "opensm.log").read_text()
    assert log.count("SUBNET UP") == 1  # one reload, by the first run


def test_one_agent_per_opensm_whatever_its_state_dir(tmp_path: Path) -> None:
    conf, policy = tmp_path / "etc/opensm.conf", tmp_path / "etc/qos-policy.conf"
    conf.parent.mkdir()
    code = (
        "import sys; from pathlib import Path; from ibqos.agent.lock import AgentLock;"
        " lock = AgentLock(Path(sys.argv[1]), 'enforce', (Path(sys.argv[2]),));"
        " print('held', flush=True); sys.stdin.read()"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "a"), str(conf.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        with pytest.raises(AgentLockError) as info:
            AgentLock(tmp_path / "b", "enforce", opensm_dirs(conf, policy))
        message = str(info.value)
        assert f"OpenSM's files in {conf.parent.resolve()} (pid {other.pid})" in message
        # the state directory's lock was let go again: only the OpenSM lock is contended
        AgentLock(tmp_path / "b", "observe").close()
    finally:
        other.communicate(timeout=10)
    AgentLock(tmp_path / "b", "enforce", opensm_dirs(conf, policy)).close()  # free again


def test_a_relative_state_dir_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"agent": {"state_dir": "state"}}, "ibqos.yaml")
    assert "agent.state_dir" in str(info.value) and "absolute" in str(info.value)


def test_the_config_error_clears_when_the_file_is_put_back(
    config: tuple[Path, dict], caplog: pytest.LogCaptureFixture
) -> None:
    path, _ = config
    good = path.read_text()
    agent = Agent(load_config(path), path)
    try:
        path.write_text("mode: [\n")
        with caplog.at_level(logging.ERROR):
            agent.reload()
        assert agent.telemetry.counters.config_error_now
        path.write_text(good)  # the admin undoes the edit: the text in force again
        agent.reload()
        assert not agent.telemetry.counters.config_error_now
    finally:
        agent.close()


def test_a_job_file_that_turns_invalid_shows_in_its_gauge(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(JOBS))
    source = FileJobSource(jobs)
    assert source.up is None
    assert len(source.jobs()) == 2 and source.up is True
    jobs.write_text("jobs: [{id: C, nodes: 'cn[0002-'}]\n")
    assert len(source.jobs()) == 2 and source.up is False  # the last good jobs are kept
    jobs.write_text(yaml.safe_dump({"jobs": JOBS["jobs"][:1]}))
    assert len(source.jobs()) == 1 and source.up is True


def test_a_metrics_client_that_times_out_is_one_line(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _Server(("127.0.0.1", 0), WSGIRequestHandler)
    try:
        with caplog.at_level(logging.DEBUG, logger="ibqos.metrics.server"):
            try:
                raise TimeoutError("timed out")
            except TimeoutError:
                server.handle_error(None, ("127.0.0.1", 40000))
            try:
                raise ValueError("bad request line")
            except ValueError:
                server.handle_error(None, ("127.0.0.1", 40001))
    finally:
        server.server_close()
    assert capsys.readouterr().err == ""  # no traceback on stderr
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("DEBUG", "metrics: client ('127.0.0.1', 40000): timed out"),
        ("WARNING", "metrics: client ('127.0.0.1', 40001): ValueError: bad request line"),
    ]


def test_a_state_directory_that_cannot_be_written_is_a_soft_failure(
    config: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, doc = config
    doc["opensm"]["reload_command"] = sweep_done(tmp_path)
    path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(path), path)
    try:

        def full(file: Path, text: str) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", str(file))

        monkeypatch.setattr("ibqos.agent.state.atomic_write", full)
        assert not plan_now(agent)
        assert agent.telemetry.counters.state_write_errors == 1
        assert "No space left on device" in agent.telemetry.counters.last_error
        assert agent.sl.board.known("A") is not None  # OpenSM took the files all the same
        monkeypatch.undo()
        assert plan_now(agent) and agent.telemetry.counters.state_write_errors == 1
        assert (tmp_path / "state/state.json").exists()
    finally:
        agent.close()
