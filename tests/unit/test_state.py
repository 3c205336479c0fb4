"""The agent's state file: round trip, and clear errors for what it cannot read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.agent.state import STATE_FILE, AgentState, load_state, save_state
from ibqos.errors import StateError


def test_round_trip_and_empty(tmp_path: Path) -> None:
    assert load_state(tmp_path / "none") == AgentState()
    state = AgentState(
        job_sl={"7": 3, "8": 0},
        job_cls={"7": "high", "8": "low"},
        history={"ft": "high"},
        plan={"jobs": []},
        last_apply={"summary": "no change"},
        updated_s=1.5,
    )
    save_state(tmp_path / "s", state)
    assert load_state(tmp_path / "s") == state


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"version": 99}', "not an ibqos state file of version 1"),
        ('{"version": 1, "job_sl": {"7": 16}, "job_cls": {}, "history": {}}', "SL 16"),
        ('{"version": 1, "job_sl": {}, "job_cls": {"7": "huge"}, "history": {}}', "'huge'"),
        ('{"version": 1, "job_sl": {}}', "damaged"),
    ],
)
def test_bad_state_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / STATE_FILE).write_text(text)
    with pytest.raises(StateError, match=message) as info:
        load_state(tmp_path)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
