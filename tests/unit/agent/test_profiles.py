"""The agent's profile learning: a dry run writes no profile; a real run learns each
finished job (and keeps it in the state file for ``ibqos characterize learn``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from ibqos.agent.daemon import Agent
from ibqos.agent.state import load_state
from ibqos.attribute.jobmap import host_ports
from ibqos.collect.replay import CSV_COLUMNS, FORMAT, INDEX, VERSION
from ibqos.config.load import load_config
from tests.support.fabric_rates import full_rates
from tests.support.paths import TESTS

TOPOLOGY = TESTS / "data/lab-xgft-2_8.4_1.2/ibnetdiscover.txt"
JOB = {"id": "7", "name": "ft", "nodes": "cn[0001-0002,0009-0010]"}


def run_one_job(tmp_path: Path, *, dry_run: bool) -> tuple[Path, list[str]]:
    """Three cycles: the job starts, is measured, ends.  Returns the profile directory
    and what the dry run printed."""
    rec = tmp_path / "rec"
    rec.mkdir()
    index = {"format": FORMAT, "version": VERSION, "columns": list(CSV_COLUMNS), "sweeps": []}
    (rec / INDEX).write_text(json.dumps(index))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": [JOB]}))
    profiles = tmp_path / "profiles"
    doc = {
        "mode": "observe",  # OpenSM is never touched; the agent otherwise runs as for real
        "fabric": {"source": "file", "path": str(TOPOLOGY)},
        "collect": {"backend": "replay", "replay_path": str(rec)},
        "jobs": {"path": str(jobs)},
        "opensm": {"conf": str(tmp_path / "opensm.conf"), "log": str(tmp_path / "osm.log")},
        "agent": {"state_dir": str(tmp_path / "state"), "socket": ""},
        "metrics": {"listen": ""},
        "profiles": {"dir": str(profiles), "learn": True},
    }
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    printed: list[str] = []
    agent = Agent(load_config(path), path, dry_run=dry_run, echo=printed.append)
    try:
        fabric = agent.parts.pipeline.fabric
        hp = host_ports(fabric)
        agent.cycles.rates = full_rates(fabric, {hp[h][0]: 1e9 for h in ("cn0001", "cn0002")})
        agent.cycle(sweep=False)  # started: not measured on rates from before it ran
        agent.cycle(sweep=False)  # measured
        jobs.write_text("jobs: []\n")
        agent.cycle(sweep=False)  # ended
    finally:
        agent.close()
    return profiles, printed


def test_a_dry_run_writes_no_profile(tmp_path: Path) -> None:
    profiles, printed = run_one_job(tmp_path, dry_run=True)
    assert len(printed) == 3 and "dry run: nothing written" in printed[-1]
    assert not profiles.exists()
    assert not (tmp_path / "state" / "state.json").exists()


def test_the_agent_learns_a_finished_job_once(tmp_path: Path) -> None:
    profiles, _ = run_one_job(tmp_path, dry_run=False)
    learned = yaml.safe_load((profiles / "ft.yaml").read_text())
    assert [o["source"] for o in learned["observations"]] == ["job 7"]
    finished = load_state(tmp_path / "state").finished["ft"]
    assert finished.id == "7" and finished.end_s == learned["observations"][0]["time_s"]


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
