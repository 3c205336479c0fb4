"""Applying OpenSM files: only changes are written and signalled, failures roll back."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibqos.errors import ApplyError
from ibqos.fsio import atomic_remove
from ibqos.opensm.apply import Applier
from ibqos.opensm.outcome import ApplyOutcome, ApplyResult
from ibqos.opensm.signallers import CommandSignaller, PidFileSignaller


class FakeOpenSM:
    """Signalled like OpenSM: appends a heavy sweep to its log, with *errors* first."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.calls = 0
        self.errors: list[str] = []
        self.sweeps = True

    def describe(self) -> str:
        return "fake OpenSM"

    def signal(self) -> None:
        self.calls += 1
        with open(self.log, "a") as fh:
            for line in self.errors:
                fh.write(f"Nov 22 10:00:00 000000 [0] 0x01 -> {line}\n")
            if self.sweeps:
                fh.write("Nov 22 10:00:00 000001 [0] 0x02 -> SUBNET UP\n")


def setup(tmp_path: Path) -> tuple[Applier, FakeOpenSM, Path, Path]:
    conf, policy, log = tmp_path / "opensm.conf", tmp_path / "qos-policy.conf", tmp_path / "log"
    conf.write_text("# admin\nqos FALSE\n")
    conf.chmod(0o640)
    policy.write_text(
        "qos-levels\nqos-level\nname: DEFAULT\nsl: 0\nend-qos-level\nend-qos-levels\n"
    )
    log.write_text("Nov 22 09:00:00 000000 [0] 0x02 -> SUBNET UP\n")
    osm = FakeOpenSM(log)
    applier = Applier(tmp_path / "state", osm, log, sweep_timeout_s=1.0)
    return applier, osm, conf, policy


def test_only_changed_files_are_written_and_only_then_signalled(tmp_path: Path) -> None:
    applier, osm, conf, policy = setup(tmp_path)
    same = {conf: conf.read_text(), policy: policy.read_text()}
    unchanged = applier.apply(same)
    assert unchanged.outcome is ApplyOutcome.UNCHANGED
    assert unchanged.changed == () and not unchanged.signalled and osm.calls == 0
    result = applier.apply({conf: "# admin\nqos TRUE\n", policy: policy.read_text()})
    assert result.changed == (conf,) and result.ok and result.signalled and osm.calls == 1
    assert result.outcome is ApplyOutcome.UNVERIFIED  # no verifier given
    assert conf.read_text() == "# admin\nqos TRUE\n"
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640  # permissions kept
    backups = tmp_path / "state" / "backup"
    assert (backups / "opensm.conf.prev").read_text() == "# admin\nqos FALSE\n"
    assert (backups / "opensm.conf.orig").read_text() == "# admin\nqos FALSE\n"
    applier.apply({conf: "# admin\nqos TRUE\nqos_ca_sl2vl 0\n"})
    assert (backups / "opensm.conf.prev").read_text() == "# admin\nqos TRUE\n"
    assert (backups / "opensm.conf.orig").read_text() == "# admin\nqos FALSE\n"  # the first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files


def test_an_error_in_the_log_rolls_back(tmp_path: Path) -> None:
    applier, osm, _conf, policy = setup(tmp_path)
    good = policy.read_text()
    osm.errors = ["ERR AC05: Syntax error (line 3:26): syntax error"]
    result = applier.apply({policy: "port-groups\nbroken\n"})
    assert not result.ok and result.rolled_back and result.outcome is ApplyOutcome.REJECTED
    assert "ERR AC05" in result.problems[0] and "rolled back" in result.summary()
    assert policy.read_text() == good and osm.calls == 2  # written, then restored


