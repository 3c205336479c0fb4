"""The agent's state file: round trip, and clear errors for what it cannot read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.agent.state import STATE_FILE, AgentState, load_state, save_state
from ibqos.agent.status import render_status, routes_line
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
        routes={"mode": "auto", "source": "dump", "path": "/x", "switches": 4, "read_s": 2.0},
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


@pytest.mark.parametrize(
    ("doc", "line"),
    [
        (
            {"source": "dump", "path": "/tmp/opensm-lfts.dump", "switches": 6, "read_s": 0.0},
            "routes: dump /tmp/opensm-lfts.dump, 6 switches",
        ),
        (
            {"source": "ibroute", "path": None, "switches": 6, "read_s": 86400.0},
            "routes: ibroute, 6 switches, read 1970-01-02 00:00:00 UTC",
        ),
        (
            {"mode": "auto", "source": "none", "switches": 0, "problem": "ibroute: 1 of 6"},
            "routes: none (attribution splits by subtree, tuning predicts over D-mod-K);"
            " newer tables refused: ibroute: 1 of 6",
        ),
        (
            {"mode": "off", "source": "none"},
            "routes: none (attribution splits by subtree, tuning predicts over D-mod-K),"
            " fabric.routes is off",
        ),
    ],
)
def test_the_status_routes_line(tmp_path: Path, doc: dict, line: str) -> None:
    assert routes_line(doc) == line
    state = AgentState(updated_s=1.0, routes=doc)
    assert line in render_status(state, tmp_path).splitlines()
