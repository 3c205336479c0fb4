"""``ibqos run`` end to end on a lab: real OpenSM, ibsim, saquery/smpquery.

The agent runs as a process attached to the lab (as an admin would run it), while the test
drives the traffic model in real time and reads back what OpenSM serves and programmed.
"""

from __future__ import annotations

import signal
import subprocess
import time

from ibqos.opensm.conf import parse_conf
from tests.integration.labcheck import QUIET
from tests.support.agentrun import (
    ADMIN,
    JOB_B,
    JOB_C,
    LIGHT_A,
    admin_lines,
    agent_config,
    drive,
    lids,
    path_sl,
    spine,
    start_agent,
    state,
    vlarb_low,
    write_jobs,
)


def test_the_agent_plans_applies_and_follows_jobs(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A, JOB_B)
    conf = lab.paths.opensm.conf
    conf.write_text(conf.read_text() + ADMIN)
    before = admin_lines(conf.read_text())
    config = agent_config(lab, tmp_path)
    lid = lids(lab)
    proc = start_agent(lab, config, tmp_path)
    try:
        # jobs get SLs, and the SA serves each job's SL between two of its nodes
        drive(lab, lambda: {"A", "B"} <= set(state(tmp_path).get("job_sl", {})), 30, proc)
        sls = state(tmp_path)["job_sl"]
        assert sls["A"] != sls["B"] and 0 not in sls.values()  # SL 0 stays the default's
        drive(lab, lambda: path_sl(lab, lid["cn0001"], lid["cn0006"]) == sls["A"], 10, proc)
        assert path_sl(lab, lid["cn0003"], lid["cn0007"]) == sls["B"]

        # a job that starts is served its SL at once: time from the job file to the SA
        write_jobs(lab, LIGHT_A, JOB_B, JOB_C)
        t0 = time.monotonic()

        def c_served() -> bool:
            sl = state(tmp_path).get("job_sl", {}).get("C")
            return sl is not None and path_sl(lab, lid["cn0004"], lid["cn0008"]) == sl

        drive(lab, c_served, 15, proc)
        latency = time.monotonic() - t0
        print(f"job start -> SA serves its SL: {latency:.2f} s")
        assert latency < 5.0

        # A turns heavy: after the hold time it is high, on its own lane, with the least weight
        heavy_a = LIGHT_A | {"rate_bytes_per_s": 1.0e10}
        write_jobs(lab, heavy_a, JOB_B, JOB_C)

        def a_is_high() -> bool:
            jobs = {j["id"]: j for j in (state(tmp_path).get("plan") or {}).get("jobs", [])}
            return jobs.get("A", {}).get("class") == "high"

        drive(lab, a_is_high, 30, proc)
        plan = state(tmp_path)["plan"]
        jobs = {j["id"]: j for j in plan["jobs"]}
        vl_a, vl_b = jobs["A"]["vl"], jobs["B"]["vl"]
        assert vl_a != vl_b
        switch, port = spine(lab)
        drive(lab, lambda: state(tmp_path)["last_apply"]["ok"], 10, proc)
        table = vlarb_low(lab, switch, port)  # what the switch itself was programmed with
        assert table[vl_a] < table[vl_b], table
        out = lab.run(["smpquery", "sl2vl", str(switch), str(port)], check=True).stdout
        row = next(line for line in out.splitlines() if line.startswith("ports: in  0"))
        programmed = [int(x) for x in row.split(":", 2)[2].split("|") if x.strip()]
        assert programmed[jobs["A"]["sl"]] == vl_a

        # a job that ends loses its port-group
        assert "ibqos_job_C" in lab.paths.opensm.policy.read_text()
        write_jobs(lab, heavy_a, JOB_B)
        drive(lab, lambda: "ibqos_job_C" not in lab.paths.opensm.policy.read_text(), 10, proc)
        # ten cycles and more, then the admin's lines are checked
        agent_log = tmp_path / "agent.log"
        drive(
            lab, lambda: agent_log.read_text().count("ibqos.collect.loop: sweep:") >= 11, 30, proc
        )
    finally:
        assert proc.stop() == 0  # SIGTERM: the cycle ends, exit 0
    log = (tmp_path / "agent.log").read_text()
    cycles = log.count("ibqos.collect.loop: sweep:")
    assert cycles >= 10, log[-2000:]
    # the admin's lines survived every one of those cycles, byte for byte
    assert admin_lines(conf.read_text()) == before
    assert parse_conf(conf.read_text())["log_max_size"] == "0"
    assert "ERROR" not in log, log[-2000:]


