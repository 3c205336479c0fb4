"""``ibqos run --dry-run --simulate`` on a lab: the simulator's view beside the plan."""

from __future__ import annotations

import re
import subprocess

import yaml

from tests.integration.labcheck import QUIET
from tests.support.agentrun import JOB_B, agent_config, drive, write_jobs

HEAVY = {"id": "H", "name": "a2a", "nodes": "cn[0001-0002,0005-0006]", "pattern": "all-to-all"}
HEAVY |= {"rate_bytes_per_s": 1.2e10, "duty": 0.8, "period_s": 0.01}
UNDECLARED = {"id": "U", "name": "quiet", "nodes": "cn[0004,0008]"}


def test_dry_run_shows_in_force_and_proposed_predictions(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,1", opensm_options=QUIET)  # one spine: 4:1 at the leaves
    write_jobs(lab, HEAVY, JOB_B)
    lab.reload_jobs()
    # the agent's job source also lists a job that declares no traffic (and sends none)
    agent_jobs = tmp_path / "jobs.yaml"
    agent_jobs.write_text(yaml.safe_dump({"jobs": [HEAVY, JOB_B, UNDECLARED]}))
    config = agent_config(lab, tmp_path, jobs={"path": str(agent_jobs)})
    argv = ["ibqos", "run", "--config", str(config), "--dry-run", "--once", "--simulate"]
    # the what-if simulates the jobs as measured: the lab ticks while the agent sweeps
    with open(tmp_path / "out.txt", "w") as sink:
        proc = subprocess.Popen(argv, env=lab.env(), cwd=lab.paths.run, stdout=sink, text=True)
        try:
            drive(lab, lambda: proc.poll() is not None, 120)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert proc.returncode == 0
    out = (tmp_path / "out.txt").read_text()
    # the steady state, as the closed-loop lab runs the fluid model (no switch buffers)
    assert "simulated steady state (fluid model, senders per host, no buffers, staggered" in out
    assert "seconds per iteration: in force vs proposed" in out
    # the jobs as measured: the job file's rate, duty and period are the lab's, not read
    assert "job H: all-to-all (declared) at" in out and "phases assumed" in out
    # nothing applied before: in force is OpenSM's default, every job on VL 0
    in_force = out.split("policy in force (all on VL 0)")[1].split("policy proposed")[0]
    rows = {m[0]: m[1:] for m in re.findall(r"^\s+(H|B)\s+\d+\s+(\d+)\s+(\d+)", in_force, re.M)}
    assert rows == {"H": ("0", "0"), "B": ("0", "0")}
    proposed = out.split("policy proposed")[1]
    vls = dict(re.findall(r"^\s+(H|B)\s+\d+\s+\d+\s+(\d+)", proposed, re.M))
    assert vls["H"] != vls["B"]  # the proposed plan separates the heavy job
    # a job that declares no traffic and sends nothing is said to be left out
    assert "job U: nothing measured to simulate, left out" in out
    assert out.rstrip().endswith("dry run: nothing written, OpenSM not signalled")


def test_simulate_needs_dry_run(make_lab, tmp_path):
    lab = make_lab("2;2,2;1,1", opensm_options=QUIET)
    config = agent_config(lab, tmp_path)
    out = lab.run(["ibqos", "run", "--config", str(config), "--simulate", "--once"])
    assert out.returncode == 2 and "--simulate needs --dry-run" in out.stderr
