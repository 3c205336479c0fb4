"""The agent's re-check of the SLs in force, without a fabric: an SL the SA does not serve
is withdrawn at once and handed out again once served; an unchanged apply hands out only
what the SA serves; observe mode's proposal is not in force after a switch to enforce."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from ibqos.agent.daemon import Agent
from ibqos.config.load import load_config
from ibqos.errors import IbqosError
from ibqos.opensm.served import RETRY_S, Recheck
from tests.support.replay_agent import plan_now, replay_config


class FakeSA:
    """``saquery PR`` answered from the plan in force, but for the jobs set in *other*."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.other: dict[str, int] = {}
        self.down = False
        self.now = 0.0  # the re-check's clock, seconds

    def __call__(self, argv: Sequence[str]) -> str:
        if self.down:
            raise IbqosError("saquery: timed out")
        slid = int(argv[3])
        cycles = self.agent.cycles
        plan = cycles.last.plan if cycles.last is not None else cycles.in_force_plan
        assert plan is not None
        lids = dict(self.agent.parts.pipeline.decider.job_lids())
        job = next(j for j, ls in lids.items() if ls and ls[0] == slid)
        sl = self.other.get(job, plan.job_sl[job])
        return f"\t\tsl....................0x{sl:x}\n"


def inject(agent: Agent) -> FakeSA:
    """Give *agent* a re-check on a fake SA (``opensm.verify`` is off in these configs, so
    no apply runs ``saquery`` itself)."""
    sa = FakeSA(agent)
    cycles = agent.cycles
    osm = agent.config.opensm
    cycles._recheck = Recheck((osm.conf, osm.policy_file), sa, window_s=0.0, clock=lambda: sa.now)
    cycles._recheck_cfg = osm
    return sa


@pytest.fixture
def config(tmp_path: Path) -> Iterator[tuple[Path, dict]]:
    path, doc = replay_config(tmp_path)
    # OpenSM's log shows the heavy sweep's end after each reload: applies succeed
    doc["opensm"]["reload_command"] = ["sh", "-c", f"echo 'SUBNET UP' >> {tmp_path}/opensm.log"]
    path.write_text(yaml.safe_dump(doc))
    (tmp_path / "opensm.log").touch()
    yield path, doc


def test_an_unserved_sl_is_withdrawn_then_handed_out_again(config: tuple[Path, dict]) -> None:
    path, _doc = config
    agent = Agent(load_config(path), path)
    try:
        sa = inject(agent)
        assert plan_now(agent)
        board, counters = agent.sl.board, agent.telemetry.counters
        assert agent.cycles.last is not None
        sl_a = agent.cycles.last.plan.job_sl["A"]
        assert board.known("A") == sl_a
        sa.other["A"] = (sl_a + 1) % 16  # OpenSM serves another SL now
        assert plan_now(agent)  # the files still carry the plan: no apply
        assert board.known("A") is None and board.known("B") is not None
        assert counters.sl_withdrawals == 1 and counters.sl_unserved_jobs == 1
        assert agent.cycles.withdrawn == {"A": sl_a}
        assert plan_now(agent)  # still not served: still withdrawn, counted once
        assert board.known("A") is None and counters.sl_withdrawals == 1
        del sa.other["A"]
        assert plan_now(agent)
        assert board.known("A") == sl_a
        assert counters.sl_unserved_jobs == 0 and not agent.cycles.withdrawn
        assert counters.sl_rechecks >= 4
    finally:
        agent.close()


def test_a_restarted_agent_rechecks_what_it_saved_as_in_force(config: tuple[Path, dict]) -> None:
    path, _doc = config
    agent = Agent(load_config(path), path)
    try:
        assert plan_now(agent)
    finally:
        agent.close()
    agent = Agent(load_config(path), path)
    try:
        assert agent.cycles.in_force  # trusted from the state file
        sa = inject(agent)
        sa.other["B"] = 0  # OpenSM restarted meanwhile on other files
        assert plan_now(agent)
        assert agent.sl.board.known("B") is None and agent.sl.board.known("A") is not None
        assert agent.telemetry.counters.sl_withdrawals == 1
    finally:
        agent.close()


def test_an_unchanged_apply_hands_out_only_what_the_sa_serves(config: tuple[Path, dict]) -> None:
    """A job not in force whose SL the files already carry (an agent switched to enforce
    mode, or restarted between its write and its publish) waits for the SA."""
    path, _doc = config
    agent = Agent(load_config(path), path)
    try:
        sa = inject(agent)
        assert plan_now(agent)
        agent.cycles.mode_changed()  # as after observe -> enforce: nothing is in force
        assert agent.sl.board.known("A") is None
        sa.down = True  # no SA answers (OpenSM stopped)
        assert plan_now(agent)
        assert agent.sl.board.known("A") is None and agent.sl.board.known("B") is None
        sa.down = False
        assert plan_now(agent)  # the SA is not asked again at once after a failure
        assert agent.sl.board.known("A") is None
        sa.now += RETRY_S
        assert plan_now(agent)
        assert agent.sl.board.known("A") is not None and agent.sl.board.known("B") is not None
    finally:
        agent.close()


def test_observe_to_enforce_hands_out_none_of_observe_s_proposal(
    config: tuple[Path, dict],
) -> None:
    """The SIGHUP path: OpenSM not signallable (it does not take the files), so nothing
    observe mode proposed may be answered once the agent enforces."""
    path, doc = config
    doc["mode"] = "observe"
    doc["opensm"]["reload_command"] = ["false"]
    path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(path), path)
    try:
        assert plan_now(agent)
        assert agent.cycles.in_force  # observe mode shows its proposal as in force
        doc["mode"] = "enforce"
        path.write_text(yaml.safe_dump(doc))
        agent.request_reload()
        agent._handle_reload()  # what the loop does on SIGHUP: the mode, then a cycle
        assert not agent.parts.observing
        assert not agent.cycles.in_force
        assert agent.sl.board.known("A") is None and agent.sl.board.known("B") is None
        assert "exit 1" in agent.telemetry.counters.last_error  # OpenSM did not take them
    finally:
        agent.close()
