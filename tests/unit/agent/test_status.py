"""Tuning as admins see it: metrics, the state file, ``ibqos status``."""

from __future__ import annotations

import math
from dataclasses import replace

from prometheus_client import CollectorRegistry

from ibqos.agent.state import AgentState, load_state, save_state, tuning_doc
from ibqos.agent.status import render_status
from ibqos.metrics import AgentMetrics, Counters
from ibqos.plan.tuner import TuningStatus

STATUS = TuningStatus(
    state="trial",
    wanted="equal",
    trial="equal",
    rounds=2,
    reloads=5,
    reloads_last_hour=3,
    predicted={"favour-light": 1.2, "equal": 1.05},
    measured={"favour-light": 1.1, "one-lane": math.inf},
    decision="kept favour-light: favour-light 1.000",
)


def test_metrics_show_state_setup_trial_scores_and_reloads() -> None:
    reg = CollectorRegistry()
    metrics = AgentMetrics(Counters(), fabric="f", routing_engine="", dry_run=False, registry=reg)
    assert reg.get_sample_value("ibqos_tuning_reloads_total") is None  # no tuner: nothing
    metrics.tuning.status = lambda: STATUS
    get = reg.get_sample_value
    assert get("ibqos_tuning_state", {"state": "trial"}) == 1.0
    assert get("ibqos_tuning_state", {"state": "settled"}) == 0.0
    assert get("ibqos_tuning_setup_info", {"setup": "equal"}) == 1.0
    assert get("ibqos_tuning_trial_info", {"setup": "equal"}) == 1.0
    assert get("ibqos_tuning_score", {"setup": "equal", "source": "predicted"}) == 1.05
    assert get("ibqos_tuning_score", {"setup": "one-lane", "source": "measured"}) == math.inf
    assert get("ibqos_tuning_reloads_total") == 5.0
    assert get("ibqos_tuning_rounds_total") == 2.0
    assert get("ibqos_tuning_reloads_last_hour") == 3.0


def test_status_shows_tuning_from_the_state_file(tmp_path) -> None:
    save_state(tmp_path, AgentState(updated_s=1.0, tuning=tuning_doc(STATUS)))
    state = load_state(tmp_path)
    assert state.tuning is not None and state.tuning["measured"]["one-lane"] is None
    text = render_status(state, tmp_path)
    assert "tuning: trial, trial of equal; setup equal; 2 rounds, 5 reloads (3 in the last" in text
    assert "last round: kept favour-light" in text
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line}
    assert lines["equal"] == ["1.050", "-"]
    assert lines["one-lane"] == ["-", "ended", "at", "floor"]
    assert lines["favour-light"] == ["1.200", "1.100"]


def test_status_and_metrics_show_refinements_and_the_prediction_error(tmp_path) -> None:
    status = replace(
        STATUS,
        refinements=2,
        prediction_error={"before": 0.25, "after": 0.05, "trials": 4},
    )
    doc = tuning_doc(status)
    assert doc["refinements"] == 2 and doc["prediction_error"]["after"] == 0.05
    assert "prediction_error" not in tuning_doc(STATUS)  # nothing fitted: not written
    save_state(tmp_path, AgentState(updated_s=1.0, tuning=doc))
    text = render_status(load_state(tmp_path), tmp_path)
    assert "refinements since the round: 2" in text
    assert "prediction error: 25.0% with the phases assumed, 5.0% fitted to 4 trials" in text
    reg = CollectorRegistry()
    metrics = AgentMetrics(Counters(), fabric="f", routing_engine="", dry_run=False, registry=reg)
    metrics.tuning.status = lambda: status
    metrics.tuning.prediction_error = lambda: (0.25, 0.05)
    get = reg.get_sample_value
    assert get("ibqos_tuning_prediction_error_ratio", {"when": "before"}) == 0.25
    assert get("ibqos_tuning_prediction_error_ratio", {"when": "after"}) == 0.05
