"""The demo's pieces that need no lab: LIDs from the discovered fabric, its agent config,
and the views it prints from what it read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ibqos.errors import LabError
from ibqos.lab.agentrun import agent_config
from ibqos.lab.demo import views
from ibqos.lab.demo.stage import agent_sections, host_lid, switch_lid
from tests.support.paths import TESTS

DISCOVERED = TESTS / "data" / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"

SL2VL = """\
# SL2VL table: Switch 0x0c42a10300020001 port 1
#                 SL: | 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14|15|
ports: in  1, out  1: | 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0|
ports: in  2, out  1: | 0| 1| 2| 1| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0|
"""
VLARB = """\
# VLArbitration tables: Switch 0x0c42a10300020001 port 1 LowCap 8 HighCap 8
# Low priority VL Arbitration Table:
VL    : |0x0 |0x1 |0x2 |0x0 |
WEIGHT: |0x80|0x20|0x40|0x0 |
# High priority VL Arbitration Table:
VL    : |0x0 |
WEIGHT: |0x0 |
"""


def _state(**tuning: Any) -> dict[str, Any]:
    jobs = [
        {"id": "1", "name": "ft", "class": "high", "measured_class": "high", "vl": 1},
        {"id": "2", "name": "md", "class": "low", "measured_class": "moderate", "vl": 2},
        {"id": "3", "name": "cp", "class": "low", "measured_class": "low", "vl": 2},
    ]
    lanes = [
        {"vl": 1, "weight": 32, "jobs": ["1"], "sls": [1]},
        {"vl": 2, "weight": 64, "jobs": ["2", "3"], "sls": [2, 3]},
    ]
    tables = {"sl2vl": [0, 1, 2, 1] + [0] * 12, "vlarb_low": [[0, 128], [1, 32], [2, 64]]}
    plan = {"jobs": jobs, "lanes": lanes, "tables": tables}
    return {"plan": plan, "job_sl": {"1": 1, "2": 2, "3": 3}, "tuning": tuning}


def test_lids_come_from_the_discovered_fabric() -> None:
    text = DISCOVERED.read_text()
    assert (host_lid(text, "cn0001"), host_lid(text, "cn0025")) == (2, 32)
    assert (switch_lid(text, "sw-L1-0001"), switch_lid(text, "sw-L2-0001")) == (3, 4)
    with pytest.raises(LabError, match="no CA of host cn9999"):
        host_lid(text, "cn9999")
    with pytest.raises(LabError, match="no switch sw-L9-0001"):
        switch_lid(text, "sw-L9-0001")


def test_the_agent_config_is_the_labs_with_short_time_constants(tmp_path: Path) -> None:
    lab = tmp_path / "ibqos.yaml"
    lab.write_text(
        "mode: enforce\nopensm: {conf: /c}\nmetrics: {listen: '127.0.0.1:9', fabric: demo}\n"
    )
    doc = yaml.safe_load(
        agent_config(lab, tmp_path / "agent.yaml", agent_sections(tmp_path / "p")).read_text()
    )
    assert doc["opensm"] == {"conf": "/c", "reload_budget": {"burst": 6, "per_minute": 6}}
    assert doc["metrics"] == {"listen": "127.0.0.1:0", "fabric": "demo"}
    assert doc["profiles"] == {"dir": str(tmp_path / "p")}
    assert doc["collect"] == {"interval_s": 5} and doc["tuning"]["trial_sweeps"] == 2


def test_the_dry_run_shows_the_first_jobs_blocks_only() -> None:
    guids = [f"+    port-guid: 0x{i:016x}" for i in range(4)]
    diff = [
        "--- qos-policy.conf (now)",
        "+port-groups",
        "+  port-group",
        "+    name: ibqos_job_1",
        *guids,
        "+  end-port-group",
        "+  port-group",
        "+    name: ibqos_job_2",
        *guids,
        "+  end-port-group",
        "+  port-group",
        "+    name: ibqos_job_3",
        "+  end-port-group",
        "+end-port-groups",
        "dry run: nothing written, OpenSM not signalled",
    ]
    assert views.dry_run_excerpt("\n".join(diff)) == [
        "--- qos-policy.conf (now)",
        "+port-groups",
        "+  port-group",
        "+    name: ibqos_job_1",
        *guids[:2],
        "+    ... 2 more port-guid lines: one per port of the job",
        "+  end-port-group",
        "+  ... the same port-group block for every other job",
        "+end-port-groups",
        "dry run: nothing written, OpenSM not signalled",
    ]


def test_the_switch_is_checked_against_the_plan_in_force() -> None:
    lines = views.switch_check(SL2VL, VLARB, _state(), "", [])
    assert lines[:3] == [
        "   $ smpquery sl2vl",
        "   #                 SL: | 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14|15|",
        "   ports: in  2, out  1: | 0| 1| 2| 1| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0|",
    ]
    assert "   = weight per VL (64-byte credits per round): VL0 128  VL1 32  VL2 64" in lines
    assert "   = the plan in force, exactly (SL2VL and VLArb)" in lines
    assert lines[lines.index("look:") + 1 :] == [
        "   - VL2 is shared by jobs 2, 3 (SLs 2,3)",
        "   - high job 1 (ft): alone on VL1, weight 32, less than any light job's lane (64-64)",
        "   - measured class differs, change held: 2 low->moderate",
    ]
    moved = views.switch_check(SL2VL.replace("| 2| 1|", "| 2| 2|"), VLARB, _state(), "", [])
    assert "   ! differs from the plan in force (an apply under way?)" in moved


def test_the_switch_view_says_what_tuning_tries_and_which_jobs_left() -> None:
    state = _state(wanted="equal", state="trial")
    state["job_sl"].pop("3")
    lines = views.switch_check(SL2VL, VLARB, state, "port-group ibqos_job_2\n", ["3", "2"])
    assert lines[lines.index("look:") + 1 :] == [
        "   - VL2 is shared by jobs 2, 3 (SLs 2,3)",
        "   - tuning tries setup equal: lanes and weights as it says, not the law's",
        "   - measured class differs, change held: 2 low->moderate",
        "   - job 3 ended: its SL is free again and its port-group is out of the policy",
        "   - job 2 ended: STILL PLANNED",
    ]


def test_the_log_leaves_out_sweeps_and_the_mad_shim() -> None:
    lines = [
        "t INFO ibqos.collect.loop: sweep: 82 ports",
        "t INFO ibqos.agent.cycle: plan: first plan",
        "umad2sim: connected",
        "t WARNING ibqos.collect.rates: dropped 1 sample",
    ]
    assert views.log_since(lines) == [
        "agent log since the last round (1 sweep line left out):",
        "   t agent.cycle: plan: first plan",
        "   t WARNING ibqos.collect.rates: dropped 1 sample",
    ]
    assert views.log_since([])[0] == "agent log since the last round (0 sweep lines left out):"


def test_progress_is_the_part_of_each_jobs_own_rate() -> None:
    text = (
        "# TYPE ibqos_lab_job_iterations_per_second gauge\n"
        'ibqos_lab_job_iterations_per_second{job_id="1"} 5.0\n'
        'ibqos_lab_job_iterations_per_second{job_id="2"} 9.96\n'
        "# TYPE ibqos_lab_job_vl gauge\n"
        'ibqos_lab_job_vl{job_id="1"} 3.0\n'
    )
    jobs = {"1": {"name": "ft", "period_s": 0.1}, "2": {"name": "md", "period_s": 0.1}}
    share, rate, vl = views.progress_shares(text, jobs)
    assert share == pytest.approx({"1": 0.5, "2": 0.996}) and vl == {"1": 3}
    table = views.progress_table(share, rate, vl, jobs, [("before ibqos", {"1": 0.8}), ("x", {})])
    assert table[3] == "   job   app       VL   it/s   now   before ibqos"
    assert table[4:] == [
        "   1     ft         3    5.0   50%    80% (-30)",
        "   2     md         0   10.0  100%      (new job)",
    ]


def test_prometheus_says_when_it_has_not_scraped_yet() -> None:
    assert views.prometheus_view(lambda expr: []) == [
        "Prometheus: no scrape yet (its first scrape comes ~5 s after it starts)"
    ]


def test_a_path_record_shows_its_lids_sl_and_mtu() -> None:
    out = "PathRecord dump:\n\t\tdlid....................33\n\t\tsl......................0xA\n"
    out += "\t\tmtu.....................0x84\n\t\tpkey....................0xFFFF\n"
    assert views.path_sl(out) == 10 and views.path_sl("") is None
    assert views.path_record(out) == [
        "   dlid....................33",
        "   sl......................0xA",
        "   mtu.....................0x84",
    ]
