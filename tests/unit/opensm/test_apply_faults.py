"""The apply path under faults: OpenSM rejecting the admin's lines, a full disk, a stale pid
file, OpenSM stopped or dying, no log, a stop mid-apply; each visible in the counters."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import ibqos.opensm.apply as apply_module
from ibqos.agent.sinks import enforce
from ibqos.errors import (
    ApplyError,
    ApplyWriteError,
    OpenSMHeld,
    OpenSMNotRunning,
    ReloadDeferred,
)
from ibqos.metrics import AgentMetrics, Counters
from ibqos.opensm.apply import Applier
from ibqos.opensm.budget import ReloadBudget
from ibqos.opensm.outcome import ApplyOutcome
from ibqos.opensm.signallers import Liveness, PidFileSignaller

ADMIN_POLICY = (
    "qos-ulps\ndefault : 0\nipoib, pkey 0x0123 : 3\nend-qos-ulps\n"  # line 3: no partition
)
GOOD_POLICY = "qos-ulps\ndefault : 0\nend-qos-ulps\n"
STAMP = "Nov 26 10:00:00 123456 [7F1C2B3A] 0x01 -> "


class FakeOpenSM:
    """Signalled like OpenSM: reads the policy on disk and logs what OpenSM would."""

    def __init__(self, log: Path, policy: Path) -> None:
        self.log = log
        self.policy = policy
        self.calls = 0
        self.up: bool | None = True
        self.sweeps = True
        self.dies = False  # exits on the next signal, without a sweep
        self.warn = ""  # a non-fatal error logged at every sweep
        self.on_signal: Callable[[], None] = lambda: None

    def describe(self) -> str:
        return "fake OpenSM"

    def alive(self) -> Liveness:
        detail = "pid 4242" if self.up else "OpenSM is not running: pid 4242 does not exist"
        return Liveness(self.up, detail)

    def signal(self) -> None:
        self.calls += 1
        self.on_signal()
        if self.dies:
            self.up = False
            return
        lines = []
        if "pkey 0x0123" in self.policy.read_text():
            lines += [
                "__qos_parser_error: ERR AC05: Syntax error (line 3:22): IPoIB partition,"
                " pkey 0x0123 - partition doesn't exist",
                "osm_qos_parse_policy_file: ERR AC03: Failed parsing QoS policy file"
                f" ({self.policy})",
            ]
        if self.warn:
            lines.append(self.warn)
        if self.sweeps:
            lines.append("SUBNET UP")
        if self.log.parent.is_dir() and lines:
            with open(self.log, "a") as fh:
                fh.writelines(f"{STAMP}{line}\n" for line in lines)


def make(
    tmp_path: Path, policy_text: str = GOOD_POLICY, **kwargs: object
) -> tuple[Applier, FakeOpenSM, Path, Path]:
    etc = tmp_path / "etc"
    etc.mkdir()
    conf, policy, log = etc / "opensm.conf", etc / "qos-policy.conf", tmp_path / "opensm.log"
    conf.write_text("# admin\nqos TRUE\n")
    policy.write_text(policy_text)
    log.write_text(f"{STAMP}SUBNET UP\n")
    osm = FakeOpenSM(log, policy)
    args: dict[str, object] = {"sweep_timeout_s": 1.0, "hold_file": tmp_path / "hold.json"}
    args.update(kwargs)
    applier = Applier(tmp_path / "state", osm, log, **args)  # type: ignore[arg-type]
    return applier, osm, conf, policy


def files(conf: Path, policy: Path, n: int) -> dict[Path, str | None]:
    """What ibqos would render at its *n*-th plan: its own keys, the admin's policy."""
    return {conf: f"# admin\nqos TRUE\nqos_swe_sl2vl {n}\n", policy: policy.read_text()}


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------ reload storm, hold


