"""The ibqos command line: bad input gives one line naming the input, exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ibqos.cli import cli

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("IBQOS_LAB_ROOT", str(tmp_path / "labs"))

    def invoke(*args):
        return CliRunner().invoke(cli, list(args))

    return invoke


def one_line_error(result, *needles):
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("2;8,4", "expected 'H;m1,..,mH;w1,..,wH'"),
        ("2;8,4;1", "needs 2 m values and 2 w values"),
        ("2;8,0;1,2", "at least 1"),
        ("two;8,4;1,2", "expected"),
    ],
)
def test_malformed_xgft(run, spec, why):
    line = one_line_error(run("lab", "up", "--name", "x", "--xgft", spec), why)
    assert line.startswith("ibqos: topology: --xgft ") and spec in line


def test_job_naming_unknown_host(run, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n  - {id: '1', nodes: 'cn[0001-0004],cn0099', pattern: ring,\n"
        "     rate_bytes_per_s: 1.0e9, duty: 0.5, period_s: 0.1}\n"
    )
    result = run("lab", "up", "--name", "x", "--xgft", "2;4,2;1,2", "--jobs", str(jobs))
    one_line_error(result, str(jobs), "unknown host cn0099", "id 1")
    assert not (tmp_path / "labs" / "x").exists()  # nothing started, nothing left


def test_unparsable_topology(run, tmp_path):
    bad = tmp_path / "bad.net"
    bad.write_text('Switch 4 "S1"\n[1] "H1"[1]\nthis is not a topology line\n')
    one_line_error(run("lab", "up", "--name", "x", "--topology", str(bad)), f"{bad}:3")


def test_topology_link_to_unknown_node(run, tmp_path):
    bad = tmp_path / "bad.net"
    bad.write_text('Switch 4 "S1"\n[1] "H9"[1]\n\nHca 1 "H1"\n[1] "S1"[2]\n')
    one_line_error(run("lab", "up", "--name", "x", "--topology", str(bad)), "H9")


def test_missing_topology_file(run, tmp_path):
    one_line_error(
        run("lab", "up", "--name", "x", "--topology", str(tmp_path / "nope.net")),
        "nope.net",
        "cannot read",
    )


def test_speed_ibsim_cannot_simulate(run):
    one_line_error(run("lab", "up", "--name", "x", "--xgft", "2;4,2;1,2", "--speed", "NDR"), "NDR")


@pytest.mark.parametrize("args", [(), ("--xgft", "2;4,2;1,2", "--topology", "f.net")])
def test_needs_exactly_one_fabric(run, args):
    result = run("lab", "up", "--name", "x", *args)
    assert result.exit_code == 2
    assert "exactly one of --xgft and --topology" in result.stderr


def test_bad_lab_name(run):
    one_line_error(run("lab", "up", "--name", "no/slash", "--xgft", "1;4;1"), "no/slash")


@pytest.mark.parametrize(
    "command",
    [
        ("status", "ghost"),
        ("down", "ghost"),
        ("opensm", "stop", "ghost"),
        ("opensm", "restart", "ghost"),
        ("link", "down", "ghost", "cn0001[1]"),
    ],
)
def test_unknown_lab(run, command):
    one_line_error(run("lab", *command), "no lab ghost")


def test_malformed_link_target(run):
    one_line_error(run("lab", "link", "up", "ghost", "cn0001[x"), "cn0001[x", "NODE[PORT]")


def test_run_on_unknown_lab(run):
    one_line_error(run("lab", "run", "ghost", "--", "true"), "no lab ghost")


def test_config_unknown_key(run, tmp_path):
    conf = tmp_path / "ibqos.yaml"
    conf.write_text("opensm:\n  conf: /etc/opensm/opensm.conf\n  polcy_file: x\n")
    line = one_line_error(run("config", "--config", str(conf)), "opensm.polcy_file")
    assert line.startswith(f"ibqos: config: {conf}: ")


def test_config_defaults(run, tmp_path):
    conf = tmp_path / "ibqos.yaml"
    conf.write_text("jobs:\n  path: /srv/jobs\n")
    result = run("config", "--config", str(conf))
    assert result.exit_code == 0
    assert "path: /srv/jobs" in result.output
    assert "policy_file: /etc/opensm/qos-policy.conf" in result.output


def test_check_opensm_passes_good_files_and_names_the_trap_in_bad_ones(run) -> None:
    golden = DATA / "opensm" / "golden"
    ok = run("check-opensm", str(golden / "opensm.conf"), str(golden / "qos-policy.conf"))
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines() == [
        f"{golden / 'opensm.conf'}: ok",
        f"{golden / 'qos-policy.conf'}: ok",
    ]
    bad = DATA / "opensm" / "keyword-in-name" / "qos-policy.conf"
    result = run("check-opensm", str(bad))
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {bad}:13:")  # OpenSM's AC05 said line 13 too


def test_check_config(run, tmp_path) -> None:
    example = Path(__file__).resolve().parents[2] / "opensm_conf" / "ibqos.yaml"
    assert run("check-config", "--syntax-only", str(example)).output == f"{example}: ok\n"
    bad = tmp_path / "c.yaml"
    bad.write_text("lanes:\n  data_vls: 16\n")
    one_line_error(run("check-config", str(bad)), f"{bad}: lanes.data_vls: expected an integer")


def test_check_config_looks_at_what_the_config_points_at(run, tmp_path) -> None:
    """Valid, but OpenSM's files and the job file are not there: the agent's first cycle
    would fail, so the check does."""
    cfg = tmp_path / "c.yaml"
    osm = tmp_path / "opensm"
    cfg.write_text(
        f"opensm:\n  conf: {osm}/opensm.conf\n  log: {osm}/opensm.log\n"
        f"  policy_file: {osm}/qos-policy.conf\n"
        f"jobs:\n  path: {tmp_path}/jobs.yaml\n"
        f"agent:\n  state_dir: {tmp_path}/state\n  socket: {tmp_path}/s.sock\n"
        "metrics:\n  listen: ''\n"
    )
    result = run("check-config", str(cfg))
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"error: opensm.conf: {osm}/opensm.conf: no such file (OpenSM reads it at start and"
        " at every SIGHUP; ibqos adds its QoS keys to the admin's file)",
        f"error: opensm.conf: {osm}: no such directory",
        f"error: jobs.path: {tmp_path}/jobs.yaml: cannot read job file: No such file or directory",
        f"warning: opensm.log: {osm}/opensm.log: no such file (OpenSM's errors after a reload"
        " are then seen only by verification, after a fixed wait)",
    ]
    osm.mkdir()
    (osm / "opensm.conf").write_text("")
    (osm / "opensm.log").write_text("")
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    assert run("check-config", str(cfg)).output == f"{cfg}: ok\n"


def test_status_reads_the_state_dir(run, tmp_path) -> None:
    from ibqos.agent.state import AgentState, save_state

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"agent:\n  state_dir: {tmp_path / 'state'}\n")
    for fmt in ("table", "json"):  # a health check must not pass where no agent ran
        result = run("status", "--config", str(cfg), "--format", fmt)
        assert result.stdout == ""
        one_line_error(result, f"ibqos: state: {tmp_path / 'state'}: no agent state")
    plan = {
        "jobs": [{"id": "7", "name": "ft", "intensity": 0.5, "class": "high", "sl": 1, "vl": 1}],
        "lanes": [{"vl": 1, "weight": 32, "sls": [1], "jobs": ["7"]}],
    }
    last = {"summary": "applied qos-policy.conf, sweep 0.1 s", "ok": True}
    save_state(tmp_path / "state", AgentState({"7": 1}, {"7": "high"}, {}, plan, last, 1.0))
    out = run("status", "--config", str(cfg)).output
    assert out.splitlines()[1] == "mode: enforce"
    assert "last apply: applied qos-policy.conf, sweep 0.1 s" in out
    assert out.splitlines()[3].split() == ["JOB", "NAME", "INTENSITY", "CLASS", "SL", "VL"]
    assert out.splitlines()[4].split() == ["7", "ft", "50.0%", "high", "1", "1"]
    doc = json.loads(run("status", "--config", str(cfg), "--format", "json").output)
    assert doc["plan"] == plan and doc["last_apply"] == last and doc["mode"] == "enforce"
    observing = AgentState({"7": 1}, {"7": "high"}, {}, plan, last, 2.0, mode="observe")
    save_state(tmp_path / "state", observing)
    doc = json.loads(run("status", "--config", str(cfg), "--format", "json").output)
    assert doc["mode"] == "observe"
    assert (
        run("status", "--config", str(cfg))
        .output.splitlines()[1]
        .startswith("mode: observe (the plan below is proposed")
    )


def test_status_shows_a_hold_until_the_files_change(run, tmp_path) -> None:
    from ibqos.agent.state import AgentState, save_state
    from ibqos.opensm.hold import HOLD_FILE, Hold, save_hold

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"agent:\n  state_dir: {tmp_path / 'state'}\n")
    save_state(tmp_path / "state", AgentState(updated_s=1.0))
    policy = tmp_path / "qos-policy.conf"
    policy.write_text("qos-ulps\n    ipoib, pkey 0x0123 : 3\nend-qos-ulps\n")
    reason = "qos-policy.conf:2: ERR AC05: IPoIB partition, pkey 0x0123 - partition doesn't exist"
    save_hold(tmp_path / "state" / HOLD_FILE, Hold.begin(reason, [policy]))
    held = [ln for ln in run("status", "--config", str(cfg)).output.splitlines() if "HELD" in ln]
    assert len(held) == 1 and reason in held[0] and str(policy) in held[0]
    policy.write_text("")  # the admin fixed it: the next apply tries again
    assert "HELD" not in run("status", "--config", str(cfg)).output


def test_check_opensm_reads_the_partitions_opensm_reads(run, tmp_path) -> None:
    policy = tmp_path / "qos-policy.conf"
    policy.write_text(
        "qos-levels\n  qos-level\n    name: DEFAULT\n    sl: 0\n  end-qos-level\n"
        "end-qos-levels\nqos-ulps\n  ipoib, pkey 0x0123 : 4\nend-qos-ulps\n"
    )
    conf = tmp_path / "opensm.conf"
    conf.write_text(f"qos TRUE\npartition_config_file {tmp_path / 'partitions.conf'}\n")
    # no partition file: OpenSM has only Default, and drops the policy at line 8
    result = run("check-opensm", str(conf), str(policy))
    assert result.exit_code == 1
    assert result.output.splitlines()[1].startswith(f"error: {policy}:8: qos-ulps 'ipoib, pkey'")
    (tmp_path / "partitions.conf").write_text("P1=0x0123 : ALL=full ;\n")
    assert run("check-opensm", str(conf), str(policy)).exit_code == 0
    other = tmp_path / "other.conf"
    other.write_text("P2=0x0456 : ALL=full ;\n")
    assert run("check-opensm", "--partitions", str(other), str(policy)).exit_code == 1
