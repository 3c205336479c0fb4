"""Closing the loop in the lab: ibqos's plan changes the jobs' progress.

A lab with fluid contention runs in its own supervisor (as ``ibqos lab up --contention
fluid`` runs it): two jobs share the leaf uplinks; the lab serves each job's iterations per
second on its metrics endpoint.  ``ibqos run --once`` then puts the jobs on separate VLs
with unequal weights; OpenSM programs them; the lab reads them back from the fabric and the
job on the heavier lane speeds up.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab import manage
from tests.integration.labcheck import QUIET

# 2;4,2;1,2: cn0001-0004 on leaf 1, cn0005-0008 on leaf 2, two 12.5 GB/s uplinks per leaf.
# Each job sends 2 x 8 GB/s out of its leaf while communicating; routes spread the
# destinations over both uplinks, so each uplink is offered 16 GB/s while both communicate.
JOBS = """jobs:
  - {id: "H", name: heavy, nodes: "cn[0001-0002,0005-0006]", pattern: all-to-all,
     rate_bytes_per_s: 1.2e10, duty: 1.0, period_s: 0.1}
  - {id: "L", name: light, nodes: "cn[0003-0004,0007-0008]", pattern: all-to-all,
     rate_bytes_per_s: 1.2e10, duty: 0.5, period_s: 0.1}
"""
WINDOW_S = 4.0


@pytest.fixture
def fluid_lab(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    root = tmp_path / "labs"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    lab = manage.up(
        "fluid",
        build_xgft(parse_xgft("2;4,2;1,2")),
        root=root,
        jobs=jobs,
        opensm_options=QUIET,
        tick_s=0.2,
        contention="fluid",
        readback_s=0.5,
        progress_window_s=WINDOW_S,
        timeout=60,
    )
    try:
        yield root, lab
    finally:
        manage.down("fluid", root=root)


def scrape(url: str) -> dict[tuple[str, str], float]:
    """(metric, job id or "") -> value, from the lab's metrics endpoint."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, s.labels.get("job_id", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wait_for(what: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def test_ibqos_plan_speeds_up_the_favoured_job(fluid_lab, tmp_path: Path) -> None:
    root, lab = fluid_lab
    status = manage.status("fluid", root=root)
    assert status["contention"] == "fluid"
    url = status["metrics_url"]
    assert url.startswith("http://127.0.0.1:")

    def model_time() -> float:
        return scrape(url)[("ibqos_lab_model_time_seconds", "")]

    wait_for(lambda: model_time() > WINDOW_S + 0.5, 20, "the lab does not tick")
    before = scrape(url)
    rate = "ibqos_lab_job_iterations_per_second"
    assert before[(rate, "H")] > 0 and before[(rate, "L")] > 0
    assert before[("ibqos_lab_job_iterations_total", "L")] > 0
    qos_before = manage.status("fluid", root=root)["qos"]
    assert qos_before["job_sl"] == {"H": 0, "L": 0}  # OpenSM's defaults: one SL, one lane
    # sharing one lane, both are slowed (alone, each would do 10 per second)
    assert before[(rate, "L")] < 9.5 and before[(rate, "H")] < 9.5

    # ibqos: one cycle, measuring the lab's counters; weights 4:1 between classes.  Sweeps
    # 3 s apart: the fluid lab's counters come in lumps (its ticks wait for the read-back),
    # and over 1 s the heavy job measured anywhere from 0.33 to 0.68 of its links, at times
    # in the light job's class; over 3 s, 0.57 to 0.66 against the light job's 0.28 to 0.33
    doc = yaml.safe_load(lab.paths.config.read_text())
    doc |= {
        "collect": {"interval_s": 3.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 0.0, "min_interval_s": 0.0, "weight_ratio": 4.0},
        "agent": {"state_dir": str(tmp_path / "state")},
    }
    config = tmp_path / "ibqos.yaml"
    config.write_text(yaml.safe_dump(doc))
    lab.run(["ibqos", "run", "--config", str(config), "--once"], check=True)
    job_sl = json.loads((tmp_path / "state" / "state.json").read_text())["job_sl"]

    # the lab reads back what OpenSM programmed: the jobs' SLs, on two lanes
    def read_back() -> dict[str, Any]:
        return manage.status("fluid", root=root)["qos"]

    wait_for(lambda: read_back()["job_sl"] == job_sl, 10, "the new SLs were not read back")
    qos = read_back()
    assert qos != qos_before
    vl = {j: qos["sl2vl"][sl] for j, sl in job_sl.items()}
    assert vl["H"] != vl["L"]
    weight = {v: 0 for v in vl.values()}
    for v, w in qos["vlarb_low"]:
        weight[v] = weight.get(v, 0) + w
    favoured, other = sorted(vl, key=lambda j: -weight[vl[j]])
    assert weight[vl[favoured]] >= 2 * weight[vl[other]], qos["vlarb_low"]

    # a full window later the favoured job runs faster than before (about 10 per second)
    changed = model_time()
    wait_for(lambda: model_time() > changed + WINDOW_S + 0.5, 20, "the lab stopped ticking")
    after = scrape(url)
    assert after[("ibqos_lab_job_vl", favoured)] == vl[favoured]
    print(
        f"{favoured} (favoured): {before[(rate, favoured)]:.2f} -> {after[(rate, favoured)]:.2f}"
        f" it/s; {other}: {before[(rate, other)]:.2f} -> {after[(rate, other)]:.2f} it/s"
    )
    assert after[(rate, favoured)] > 1.06 * before[(rate, favoured)]
    assert after[("ibqos_lab_qos_read_failures_total", "")] == 0
