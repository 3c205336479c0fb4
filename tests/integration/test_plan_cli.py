"""``ibqos plan`` end to end: on a live lab (PortInfo read, two native sweeps while the
traffic model runs) and on a recording of the lab replayed against the model's truth."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace

import numpy as np
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.replay import SweepRecorder
from ibqos.lab.fabric import fabric_from_lab
from tests.integration.labcheck import QUIET

# 2 leaves of 4 hosts under 2 spines; both jobs on both leaves, so the uplinks are shared.
# heavy: each host sends 2/3 of 10 GB/s off its leaf -> 13.3 GB/s of a leaf's 25 GB/s up
JOBS = """jobs:
  - {id: heavy, name: ft, nodes: "cn[0001-0002,0005-0006]", pattern: all-to-all,
     rate_bytes_per_s: 1.0e10, duty: 1.0, period_s: 0.1}
  - {id: light, name: pairs, nodes: "cn[0003-0004,0007-0008]", pattern: ring,
     rate_bytes_per_s: 2.0e8, duty: 1.0, period_s: 0.1}
"""


def check_plan(doc: dict) -> dict[str, dict]:
    """What must hold of any plan of JOBS; returns the jobs by id."""
    jobs = {j["id"]: j for j in doc["jobs"]}
    heavy, light = jobs["heavy"], jobs["light"]
    assert (heavy["class"], light["class"]) == ("high", "low")
    assert heavy["level"] == 1 and heavy["levels"]["1"]["util"] > 0.4
    assert heavy["sl"] != light["sl"] and heavy["vl"] != light["vl"]
    assert all(0 <= j["vl"] < doc["lane_config"]["data_vls"] for j in jobs.values())
    lanes = {lane["vl"]: lane for lane in doc["lanes"]}
    assert lanes[light["vl"]]["weight"] > lanes[heavy["vl"]]["weight"]
    assert lanes[heavy["vl"]]["jobs"] == ["heavy"]
    assert 15 not in [vl for vl, _ in doc["tables"]["vlarb_low"]]
    assert doc["replace"] and doc["reasons"][0] == "first plan"
    return jobs


def test_plan_on_a_live_lab(make_lab, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    proc = subprocess.Popen(
        ["ibqos", "plan", "--interval", "2", "--format", "json", "-v"],
        env=lab.env(),
        cwd=lab.paths.run,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        last = time.monotonic()
        while proc.poll() is None:  # the model runs in real time while ibqos sweeps
            time.sleep(0.2)
            now = time.monotonic()
            lab.tick(now - last)
            last = now
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    check_plan(doc)
    # lanes: auto -> read from the ports (ibsim: VL0-7, VLArb caps 8, MTU 2048)
    cfg = doc["lane_config"]
    assert (cfg["data_vls"], cfg["vlarb_low_cap"], cfg["mtu"]) == (8, 8, 2048)
    assert len(doc["tables"]["vlarb_low"]) <= 8
    assert "lanes: 8 data VLs, VLArb low 8" in err  # -v: INFO lines
    # the lab's config names OpenSM's dump: attribution goes by its routes, as the agent's
    assert doc["attribution"]["method"] == "routes"
    assert set(doc["attribution"]["residual"]) == {"1"}
    lines = err.splitlines()
    said = lines.index("sweeping counters (2 sweeps, 2 s apart)...")  # before the wait
    assert not any("sweep: " in ln for ln in lines[:said])
    assert sum("sweep: " in ln for ln in lines[said:]) == 2


def test_plan_on_a_replayed_recording_follows_the_model(make_lab, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    fabric = fabric_from_lab(lab)
    targets = fabric.targets()
    recorder = SweepRecorder(tmp_path / "rec")
    dt = 1.0
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, xmit_wait=False) as backend:
        first = backend.sweep(targets)
        lab.tick(dt)
        second = backend.sweep(targets)
    # the model moved dt seconds of traffic between the sweeps, whatever the wall clock did
    table = second.table.copy()
    table["time_s"] = first.table["time_s"] + dt
    recorder.record(first)
    recorder.record(replace(second, table=table))
    topology = tmp_path / "ibnetdiscover.txt"
    topology.write_text(lab.paths.discovered.read_text())
    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "--config",
            str(lab.paths.config),
            "--replay",
            str(tmp_path / "rec"),
            "--topology",
            str(topology),
            "--jobs",
            str(jobs),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    found = check_plan(doc)
    truth = lab.truth()["jobs"]
    errors = []
    for job_id, job in found.items():
        for level, true in enumerate(truth[job_id]["level_bytes_per_s"]):
            if true > 0:
                got = job["levels"][str(level)]["bytes_per_s"]
                errors.append(abs(got - true) / true)
    print(f"replayed plan: mean relative error per job and level {np.mean(errors):.2%}")
    assert np.mean(errors) < 0.05


def test_plan_rejects_lanes_the_fabric_does_not_have_in_one_line(make_lab, tmp_path):
    lab = make_lab("1;4;1", opensm_options=QUIET)
    cfg = tmp_path / "ibqos.yaml"
    cfg.write_text(lab.paths.config.read_text() + "lanes:\n  default_vl: 9\n")
    out = lab.run(["ibqos", "plan", "--config", str(cfg), "--interval", "0.1"])
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "ibqos: plan: lanes: VL 9 is not a data VL of this fabric (0-7)"
    )
    cfg.write_text(lab.paths.config.read_text().replace("jobs.yaml", "nojobs.yaml"))
    out = lab.run(["ibqos", "plan", "--config", str(cfg), "--interval", "0.1"])
    assert out.returncode == 1 and "nojobs.yaml" in out.stderr.splitlines()[-1]
