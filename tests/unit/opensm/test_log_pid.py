"""OpenSM's log read as OpenSM means it (fatal or not), its pid told from a stale one, and
the reload budget's arithmetic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ibqos.config import parse_config
from ibqos.errors import ConfigError, OpenSMNotRunning, ReloadDeferred
from ibqos.opensm.apply import make_signaller
from ibqos.opensm.budget import ReloadBudget
from ibqos.opensm.osmlog import messages, read_since, where
from ibqos.opensm.pidcheck import opensm_pid, proc_info
from ibqos.opensm.signallers import Liveness, PidFileSignaller, UnitSignaller

STAMP = "Nov 26 10:00:00 123456 [7F1C2B3A] 0x01 -> "


def test_fatal_errors_and_warnings_are_told_apart_without_time_stamps() -> None:
    text = "".join(
        f"{STAMP}{line}\n"
        for line in (
            "osm_qos_policy_validate: ERR AC14: pkey 0x0123 in match rule"
            " - partition doesn't exist",
            # AC02's message has no newline: the next line runs on after it
            "__validate_pkeys: ERR AC02: pkey 0x0042 - partition doesn't exist"
            f"{STAMP}__qos_parser_error: ERR AC05: Syntax error (line 12:5): syntax error",
            "osm_qos_parse_policy_file: ERR AC03: Failed parsing QoS policy file"
            " (/etc/opensm/qos-policy.conf)",
            ' Unrecognized token: "qos_sw_sl2vl"',
            "SUBNET UP",
        )
    )
    errors, warnings = messages(text)
    assert errors == [
        "ERR AC05: Syntax error (line 12:5): syntax error",
        "ERR AC03: Failed parsing QoS policy file (/etc/opensm/qos-policy.conf)",
    ]
    assert warnings == [
        "ERR AC14: pkey 0x0123 in match rule - partition doesn't exist",
        "ERR AC02: pkey 0x0042 - partition doesn't exist",
        'Unrecognized token: "qos_sw_sl2vl"',
    ]
    assert where(errors) == "qos-policy.conf:12"
    assert where(["ERR AC11: qos-match-rule num 2: qos-level 'x' not found"]) is None
    assert where(["ERR AC01: Failed opening QoS policy file /etc/q.conf - No such file"]) == (
        "q.conf"
    )
    assert messages(f"{STAMP}ERR AC02: Failed opening QoS policy file (/q)\n")[0]  # fatal
    assert messages("Error in QoS Policy File (line 3:1): syntax error.\n")[0] == [
        "Error in QoS Policy File (line 3:1): syntax error."
    ]


def test_the_log_is_read_from_an_offset_or_whole_after_a_rotation(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text(f"{STAMP}ERR AC05: old error\n" * 5)
    offset = log.stat().st_size
    with open(log, "a") as fh:
        fh.write(f"{STAMP}SUBNET UP\n")
    report = read_since(log, offset)
    assert report.swept and report.errors == ()
    log.write_text(f"{STAMP}ERR AC04: Error(s) in QoS policy file (/q)\n")  # rotated: shorter
    assert read_since(log, offset).errors == ("ERR AC04: Error(s) in QoS policy file (/q)",)
    assert read_since(tmp_path / "none", 0).swept is False


def test_proc_info_falls_back_to_comm_and_drops_deleted(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    ticks = 100 * os.sysconf("SC_CLK_TCK")  # 100 s after boot
    fields = " ".join(["S", *["0"] * 18, str(ticks), "0"])
    (proc / "4242" / "stat").write_text(f"4242 (open sm) {fields}\n")
    (proc / "4242" / "comm").write_text("opensm\n")  # exe unreadable: comm
    info = proc_info(4242, proc)
    assert info is not None and (info.name, info.start_s) == ("opensm", 1700000100.0)
    (proc / "4242" / "exe").symlink_to("/usr/sbin/opensm (deleted)")  # upgraded package
    assert proc_info(4242, proc).name == "opensm"  # type: ignore[union-attr]
    (proc / "4242" / "stat").write_text(f"4242 (opensm) Z {fields[2:]}\n")
    assert proc_info(4242, proc) is None  # a zombie has exited
    pid_file = tmp_path / "opensm.pid"
    pid_file.write_text("4242\n")
    with pytest.raises(OpenSMNotRunning, match="does not exist"):
        opensm_pid(pid_file, proc)
    pid_file.write_text("1\n")
    with pytest.raises(OpenSMNotRunning, match="expected a pid, got '1'"):
        opensm_pid(pid_file, proc)


def test_the_unit_is_preferred_and_the_budget_config_is_checked() -> None:
    cfg = parse_config({"opensm": {"unit": "opensm@0x1.service"}}, "c.yaml")
    signaller = make_signaller(cfg.opensm)
    assert isinstance(signaller, UnitSignaller) and signaller.unit == "opensm@0x1.service"
    assert signaller.argv[:4] == ("systemctl", "kill", "--signal=SIGHUP", "--kill-whom=main")
    cfg = parse_config({"opensm": {"pid_file": "/run/opensm.pid"}}, "c.yaml")
    assert make_signaller(cfg.opensm) == PidFileSignaller(Path("/run/opensm.pid"))
    assert (cfg.opensm.reload_budget.burst, cfg.opensm.reload_budget.per_minute) == (6, 2.0)
    cfg = parse_config({"opensm": {"reload_budget": {"burst": 3, "per_minute": 0.5}}}, "c.yaml")
    assert cfg.opensm.reload_budget.burst == 3
    for bad, message in (
        ({"burst": 1}, "opensm.reload_budget.burst: expected an integer >= 2"),
        ({"per_minute": 0}, "opensm.reload_budget.per_minute: expected a number >= 0.01"),
        ({"bursts": 4}, "opensm.reload_budget.bursts: unknown key"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_config({"opensm": {"reload_budget": bad}}, "c.yaml")


def test_the_budget_refills_and_carries_over() -> None:
    now = [0.0]
    budget = ReloadBudget(4, 6.0, clock=lambda: now[0])  # one every 10 s
    for _ in range(3):
        budget.take()
    assert budget.tokens() == 1.0 and budget.wait_s() == pytest.approx(10.0)
    with pytest.raises(ReloadDeferred, match="next reload in 10 s") as info:
        budget.check()
    assert info.value.retry_in_s == pytest.approx(10.0)
    now[0] += 100.0
    assert budget.tokens() == 4.0  # never more than the burst
    budget.check()
    budget.take()
    fresh = ReloadBudget(2, 1.0, clock=lambda: now[0])
    fresh.carry(budget)  # a config reload neither refills nor empties the bucket
    assert fresh.tokens() == 2.0  # but holds no more than its own burst


def test_the_unit_signaller_asks_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake systemctl on the PATH: is-active's answer, and the kill's arguments."""
    calls = tmp_path / "calls"
    state = tmp_path / "state"
    fake = tmp_path / "systemctl"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'if [ "$1" = is-active ]; then read s < {state}; echo "$s";'
        ' [ "$s" = active ] && exit 0 || exit 3; fi\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    unit = UnitSignaller("opensm@0x1.service")
    state.write_text("active\n")
    assert unit.alive().up is True
    state.write_text("inactive\n")
    assert unit.alive() == Liveness(False, "OpenSM is not running (opensm@0x1.service is inactive)")
    unit.signal()
    assert calls.read_text().splitlines()[-1] == (
        "kill --signal=SIGHUP --kill-whom=main opensm@0x1.service"
    )
    fake.unlink()
    live = unit.alive()
    assert live.up is None and "not found" in live.detail  # no systemctl: cannot tell
