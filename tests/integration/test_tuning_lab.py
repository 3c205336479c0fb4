"""Tuning in the closed loop: the agent tries setups on a fluid lab and keeps what the jobs
ran best under.

A lab with fluid contention (``ibqos lab up --contention fluid``) runs two all-to-all jobs
on the same two leaves, one always communicating, one with compute phases: they share the
leaf uplinks, so the lanes' weights decide who waits, and favouring the heavy one is
clearly slower in the lab.  The agent runs in enforce mode with tuning on and no search;
its pool is the first three setups (the law, ``equal``, ``favour-heavy``) and it tries
all of them, each for three sweeps, whatever a prediction ranks first, and keeps the one
of least measured score.  While it runs the test samples the lab's ground truth (each job's
iterations) and the agent's tuning state, so each trial's progress in the lab is known
independently of the agent's counters.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab import manage
from ibqos.lab.agentrun import scrape
from ibqos.plan.setups import LAW
from ibqos.plan.tuner import score
from tests.support.agentrun import QUIET, agent_config, start_agent

# 2;8,4;1,2: leaves of 8 hosts, 2 uplinks of 12.5 GB/s each.  H and L each have 4 nodes
# on leaf 1 and 4 on leaf 2, all-to-all at 10 GB/s: either alone offers its leaves'
# uplinks about 23 GB/s of their 25.  H always communicates; L computes 35 ms of every
# 50.  With classify.high at 0.45, H is high and L moderate, so the law gives them lanes
# of different weights and the weights decide who waits.
JOBS = [
    {
        "id": "H",
        "name": "ft",
        "nodes": "cn[0001-0004,0009-0012]",
        "pattern": "all-to-all",
        "rate_bytes_per_s": 1.0e10,
        "duty": 1.0,
        "period_s": 0.1,
    },
    {
        "id": "L",
        "name": "cg",
        "nodes": "cn[0005-0008,0013-0016]",
        "pattern": "all-to-all",
        "rate_bytes_per_s": 1.0e10,
        "duty": 0.3,
        "period_s": 0.05,
    },
]
TRIED = (LAW, "equal", "favour-heavy")  # the first three candidates
MAX_RELOADS = 12
LIMIT_S = 110.0  # the round must be decided by then


@pytest.fixture
def tuning_lab(tmp_path: Path) -> Iterator[Any]:
    root = tmp_path / "labs"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": JOBS}, sort_keys=False))
    lab = manage.up(
        "tune",
        build_xgft(parse_xgft("2;8,4;1,2")),
        root=root,
        jobs=jobs,
        opensm_options=QUIET,
        tick_s=0.1,
        contention="fluid",
        readback_s=1.0,
        timeout=60,
    )
    try:
        yield lab
    finally:
        manage.down("tune", root=root)


def _sample(lab: Any, state_file: Path) -> tuple[float, dict[str, int], dict[str, Any]]:
    """(lab time, job -> iterations, the agent's tuning state)."""
    while True:
        try:
            truth = json.loads(lab.paths.truth.read_text())
            break
        except ValueError:  # replaced while read: read again
            time.sleep(0.05)
    try:
        tuning = json.loads(state_file.read_text()).get("tuning") or {}
    except (OSError, ValueError):
        tuning = {}
    its = {j: int(v["iterations"]) for j, v in truth["jobs"].items() if v.get("running")}
    return float(truth["time_s"]), its, tuning


def _families(url: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(scrape(url).decode()):
        for s in family.samples:
            out[(s.name, s.labels.get("setup", ""))] = s.value
    return out


def test_the_agent_keeps_the_setup_the_jobs_ran_best_under(tuning_lab, tmp_path: Path) -> None:
    lab = tuning_lab
    config = agent_config(
        lab,
        tmp_path,
        collect={"interval_s": 4.0},
        classify={"tau_s": 2.0, "high": 0.45},
        # the law: 4 to 1 for L's lane; equal 1 to 1; favour-heavy 1 to 2
        lanes={"min_hold_s": 1.0, "min_interval_s": 0.0, "weight_ratio": 4.0},
        # a trial every few seconds: more reloads than the 2 a minute of the default budget
        opensm={"reload_budget": {"burst": 6, "per_minute": 30.0}},
        tuning={
            "enabled": True,  # agentrun's agents do not tune unless told to
            # the classes first settle (EWMA tau 2 s, held 1 s): a round that starts while
            # H is still moderate pools setups of two equal lanes, not these three
            "settle_s": 8.0,
            "candidates": len(TRIED),
            "shortlist": len(TRIED) - 1,
            "trial_sweeps": 3,
            "max_reloads_per_hour": MAX_RELOADS,
            "drift": 10.0,  # one round: the lab's counters come in ticks, not smoothly
            # the lab's lumpy counters: a gain must clear 3 % and two standard errors
            "margin": 0.03,
            "margin_sigmas": 2.0,
            "predicted_slack": 10.0,  # try every setup, whatever the prediction says
            "search_budget_s": 0.0,  # the three candidates only: no found setups join
        },
    )
    state_file = tmp_path / "state" / "state.json"
    proc = start_agent(lab, config, tmp_path)
    samples: list[tuple[float, dict[str, int], dict[str, Any]]] = []
    try:
        t0 = time.monotonic()
        while True:
            assert proc.poll() is None, (tmp_path / "agent.log").read_text()
            samples.append(_sample(lab, state_file))
            if samples[-1][2].get("state") == "settled":
                break
            assert time.monotonic() - t0 < LIMIT_S, (
                f"tuning did not settle: {samples[-1][2]}\n" + (tmp_path / "agent.log").read_text()
            )
            time.sleep(0.25)
        url = proc.metrics_url()
        assert url is not None
        metrics = _families(url)
        status = lab.run(["ibqos", "status", "--config", str(config)], check=True).stdout
    finally:
        assert proc.stop() == 0
    tuning = samples[-1][2]
    log = (tmp_path / "agent.log").read_text()

    # every setup of the round was tried, and each got a measured score
    measured = {k: (math.inf if v is None else v) for k, v in tuning["measured"].items()}
    assert set(measured) == set(TRIED), log
    best = min(measured.values())
    kept = tuning["wanted"]
    # the choice follows the measurements: the law unless beaten by the margin (3 %, or
    # wider where the trials' sweeps scattered: the decision says so)
    if kept == LAW:
        assert measured[LAW] <= best * 1.03 + 1e-9 or "within margin" in tuning["decision"], tuning
    else:
        assert measured[LAW] > measured[kept] * 1.03, tuning
        assert measured[kept] <= best * 1.03 + 1e-9 or "within margin" in tuning["decision"]
    worst = max(measured, key=lambda n: measured[n])
    assert worst != kept and measured[worst] > measured[kept]
    assert f"tuning: kept {kept}" in log

    # status and metrics say the same
    assert f"setup {kept};" in status
    assert metrics[("ibqos_tuning_setup_info", kept)] == 1.0
    for name, value in measured.items():
        if math.isfinite(value):
            assert metrics[("ibqos_tuning_score", name)] == pytest.approx(value, rel=1e-9)
    # reloads: one per switch (trials of the two others, the choice), within the cap
    reloads = metrics[("ibqos_tuning_reloads_total", "")]
    assert 2 <= reloads <= 3
    assert metrics[("ibqos_tuning_reloads_last_hour", "")] <= MAX_RELOADS

    # the lab's own account of each trial: iterations per second while it was on trial
    # (the first 3 s of a switched one left out: the reload, OpenSM's sweep and the
    # read-back; the law was in force before its trial)
    spans: dict[str, list[tuple[float, dict[str, int]]]] = {}
    for t, its, tun in samples:
        if tun.get("state") == "trial" and tun.get("trial"):
            spans.setdefault(tun["trial"], []).append((t, its))
    truth: dict[str, dict[str, float]] = {}
    for name, pts in spans.items():
        skip = 0.0 if name == LAW else 3.0
        pts = [p for p in pts if p[0] >= pts[0][0] + skip]
        if len(pts) >= 2 and pts[-1][0] - pts[0][0] >= 1.5:
            span = pts[-1][0] - pts[0][0]
            truth[name] = {j: (pts[-1][1][j] - pts[0][1][j]) / span for j in pts[-1][1]}
    assert set(truth) == set(TRIED), spans.keys()
    lab_score = score(truth, {"H": 8, "L": 8})
    print(f"measured by the agent {measured}; by the lab's truth {lab_score}; kept {kept}")
    # what the agent measured clearly worse was slower in the lab too, and what it kept
    # ran, by the lab's account, close to the best setup tried (the lab writes counters
    # tick by tick, so a sweep's rates are a few per cent off the lab's own progress)
    if measured[worst] > 1.08 * measured[kept]:
        assert lab_score[worst] > lab_score[kept], (measured, lab_score)
    assert lab_score[kept] <= 1.1 * min(lab_score.values()), (measured, lab_score)