def test_a_failed_verification_rolls_back(tmp_path: Path) -> None:
    applier, _osm, conf, _ = setup(tmp_path)
    result = applier.apply({conf: "qos TRUE\n"}, verify=lambda: ["job 7: PathRecord SL 0"])
    assert result.rolled_back and result.problems == ("job 7: PathRecord SL 0",)
    assert result.outcome is ApplyOutcome.REJECTED
    assert conf.read_text() == "# admin\nqos FALSE\n"
    passed = applier.apply({conf: "qos TRUE\n"}, verify=lambda: [])
    assert passed.ok and passed.outcome is ApplyOutcome.VERIFIED
    assert passed.summary().startswith("applied opensm.conf, sweep ")
    assert "not verified" not in passed.summary()


def test_no_sweep_in_time_is_a_failure(tmp_path: Path) -> None:
    applier, osm, conf, _ = setup(tmp_path)
    osm.sweeps = False
    result = applier.apply({conf: "qos TRUE\n"})
    assert not result.ok and "no heavy sweep" in result.problems[-1]
    assert conf.read_text() == "# admin\nqos FALSE\n"


def test_opensm_not_running_is_a_clear_error_and_nothing_changes(tmp_path: Path) -> None:
    conf, log = tmp_path / "opensm.conf", tmp_path / "log"
    conf.write_text("qos FALSE\n")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that no longer exists
    pid_file = tmp_path / "opensm.pid"
    pid_file.write_text(f"{child.pid}\n")
    applier = Applier(tmp_path / "state", PidFileSignaller(pid_file), log)
    with pytest.raises(ApplyError, match=rf"OpenSM is not running: pid {child.pid} from"):
        applier.apply({conf: "qos TRUE\n"})
    assert conf.read_text() == "qos FALSE\n"
    with pytest.raises(ApplyError, match="cannot read pid file"):
        Applier(tmp_path / "state", PidFileSignaller(tmp_path / "none"), log).apply(
            {conf: "qos TRUE\n"}
        )


def test_the_pid_file_signaller_sends_sighup(tmp_path: Path) -> None:
    """SIGHUP reaches the pid file's process once it is known to be OpenSM: here a copy of
    sleep named opensm, which SIGHUP's default action ends."""
    opensm = tmp_path / "opensm"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", opensm)
    # SIGHUP at its default action whatever the caller ignores (nohup, a CI runner)
    child = subprocess.Popen(["env", "--default-signal=HUP", str(opensm), "30"])
    try:
        (tmp_path / "pid").write_text(f"{child.pid}\n")  # written after it started
        signaller = PidFileSignaller(tmp_path / "pid")
        deadline = time.monotonic() + 5.0  # env has yet to exec the copy named opensm
        while not signaller.alive().up and time.monotonic() < deadline:
            time.sleep(0.01)
        assert signaller.alive().up is True
        signaller.signal()
        assert child.wait(timeout=10) == -signal.SIGHUP
        assert signaller.alive().up is False
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()


def test_two_writers_are_refused(tmp_path: Path) -> None:
    applier, _, conf, _ = setup(tmp_path)
    other = Applier(tmp_path / "state", None, tmp_path / "log")
    with applier.lock(), pytest.raises(ApplyError, match="another ibqos process is writing"):
        other.apply({conf: "qos TRUE\n"})
    assert other.apply({conf: "qos TRUE\n"}).changed == (conf,)  # free again


def test_a_signal_cut_short_puts_the_previous_files_back_and_signals_again(
    tmp_path: Path,
) -> None:
    """SIGTERM to the service kills the reload command after the files were written:
    OpenSM may have read them, so it is told to read the previous ones again."""
    applier, _, conf, _ = setup(tmp_path)
    before = conf.read_text()
    seen, killed = tmp_path / "seen", tmp_path / "killed"
    script = (
        f"cat {conf} >> {seen}; echo ---- >> {seen}; if [ ! -e {killed} ]; then touch {killed};"
        f' kill -TERM $$; fi; echo "x 0x02 -> SUBNET UP" >> {applier.log_path}'
    )
    applier.signaller = CommandSignaller(("sh", "-c", script))
    with pytest.raises(ApplyError, match="killed by signal 15"):
        applier.apply({conf: before + "qos TRUE\n"})
    assert conf.read_text() == before  # the previous file back
    # signalled twice: with the new file (cut short), then with the previous one
    assert seen.read_text().split("----\n")[:2] == [before + "qos TRUE\n", before]


