"""The agent beside a standby OpenSM stands by, and takes over once it is the master: the
gate on its own, and an agent in enforce mode on a recorded fabric."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ibqos.agent.daemon import Agent
from ibqos.agent.standby import SmGate
from ibqos.config.load import load_config
from ibqos.metrics import Counters
from ibqos.opensm.outcome import ApplyOutcome, ApplyResult
from ibqos.opensm.smstate import SmReading, SmState, SmStateReader
from tests.support.replay_agent import plan_now, replay_config
from tests.unit.opensm.test_smstate import MASTER, STANDBY, FakeSminfo


class FakeReader:
    """Readings as a test sets them; the log's sweep after the last state line."""

    def __init__(self, state: SmState | None, swept: bool | None = None) -> None:
        self.state = state
        self.log_swept = swept

    def read(self) -> SmReading:
        return SmReading(self.state, "sminfo" if self.state is not None else "")

    def swept(self) -> bool | None:
        return self.log_swept


def gate(state: SmState | None, swept: bool | None = None) -> tuple[SmGate, FakeReader]:
    reader = FakeReader(state, swept)
    return SmGate(reader, Counters()), reader  # type: ignore[arg-type]


def test_a_known_state_other_than_master_stands_by(caplog: pytest.LogCaptureFixture) -> None:
    for state in (SmState.STANDBY, SmState.DISCOVERING, SmState.NOTACTIVE):
        g, _ = gate(state)
        assert g.stand_by() and g.unconfirmed
        assert g.counters.sm_state == int(state)
    assert "not the master" in caplog.text


def test_master_or_unknown_acts_as_before() -> None:
    for state in (SmState.MASTER, None):
        g, _ = gate(state)
        assert not g.stand_by() and not g.unconfirmed
        assert g.confirm(ApplyResult(), lambda: ["never asked"])  # trusted as before
    assert gate(None)[0].counters.sm_state is None


def test_the_takeover_waits_for_the_new_masters_first_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g, reader = gate(SmState.STANDBY)
    assert g.stand_by()
    reader.state, reader.log_swept = SmState.MASTER, False
    assert g.stand_by()  # master, its SA not up before SUBNET UP
    assert g.counters.sm_takeovers == 0
    reader.log_swept = True
    with caplog.at_level(logging.INFO):
        assert not g.stand_by()
    assert g.counters.sm_takeovers == 1 and g.counters.sm_state == 3
    assert "taking over" in caplog.text
    # without a log (no state line in it) there is nothing to wait for
    g, reader = gate(SmState.STANDBY)
    g.stand_by()
    reader.state, reader.log_swept = SmState.MASTER, None
    assert not g.stand_by()


def test_after_standing_by_unchanged_files_are_checked_through_the_sa() -> None:
    g, reader = gate(SmState.STANDBY)
    g.stand_by()
    reader.state = SmState.MASTER
    g.stand_by()
    problems = ["job A: PathRecord lid 1->2 has SL 0, the policy gives SL 2"]
    asked: list[int] = []

    def verify() -> list[str]:
        asked.append(1)
        return problems

    assert not g.confirm(ApplyResult(), verify)  # the new master's own files: not served
    assert g.unconfirmed and len(asked) == 1
    problems = []
    assert g.confirm(ApplyResult(), verify) and not g.unconfirmed
    assert g.confirm(ApplyResult(), verify) and len(asked) == 2  # confirmed: as before


def test_after_standing_by_a_verified_apply_confirms_without_another_check() -> None:
    g, reader = gate(SmState.STANDBY)
    g.stand_by()
    reader.state = SmState.MASTER
    g.stand_by()
    verified = ApplyResult(ApplyOutcome.VERIFIED, (Path("qos-policy.conf"),))
    assert g.confirm(verified, lambda: ["never asked"]) and not g.unconfirmed


@pytest.fixture
def config(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    path, doc = replay_config(tmp_path)
    doc["opensm"]["reload_command"] = ["sh", "-c", f"echo 'SUBNET UP' >> {tmp_path / 'opensm.log'}"]
    path.write_text(yaml.safe_dump(doc))
    yield path, doc


def sminfo(agent: Agent, tmp_path: Path, answer: str) -> FakeSminfo:
    """The agent's SM state from a fake ``sminfo`` that answers *answer* for its port."""
    run = FakeSminfo(answer)
    assert agent.parts.sm_gate is not None
    agent.parts.sm_gate.reader = SmStateReader(tmp_path / "opensm.log", runner=run)
    return run


def test_an_agent_beside_a_standby_writes_nothing_and_takes_over_later(
    config: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = config
    agent = Agent(load_config(path), path)
    try:  # beside the master first: the plan is applied and in force
        sminfo(agent, tmp_path, MASTER)
        assert plan_now(agent) and agent.cycles.in_force
    finally:
        agent.close()
    conf = (tmp_path / "etc/opensm.conf").read_text()
    run = FakeSminfo(STANDBY)

    def reader(*args: Any, **kwargs: Any) -> SmStateReader:
        return SmStateReader(*args, runner=run, **kwargs)

    # restarted beside a standby: its state says the plan is in force, but none of it is
    monkeypatch.setattr("ibqos.agent.parts.SmStateReader", reader)
    agent = Agent(load_config(path), path)
    try:
        counters = agent.telemetry.counters
        assert agent.cycles.in_force == {} and counters.sm_state == 2
        assert plan_now(agent)  # a cycle that stands by is no failure
        assert agent.cycles.in_force == {} and agent.sl.board.known("A") is None
        assert agent.cycles.state.in_force is None  # nor after a restart
        assert (counters.applies, counters.reloads, counters.sm_state) == (0, 0, 2)
        # the plan goes on; OpenSM's files do not
        jobs = {"jobs": [{"id": "C", "nodes": "cn0005"}]}
        (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(jobs))
        assert plan_now(agent) and agent.cycles.last is not None
        assert set(agent.cycles.last.plan.job_sl) == {"C"}
        assert (tmp_path / "etc/opensm.conf").read_text() == conf
        assert counters.reloads == 0
        # its OpenSM the master: the plan is applied, its SLs handed out
        run.local = MASTER
        agent.parts.sm_gate.reader.last = None  # type: ignore[union-attr]
        assert plan_now(agent)
        assert counters.sm_takeovers == 1 and counters.reloads == 1
        assert agent.sl.board.known("C") == agent.cycles.last.plan.job_sl["C"]
    finally:
        agent.close()