def test_a_rejected_admin_line_holds_instead_of_retrying(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenSM rejects the admin's IPoIB rule in the new files and in the previous ones:
    one apply and one rollback, then nothing is written or signalled until the admin
    edits the files; the errors are logged once, without OpenSM's time stamps."""
    applier, osm, conf, policy = make(tmp_path, ADMIN_POLICY)
    caplog.set_level(logging.WARNING)
    result = applier.apply(files(conf, policy, 1))
    assert not result.ok and result.rolled_back and osm.calls == 2
    assert result.held is not None and applier.held == result.held
    assert "qos-policy.conf:3" in result.held and "ERR AC05" in result.held
    assert "held" in result.summary() and "ERR AC05" in result.summary()
    assert conf.read_text() == "# admin\nqos TRUE\n"  # the previous file back
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [e for e in errors if "Nov 26" in e]  # OpenSM's time stamps are stripped
    assert sum("holding" in e for e in errors) == 1
    caplog.clear()
    for n in range(2, 6):  # later cycles, later plans: refused, nothing touched
        with pytest.raises(OpenSMHeld, match=r"held, nothing written: OpenSM rejects"):
            applier.apply(files(conf, policy, n))
    assert osm.calls == 2 and conf.read_text() == "# admin\nqos TRUE\n"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # a restarted agent reads the hold back
    again = Applier(tmp_path / "state", osm, osm.log, hold_file=tmp_path / "hold.json")
    assert again.held == applier.held
    with pytest.raises(OpenSMHeld):
        again.apply(files(conf, policy, 6))
    # the admin fixes the rule: tried once more, and it works
    policy.write_text(GOOD_POLICY)
    result = again.apply(files(conf, policy, 7))
    assert result.ok and again.held is None and osm.calls == 3
    assert not (tmp_path / "hold.json").exists()


def test_a_non_fatal_error_is_a_warning_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ERR AC14 (a match rule's pkey without a partition) does not stop OpenSM's policy:
    the apply stands, and the warning is logged once however often it comes back."""
    applier, osm, conf, policy = make(tmp_path)
    osm.warn = (
        "osm_qos_policy_validate: ERR AC14: pkey 0x0123 in match rule - partition doesn't exist"
    )
    caplog.set_level(logging.WARNING)
    first = applier.apply(files(conf, policy, 1))
    second = applier.apply(files(conf, policy, 2))
    assert first.ok and second.ok and not first.rolled_back and osm.calls == 2
    assert first.warnings == ("ERR AC14: pkey 0x0123 in match rule - partition doesn't exist",)
    assert "OpenSM warns: ERR AC14" in first.summary()
    assert sum("ERR AC14" in r.getMessage() for r in caplog.records) == 1


def test_the_reload_budget_defers_applies_and_counts_rollbacks(tmp_path: Path) -> None:
    now = [0.0]
    budget = ReloadBudget(2, 1.0, clock=lambda: now[0])
    applier, osm, conf, policy = make(tmp_path, budget=budget)
    counters = Counters()
    assert enforce(applier, files(conf, policy, 1), None, counters).ok  # 2 -> 1 token
    before = conf.read_text()
    with pytest.raises(ReloadDeferred, match=r"reload budget spent: next reload in 60 s"):
        enforce(applier, files(conf, policy, 2), None, counters)  # 1 leaves no rollback
    assert conf.read_text() == before and osm.calls == 1
    assert (counters.reloads_deferred, counters.reloads, counters.reload_tokens) == (1, 1, 1.0)
    now[0] += 30.0
    with pytest.raises(ReloadDeferred, match=r"next reload in 30 s"):
        enforce(applier, files(conf, policy, 2), None, counters)
    now[0] += 30.0
    result = enforce(applier, files(conf, policy, 2), lambda: ["SL2VL differs"], counters)
    assert result.rolled_back and osm.calls == 3  # the rollback's signal costs one too
    assert counters.reloads == 3 and counters.reload_tokens == 0.0
    assert counters.reloads_deferred == 2 and counters.rollbacks == 1


# ------------------------------------------------------------------ write errors


def _fail_in(directory: Path, call: str, err: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make os.write (on fds of files in *directory*) or os.open (of new files there)
    fail with *err*, as a full disk or a read-only directory would."""
    inside = str(directory) + os.sep
    if call == "write":
        real_write = os.write

        def write(fd: int, data: bytes) -> int:
            if str(Path(f"/proc/self/fd/{fd}").readlink()).startswith(inside):
                raise OSError(err, os.strerror(err))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
    else:
        real_open = os.open

        def open_(path: str | os.PathLike[str], flags: int, *args: int, **kw: object) -> int:
            if str(path).startswith(inside) and flags & os.O_CREAT:
                raise OSError(err, os.strerror(err), str(path))
            return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize(
    ("call", "err", "words"),
    [("write", errno.ENOSPC, "No space left on device"), ("open", errno.EACCES, "Permission")],
)
def test_a_file_that_cannot_be_written_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, err: int, words: str
) -> None:
    applier, osm, conf, policy = make(tmp_path)
    counters = Counters()
    before = (conf.read_text(), policy.read_text())
    _fail_in(tmp_path / "etc", call, err, monkeypatch)
    with pytest.raises(ApplyWriteError, match=rf"cannot write {tmp_path}/etc/\S+: {words}"):
        enforce(applier, {conf: "qos TRUE\nqos_swe_sl2vl 1\n", policy: "x\n"}, None, counters)
    assert (conf.read_text(), policy.read_text()) == before and osm.calls == 0
    assert leftovers(tmp_path / "etc") == [] and counters.write_errors == 1


def test_a_rollback_needs_no_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up while OpenSM reads the new files: the previous ones go back by
    rename all the same, and nothing is left beside them."""
    applier, osm, conf, policy = make(tmp_path)
    before = conf.read_text()
    osm.on_signal = lambda: _fail_in(tmp_path / "etc", "write", errno.ENOSPC, monkeypatch)
    result = applier.apply(files(conf, policy, 1), lambda: ["SL2VL differs"])
    assert result.rolled_back and conf.read_text() == before and osm.calls == 2
    assert leftovers(tmp_path / "etc") == []


def test_backups_and_unreadable_files_are_soft_errors(tmp_path: Path) -> None:
    applier, osm, conf, policy = make(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "backup").write_text("not a directory")
    with pytest.raises(ApplyWriteError, match=r"cannot keep a backup in .*; nothing written"):
        applier.apply(files(conf, policy, 1))
    (tmp_path / "state" / "backup").unlink()
    shutil.rmtree(tmp_path / "etc")
    conf.parent.mkdir()
    conf.mkdir()  # a directory where opensm.conf should be: read_text fails
    with pytest.raises(ApplyError, match="Is a directory"):
        applier.apply({conf: "qos TRUE\n"})
    assert osm.calls == 0


# ------------------------------------------------------------------ OpenSM's process


def _sleeper(tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    exe = tmp_path / name
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", exe)
    return subprocess.Popen([str(exe), "30"])


def test_a_pid_that_is_not_opensm_is_not_signalled(tmp_path: Path) -> None:
    """A stale pid file whose pid now belongs to another process: not signalled, nothing
    written; the same for an OpenSM-named process that started after the file."""
    applier, _, conf, policy = make(tmp_path)
    pid_file = tmp_path / "opensm.pid"
    applier.signaller = PidFileSignaller(pid_file)
    decoy = _sleeper(tmp_path, "sleep")
    late = _sleeper(tmp_path, "opensm")
    try:
        before = conf.read_text()
        pid_file.write_text(f"{decoy.pid}\n")
        with pytest.raises(
            OpenSMNotRunning,
            match=rf"pid {decoy.pid} in {pid_file} is not OpenSM \(it is 'sleep'\)",
        ):
            applier.apply(files(conf, policy, 1))
        assert decoy.poll() is None and conf.read_text() == before and applier.opensm_up is False
        pid_file.write_text(f"{late.pid}\n")
        old = time.time() - 600
        os.utime(pid_file, (old, old))  # written long before the process started
        with pytest.raises(OpenSMNotRunning, match="a stale pid file"):
            applier.apply(files(conf, policy, 1))
        assert late.poll() is None and conf.read_text() == before
        pid_file.write_text(f"{late.pid}\n")  # written after it started: OpenSM's
        assert PidFileSignaller(pid_file).alive() == Liveness(True, f"pid {late.pid}")
    finally:
        for child in (decoy, late):
            child.kill()
            child.wait()


def test_a_stopped_opensm_is_reported_and_nothing_written(tmp_path: Path) -> None:
    applier, osm, conf, policy = make(tmp_path)
    counters = Counters()
    osm.up = False
    before = conf.read_text()
    with pytest.raises(OpenSMNotRunning, match=r"OpenSM is not running: .*; nothing written"):
        enforce(applier, files(conf, policy, 1), None, counters)
    assert conf.read_text() == before and osm.calls == 0 and counters.opensm_up is False
    osm.up = True
    assert enforce(applier, files(conf, policy, 1), None, counters).ok
    assert counters.opensm_up is True


def test_opensm_dying_after_the_signal_gets_the_previous_files_unsignalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_module, "PROBE_EVERY_S", 0.1)
    applier, osm, conf, policy = make(tmp_path, sweep_timeout_s=30.0)
    osm.dies = True
    before = conf.read_text()
    t0 = time.monotonic()
    result = applier.apply(files(conf, policy, 1))
    assert time.monotonic() - t0 < 5  # not the 30 s sweep timeout, nor a second one
    assert result.outcome is ApplyOutcome.OPENSM_EXITED and result.rolled_back and not result.ok
    assert conf.read_text() == before and osm.calls == 1 and applier.opensm_up is False
    assert result.summary().startswith("OpenSM exited after the signal: opensm.conf put back")


# ------------------------------------------------------------------ the log, deadlines


def test_without_a_log_the_apply_settles_and_relies_on_the_verifier(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    applier, osm, conf, policy = make(tmp_path, settle_s=0.2)
    applier.log_path = tmp_path / "gone" / "opensm.log"
    osm.log = applier.log_path
    checked: list[int] = []
    caplog.set_level(logging.WARNING)
    t0 = time.monotonic()
    result = applier.apply(files(conf, policy, 1), lambda: checked.append(1) or [])
    assert result.ok and result.log_missing and checked == [1] and applier.log_missing
    assert time.monotonic() - t0 < 1.0 and "no OpenSM log: waited 2 s" in result.summary()
    result = applier.apply(files(conf, policy, 2), lambda: ["SL2VL differs"])
    assert result.rolled_back and result.problems == ("SL2VL differs",) and osm.calls == 3
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 1


def test_the_heartbeat_beats_during_every_wait(tmp_path: Path) -> None:
    beats: list[float] = []
    applier, osm, conf, policy = make(tmp_path, heartbeat=lambda: beats.append(time.monotonic()))
    osm.sweeps = False  # the apply's wait and the rollback's run to their timeout
    result = applier.apply(files(conf, policy, 1))
    assert not result.ok and "no heavy sweep" in result.problems[-1]
    assert len(beats) > 20 and max(b - a for a, b in itertools.pairwise(beats)) < 0.5


def test_a_stop_cuts_the_wait_and_puts_the_previous_files_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_module, "STOP_GRACE_S", 0.3)
    t0 = time.monotonic()
    applier, osm, conf, policy = make(
        tmp_path, sweep_timeout_s=30.0, should_stop=lambda: time.monotonic() - t0 > 0.2
    )
    osm.sweeps = False
    before = conf.read_text()
    result = applier.apply(files(conf, policy, 1))
    assert time.monotonic() - t0 < 3
    assert result.outcome is ApplyOutcome.CUT_SHORT and result.rolled_back and not result.ok
    assert conf.read_text() == before and osm.calls == 2  # signalled again to read them
    with pytest.raises(ApplyError, match="stopping"):  # and no new apply starts
        applier.apply(files(conf, policy, 2))
    assert osm.calls == 2


def test_a_stop_after_the_sweep_keeps_the_files_unverified(tmp_path: Path) -> None:
    stop = [False]
    applier, osm, conf, policy = make(tmp_path, should_stop=lambda: stop[0])
    osm.on_signal = lambda: stop.__setitem__(0, True)
    wanted = files(conf, policy, 1)
    result = applier.apply(wanted, lambda: ["never run"])
    assert result.ok and result.outcome is ApplyOutcome.UNVERIFIED
    assert conf.read_text() == wanted[conf]
    assert "not verified" in result.summary()


# ------------------------------------------------------------------ metrics


def test_the_apply_gauges(tmp_path: Path) -> None:
    counters = Counters()
    metrics = AgentMetrics(counters, fabric="lab", routing_engine="minhop", dry_run=False)
    value = metrics.registry.get_sample_value
    assert value("ibqos_opensm_up") is None and value("ibqos_opensm_rejected") == 0
    applier, _, conf, policy = make(
        tmp_path, ADMIN_POLICY, budget=ReloadBudget(6, 2.0, clock=lambda: 0.0)
    )
    enforce(applier, files(conf, policy, 1), None, counters)
    assert value("ibqos_opensm_rejected") == 1 and value("ibqos_opensm_up") == 1
    assert value("ibqos_opensm_reload_tokens") == 4 and value("ibqos_opensm_log_missing") == 0
    assert value("ibqos_opensm_reloads_total") == 2 and value("ibqos_rollbacks_total") == 1
    with pytest.raises(OpenSMHeld):
        enforce(applier, files(conf, policy, 2), None, counters)
    assert value("ibqos_opensm_reloads_deferred_total") == 0
    assert value("ibqos_opensm_write_errors_total") == 0
