"""``ibqos run`` end to end on a lab: real OpenSM, ibsim, saquery/smpquery.

The agent runs as a process attached to the lab (as an admin would run it), while the test
drives the traffic model in real time and reads back what OpenSM serves and programmed.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from labcheck import QUIET

from ibqos.fsio import atomic_write
from ibqos.lab.fabric import fabric_from_lab
from ibqos.opensm.conf import managed_keys, parse_conf

LIGHT_A = {"id": "A", "name": "ft", "nodes": "cn[0001-0002,0005-0006]", "pattern": "all-to-all"}
LIGHT_A |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}
JOB_B = {"id": "B", "name": "pairs", "nodes": "cn[0003,0007]", "pattern": "ring"}
JOB_B |= {"rate_bytes_per_s": 2.0e8, "duty": 1.0, "period_s": 0.1}
JOB_C = {"id": "C", "name": "late", "nodes": "cn[0004,0008]", "pattern": "ring"}
JOB_C |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}
ADMIN = "# the admin's own lines, which ibqos must keep\nlog_max_size 0\n"


def write_jobs(lab, *jobs: dict) -> None:
    atomic_write(lab.paths.jobs, yaml.safe_dump({"jobs": list(jobs)}, sort_keys=False))


def agent_config(lab, tmp_path: Path, **extra: object) -> Path:
    doc = yaml.safe_load(lab.paths.config.read_text())
    doc |= {
        "collect": {"interval_s": 1.0},
        "classify": {"tau_s": 0.0},
        "lanes": {"min_hold_s": 2.0, "min_interval_s": 0.0},
        # no SL socket: the default /run/ibqos/ibqos.sock would be shared by agents
        # that run at once (test_slurm_lab.py serves its own)
        "agent": {"state_dir": str(tmp_path / "state"), "job_poll_s": 0.2, "socket": ""},
        "metrics": {"listen": "127.0.0.1:0"},  # any free port: tests never collide on one
    }
    for key, value in extra.items():
        doc.setdefault(key, {}).update(value)
    path = tmp_path / "ibqos.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def state(tmp_path: Path) -> dict:
    try:
        return json.loads((tmp_path / "state" / "state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def lids(lab) -> dict[str, int]:
    """Host name -> LID of its CA port."""
    fabric = fabric_from_lab(lab)
    return {
        fp.node_desc.split()[0]: fp.lid
        for fp in fabric.ports.values()
        if not fp.is_switch and fp.lid is not None
    }


def path_sl(lab, slid: int, dlid: int) -> int | None:
    out = lab.run(["saquery", "PR", "--slid", str(slid), "--dlid", str(dlid)]).stdout
    m = re.search(r"^\s*sl\.+0x([0-9a-fA-F]+)", out, re.M)
    return None if m is None else int(m.group(1), 16)


def drive(lab, until: Callable[[], bool], timeout: float, proc=None) -> float:
    """Tick the lab in real time until *until* holds; return the seconds it took."""
    t0 = last = time.monotonic()
    while not until():
        now = time.monotonic()
        assert now - t0 < timeout, f"not reached within {timeout} s"
        assert proc is None or proc.poll() is None, "the agent died"
        lab.reload_jobs()
        lab.tick(now - last)
        last = now
        time.sleep(0.1)
    return time.monotonic() - t0


def start_agent(lab, config: Path, tmp_path: Path, *args: str) -> subprocess.Popen:
    err = open(tmp_path / "agent.log", "w")
    proc = subprocess.Popen(
        ["ibqos", "run", "--config", str(config), *args],
        env=lab.env(),
        cwd=lab.paths.run,
        stdout=subprocess.DEVNULL,
        stderr=err,
        text=True,
    )
    proc.log_file = err  # type: ignore[attr-defined]
    return proc


def stop_agent(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.log_file.close()  # type: ignore[attr-defined]


def admin_lines(text: str) -> list[str]:
    """opensm.conf without ibqos's block and the keys it manages (``qos`` and the
    ``qos_ca_*``/``qos_swe_*`` keys, which move into the block)."""
    managed = set(managed_keys(("ca", "swe")))
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("# BEGIN ibqos"):
            inside = True
        elif line.startswith("# END ibqos"):
            inside = False
        elif not inside and line.split(maxsplit=1)[:1] != [] and line.split()[0] in managed:
            continue
        elif not inside:
            out.append(line)
    return out


def vlarb_low(lab, lid: int, port: int) -> dict[int, int]:
    """VL -> weight of a port's low VLArb table, read from the switch (smpquery)."""
    out = lab.run(["smpquery", "vlarb", str(lid), str(port)], check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith(("VL", "WEIGHT"))][:2]
    vls, weights = ([int(x, 16) for x in re.findall(r"0x[0-9a-f]+", row)] for row in rows)
    table: dict[int, int] = {}
    for vl, weight in zip(vls, weights, strict=True):
        table[vl] = table.get(vl, 0) + weight
    return table


def spine(lab) -> tuple[int, int]:
    fabric = fabric_from_lab(lab)
    fp = next(fp for fp in fabric.ports.values() if fp.is_switch and fp.level == fabric.height)
    assert fp.lid is not None
    return fp.lid, fp.num


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
        assert stop_agent(proc) == 0  # SIGTERM: the cycle ends, exit 0
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
        assert stop_agent(proc) == 0


def test_dfsssp_routing_keeps_sl2vl_alone(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET | {"routing_engine": "dfsssp"})
    write_jobs(lab, LIGHT_A, JOB_B)
    lab.reload_jobs()
    config = agent_config(lab, tmp_path)
    out = lab.run(["ibqos", "run", "--config", str(config), "--dry-run", "--once"], check=True)
    assert "routing engine dfsssp owns SLs" in out.stdout + out.stderr
    assert "qos_swe_sl2vl" not in out.stdout and "qos_ca_vlarb_low" not in out.stdout
    assert "ibqos_job_A" in out.stdout  # the policy side still works