def test_a_command_that_fails_cleanly_is_not_signalled_again(tmp_path: Path) -> None:
    applier, _, conf, _ = setup(tmp_path)
    before = conf.read_text()
    calls = tmp_path / "calls"
    applier.signaller = CommandSignaller(("sh", "-c", f"echo x >> {calls}; exit 3"))
    with pytest.raises(ApplyError, match="exit 3"):
        applier.apply({conf: before + "qos TRUE\n"})
    assert conf.read_text() == before and calls.read_text() == "x\n"


def test_a_file_absent_at_first_is_removed_and_the_removal_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applier, _, _, policy = setup(tmp_path)
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert applier.apply({policy: None}).ok
    assert not policy.exists() and str(tmp_path) in synced
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing kept


def test_atomic_remove_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_remove(target)
    assert not target.exists() and synced == [str(tmp_path)]
    atomic_remove(target)  # already gone: nothing to do
    assert synced == [str(tmp_path)]


CONF, POLICY = Path("/etc/opensm/opensm.conf"), Path("/etc/opensm/qos-policy.conf")


@pytest.mark.parametrize(
    ("result", "summary", "flags"),
    [
        (ApplyResult(), "no change", (True, False)),
        (ApplyResult(ApplyOutcome.WRITTEN, (CONF,)), "applied opensm.conf", (True, False)),
        (
            ApplyResult(ApplyOutcome.VERIFIED, (CONF, POLICY), sweep_s=1.26, warnings=("w",)),
            "applied opensm.conf, qos-policy.conf, sweep 1.3 s, OpenSM warns: w",
            (True, True),
        ),
        (
            ApplyResult(ApplyOutcome.UNVERIFIED, (CONF,), log_missing=True),
            "applied opensm.conf, no OpenSM log: waited 2 s, not verified",
            (True, True),
        ),
        (
            ApplyResult(ApplyOutcome.REJECTED, (CONF,), ("p", "q"), rolled_back=True, held="h"),
            "rolled back opensm.conf: p; OpenSM rejects the previous files too: held",
            (False, True),
        ),
        (
            ApplyResult(ApplyOutcome.REJECTED, (POLICY,)),
            "FAILED, not rolled back qos-policy.conf: unknown",
            (False, True),
        ),
        (
            ApplyResult(ApplyOutcome.OPENSM_EXITED, (CONF,), ("gone",), rolled_back=True),
            "OpenSM exited after the signal: opensm.conf put back on disk, not signalled (gone)",
            (False, True),
        ),
        (
            ApplyResult(ApplyOutcome.CUT_SHORT, (CONF,), ("stopping",)),
            "stopped before OpenSM's sweep was seen: opensm.conf NOT put back,"
            " OpenSM signalled again",
            (False, True),
        ),
    ],
    ids=lambda v: v.outcome.name if isinstance(v, ApplyResult) else "",
)
def test_each_outcome_has_its_line_and_record(
    result: ApplyResult, summary: str, flags: tuple[bool, bool]
) -> None:
    """The log's and ``ibqos status``'s line, and the state file's record, per outcome."""
    assert result.summary() == summary and (result.ok, result.signalled) == flags
    doc = result.to_doc()
    assert doc["summary"] == summary and (doc["ok"], doc["signalled"]) == flags
    assert doc["rolled_back"] is result.rolled_back
    assert doc["opensm_exited"] is (result.outcome is ApplyOutcome.OPENSM_EXITED)
    assert doc["cut_short"] is (result.outcome is ApplyOutcome.CUT_SHORT)
    assert doc["changed"] == [str(p) for p in result.changed]
    assert doc["problems"] == list(result.problems) and doc["held"] == result.held
