"""SIGHUP: a changed config reaches every part of the agent, or is refused whole; and
``run --once`` holds the agent lock like the daemon."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ibqos.agent.daemon import Agent
from ibqos.agent.lock import AgentLock
from ibqos.cli import cli
from ibqos.collect.replay import CSV_COLUMNS, FORMAT, INDEX, VERSION
from ibqos.config.load import load_config
from ibqos.fabric.lfts import read_lft_dump
from ibqos.opensm.signallers import CommandSignaller
from tests.support.paths import TESTS

TOPOLOGY = TESTS / "data/lab-xgft-2_8.4_1.2/ibnetdiscover.txt"


def write_config(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Agent, Path, dict]]:
    """An enforce-mode agent on a file topology and an empty replay (nothing is swept)."""
    rec = tmp_path / "rec"
    rec.mkdir()
    index = {"format": FORMAT, "version": VERSION, "columns": list(CSV_COLUMNS), "sweeps": []}
    (rec / INDEX).write_text(json.dumps(index))
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    doc = {
        "mode": "enforce",
        "fabric": {"source": "file", "path": str(TOPOLOGY)},
        "collect": {"backend": "replay", "replay_path": str(rec)},
        "jobs": {"path": str(tmp_path / "jobs.yaml")},
        "opensm": {
            "conf": str(tmp_path / "opensm.conf"),
            "policy_file": str(tmp_path / "qos-policy.conf"),
            "log": str(tmp_path / "opensm.log"),
            "reload_command": ["true"],
            "sweep_timeout_s": 30,
        },
        "agent": {"state_dir": str(tmp_path / "state"), "socket": ""},
        "metrics": {"listen": ""},
    }
    path = tmp_path / "ibqos.yaml"
    write_config(path, doc)
    agent = Agent(load_config(path), path)
    try:
        yield agent, path, doc
    finally:
        agent.close()


def test_opensm_keys_reach_the_applier(setup: tuple[Agent, Path, dict], tmp_path: Path) -> None:
    agent, path, doc = setup
    doc["opensm"] |= {
        "log": str(tmp_path / "other.log"),
        "sweep_timeout_s": 7,
        "conf": str(tmp_path / "etc/opensm.conf"),
        "policy_file": str(tmp_path / "etc/policy.conf"),
        "reload_command": ["sh", "-c", ":"],
    }
    write_config(path, doc)
    agent.reload()
    assert agent.parts.applier.log_path == tmp_path / "other.log"
    assert agent.parts.applier.sweep_timeout_s == 7
    assert agent.parts.applier.signaller == CommandSignaller(("sh", "-c", ":"))
    assert agent.parts.applier.heartbeat is not None  # still pings the watchdog while waiting
    # render() reads the files it rewrites from the config in force
    assert agent.config.opensm.conf == tmp_path / "etc/opensm.conf"
    assert agent.config.opensm.policy_file == tmp_path / "etc/policy.conf"


def test_a_new_state_dir_is_refused_whole(
    setup: tuple[Agent, Path, dict], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent, path, doc = setup
    old = agent.config
    doc["agent"]["state_dir"] = str(tmp_path / "elsewhere")
    doc["opensm"]["log"] = str(tmp_path / "other.log")  # not taken either: all or nothing
    write_config(path, doc)
    with caplog.at_level(logging.WARNING, "ibqos.agent"):
        agent.reload()
    assert agent.config is old
    assert agent.parts.applier.log_path == tmp_path / "opensm.log"
    assert agent.parts.applier.state_dir == tmp_path / "state"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    message = warnings[0].getMessage()
    assert "agent.state_dir" in message and "restart" in message
    assert agent.telemetry.counters.config_error_now


@pytest.mark.parametrize("mode", ["enforce", "observe"])
def test_run_once_takes_the_agent_lock(
    setup: tuple[Agent, Path, dict], tmp_path: Path, mode: str
) -> None:
    """``run --once`` writes like the daemon (OpenSM's files in enforce mode, state.json):
    not next to a running agent or a restore."""
    _, path, doc = setup
    doc["mode"] = mode
    write_config(path, doc)
    held = AgentLock(tmp_path / "state", "enforce")
    try:
        out = CliRunner().invoke(cli, ["run", "--once", "--config", str(path)])
    finally:
        held.close()
    assert out.exit_code == 1, out.output
    assert f"another ibqos agent runs on state directory {tmp_path / 'state'}" in out.output


def test_routes_from_opensm_s_dump_reach_the_decider(
    setup: tuple[Agent, Path, dict], tmp_path: Path
) -> None:
    agent, path, doc = setup
    pipeline = agent.parts.pipeline  # kept for the agent's life; SIGHUP changes its parts
    # a replay has no switches to ask: without a dump there are no routes
    assert pipeline.routes.mode == "off" and pipeline.decider.lfts is None
    dump = tmp_path / "opensm-lfts.dump"
    text = (TOPOLOGY.parent / "opensm-lfts.dump").read_text()
    dump.write_text(text)
    doc["fabric"] |= {"lft_dump": str(dump)}
    write_config(path, doc)
    agent.reload()
    assert pipeline.routes.source == "dump"
    assert pipeline.decider.lfts == read_lft_dump(text) and len(pipeline.decider.lfts) == 6
    # OpenSM routes again and rewrites it: the next cycle's refresh hands the new tables on
    moved = text.replace("0x0002 001 #", "0x0002 002 #", 1)
    assert moved != text
    dump.write_text(moved + "\n")  # a different size: seen even within the mtime's resolution
    pipeline.refresh_routes()
    assert pipeline.decider.lfts == read_lft_dump(moved)
    assert pipeline.routes.status()["switches"] == 6
    registry = agent.telemetry.metrics.registry
    assert registry.get_sample_value("ibqos_routes_info", {"source": "dump"}) == 1