def test_dry_run_writes_nothing_and_signals_nobody(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    config = agent_config(lab, tmp_path)
    files = [lab.paths.opensm.conf, lab.paths.opensm.policy]
    before = [f.read_bytes() for f in files]
    sweeps = lab.paths.opensm.log.read_text().count("SUBNET UP")
    out = lab.run(["ibqos", "run", "--config", str(config), "--dry-run", "--once"], check=True)
    assert "+# BEGIN ibqos managed keys" in out.stdout and "ibqos_job_A" in out.stdout
    assert out.stdout.rstrip().endswith("dry run: nothing written, OpenSM not signalled")
    assert [f.read_bytes() for f in files] == before
    time.sleep(1.0)
    assert lab.paths.opensm.log.read_text().count("SUBNET UP") == sweeps
    assert not (tmp_path / "state" / "state.json").exists()


def test_a_policy_opensm_rejects_is_rolled_back(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A)
    lab.reload_jobs()
    good = agent_config(lab, tmp_path)
    lab.run(["ibqos", "run", "--config", str(good), "--once"], check=True)
    sl_a = state(tmp_path)["job_sl"]["A"]
    lid = lids(lab)
    assert path_sl(lab, lid["cn0001"], lid["cn0006"]) == sl_a
    good_policy = lab.paths.opensm.policy.read_text()

    # forced: the reload command breaks the policy once before OpenSM reads it
    mark, policy, pid = tmp_path / "broken-once", lab.paths.opensm.policy, lab.paths.opensm.pid
    script = (
        f'if [ ! -e {mark} ]; then touch {mark}; printf "port-groups\\n" >> {policy}; fi;'
        f" kill -HUP $(cat {pid})"
    )
    bad = agent_config(
        lab, tmp_path, opensm={"pid_file": None, "reload_command": ["sh", "-c", script]}
    )
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    out = lab.run(["ibqos", "run", "--config", str(bad), "--once"])
    assert out.returncode == 0  # a failed apply is a soft failure: the daemon goes on
    assert "ERR AC0" in out.stderr and "rolled back" in out.stderr, out.stderr[-2000:]
    last = state(tmp_path)["last_apply"]
    assert last["rolled_back"] and not last["ok"]
    assert policy.read_text() == good_policy  # the last good policy, active again
    assert path_sl(lab, lid["cn0001"], lid["cn0006"]) == sl_a
    assert state(tmp_path)["job_sl"]["A"] == sl_a  # the restarted agent kept A's SL


def test_opensm_not_running_is_an_error_and_a_retry(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, LIGHT_A)
    lab.reload_jobs()
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file = tmp_path / "opensm.pid"
    pid_file.write_text(f"{dead.pid}\n")
    config = agent_config(lab, tmp_path, opensm={"pid_file": str(pid_file)})
    proc = start_agent(lab, config, tmp_path)
    try:
        log = tmp_path / "agent.log"
        drive(lab, lambda: log.read_text().count("sweep:") >= 4, 30, proc)
        text = log.read_text()
        assert text.count("OpenSM is not running") == 1, text  # logged once, retried
        assert f"pid {dead.pid} from {pid_file} does not exist" in text
        pid_file.write_text(lab.paths.opensm.pid.read_text())  # OpenSM is back
        drive(lab, lambda: (state(tmp_path).get("last_apply") or {}).get("ok") is True, 20, proc)
        # SIGHUP: a bad new config is rejected and the old one kept; a good one is taken
        good_text = config.read_text()
        config.write_text(good_text + "lanes: {weight_law: cubic}\n")
        proc.send_signal(signal.SIGHUP)
        drive(lab, lambda: "new config rejected" in log.read_text(), 10, proc)
        assert "lanes.weight_law: expected one of" in log.read_text()
        config.write_text(good_text.replace("job_poll_s: 0.2", "job_poll_s: 0.3"))
        proc.send_signal(signal.SIGHUP)
        drive(lab, lambda: f"config {config} re-read" in log.read_text(), 10, proc)
    finally:
        assert proc.stop() == 0


def test_dfsssp_routing_keeps_sl2vl_alone(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET | {"routing_engine": "dfsssp"})
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    config = agent_config(lab, tmp_path)
    out = lab.run(["ibqos", "run", "--config", str(config), "--dry-run", "--once"], check=True)
    assert "routing engine dfsssp owns SLs" in out.stdout + out.stderr
    assert "qos_swe_sl2vl" not in out.stdout and "qos_ca_vlarb_low" not in out.stdout
    assert "ibqos_job_A" in out.stdout  # the policy side still works
