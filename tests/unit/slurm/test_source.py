"""The Slurm job source: polling, notifications, format choice and the grace time."""

from __future__ import annotations

import logging
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.config.models import SlurmConfig
from ibqos.errors import SlurmError
from ibqos.slurm.source import MIN_FORCED_POLL_S, Completed, SlurmJobSource
from tests.support.paths import ROOT, TESTS

DATA = TESTS / "data" / "squeue"
DOWN = Completed(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n")


class FakeSqueue:
    """Answers like squeue 22.05; *reply* is what the next job query gets."""

    def __init__(self, version: str = "slurm-wlm 22.05.8\n") -> None:
        self.version = version
        self.reply = Completed(0, (DATA / "22.05-mix.json").read_text(), "")
        self.calls: list[list[str]] = []

    def __call__(self, argv, timeout_s):
        self.calls.append(list(argv))
        if "--version" in argv:
            return Completed(0, self.version, "")
        if "--json" in argv:
            return self.reply
        return Completed(0, (DATA / "22.05-mix.txt").read_text(), "")

    def queries(self) -> int:
        return sum("--version" not in c for c in self.calls)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def source(tmp_path, squeue=None, **cfg):
    cfg = {"notify_dir": tmp_path / "notify", "poll_s": 10.0, "grace_s": 60.0} | cfg
    clock = Clock()
    squeue = squeue or FakeSqueue()
    return SlurmJobSource(SlurmConfig(**cfg), run=squeue, clock=clock), squeue, clock


def test_polls_every_poll_s_and_reads_json_on_22_05(tmp_path) -> None:
    src, squeue, clock = source(tmp_path)
    assert [j.id for j in src.jobs()] == ["1", "4"]
    assert squeue.calls[:2] == [["squeue", "--version"], ["squeue", "--all", "--json"]]
    clock.now += 9.0
    src.jobs()
    assert squeue.queries() == 1  # within poll_s: the last jobs
    clock.now += 1.0
    src.jobs()
    assert squeue.queries() == 2
    assert src.up is True


def test_old_slurm_is_read_through_the_text_format(tmp_path) -> None:
    src, squeue, _ = source(tmp_path, FakeSqueue("slurm 20.11.9\n"))
    assert [j.id for j in src.jobs()] == ["1", "4"]
    assert squeue.calls[1] == ["squeue", "--all", "--noheader", "--format=%A|%u|%T|%S|%N|%j"]


def test_a_notification_polls_at_once_and_is_consumed(tmp_path) -> None:
    src, squeue, clock = source(tmp_path)
    (tmp_path / "notify").mkdir()
    src.jobs()
    (tmp_path / "notify" / "start.42").touch()
    (tmp_path / "notify" / ".tmp").touch()  # hidden: someone's temporary, left alone
    clock.now += 0.1
    src.jobs()
    assert squeue.queries() == 1  # forced polls are MIN_FORCED_POLL_S apart
    clock.now += MIN_FORCED_POLL_S
    src.jobs()
    assert squeue.queries() == 2
    assert sorted(p.name for p in (tmp_path / "notify").iterdir()) == [".tmp"]


def test_refresh_polls_at_the_next_call(tmp_path) -> None:
    src, squeue, clock = source(tmp_path)
    src.jobs()
    clock.now += 1.0
    src.refresh()
    src.jobs()
    assert squeue.queries() == 2 and src.read_at == clock.now


def test_slurmctld_down_keeps_the_jobs_for_the_grace_time_and_warns_once(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, "ibqos.slurm")
    src, squeue, clock = source(tmp_path, grace_s=30.0)
    jobs = src.jobs()
    squeue.reply = DOWN
    for _ in range(3):
        clock.now += 10.0
        assert src.jobs() == jobs  # held, however often it is asked
    assert src.up is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "squeue --all --json: exit 1: slurm_load_jobs error: Unable to contact slurm controller;"
        " keeping the last 2 jobs for up to 30 s, SLs unchanged"
    ]
    clock.now += 10.1
    with pytest.raises(SlurmError, match=r"^squeue has failed for more than 30 s \(squeue"):
        src.jobs()
    # it answers again: the jobs are Slurm's, said once
    squeue.reply = FakeSqueue().reply
    clock.now += 10.0
    assert src.jobs() == jobs and src.up is True
    assert "squeue answers again after 40 s: 2 running jobs" in caplog.text


def test_the_first_read_failing_is_an_error(tmp_path) -> None:
    squeue = FakeSqueue()
    squeue.reply = DOWN
    src, _, _ = source(tmp_path, squeue)
    message = "squeue has not answered yet: squeue --all --json: exit 1"
    with pytest.raises(SlurmError, match=message):
        src.jobs()
    assert src.up is False


def test_a_squeue_that_is_not_installed(tmp_path) -> None:
    src = SlurmJobSource(SlurmConfig(squeue=(str(tmp_path / "no-squeue"),), notify_dir=None))
    with pytest.raises(SlurmError, match=r"no-squeue --version: exit 127: cannot run .*no-squeue"):
        src.jobs()


def test_starts_and_ends_are_logged_once_each(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, "ibqos.slurm")
    src, squeue, clock = source(tmp_path)
    src.jobs()
    text = squeue.reply.stdout.replace('"job_id": 4', '"job_id": 5')
    squeue.reply = Completed(0, text, "")
    clock.now += 10.0
    src.jobs()
    assert "jobs: 2 running (started 5; ended 4)" in caplog.text


def test_a_notification_that_cannot_be_removed_is_taken_once_and_warned_once(
    tmp_path, caplog, monkeypatch
) -> None:
    caplog.set_level(logging.DEBUG, "ibqos.slurm")
    notify = tmp_path / "notify"
    notify.mkdir()
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent == notify:  # what root without CAP_DAC_OVERRIDE gets in a bad dir
            raise PermissionError(13, "Permission denied", str(self))
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    src, squeue, clock = source(tmp_path)
    src.jobs()
    (notify / "start.42").touch()
    (notify / "end.41").touch()
    for _ in range(5):
        clock.now += MIN_FORCED_POLL_S
        src.jobs()
    assert squeue.queries() == 2  # the first poll and one for the two files, not one a look
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot remove" in warnings[0].getMessage()
    assert str(notify) in warnings[0].getMessage()
    os.utime(notify / "start.42", ns=(1, 10**18))  # written again: a new notification
    clock.now += MIN_FORCED_POLL_S
    src.jobs()
    assert squeue.queries() == 3


def test_the_documented_notify_dir_lets_capless_root_remove_slurms_files(tmp_path) -> None:
    """systemd/README.md's ExecStartPre line, SlurmUser creating a file, and the agent's
    removal run as ibqos.service runs it: root with every capability dropped."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv")
    try:
        slurm = pwd.getpwnam("slurm")
    except KeyError:
        pytest.skip("no slurm user")
    readme = (ROOT / "systemd/README.md").read_text()
    pattern = r"^\s*ExecStartPre=\+(/usr/bin/install .*/run/ibqos/notify)$"
    (line,) = re.findall(pattern, readme, re.M)
    notify = tmp_path / "notify"
    subprocess.run(line.replace("/run/ibqos/notify", str(notify)).split(), check=True)
    fd = os.open(notify, os.O_RDONLY | os.O_DIRECTORY)
    try:  # slurm cannot walk root's tmp_path: it gets the directory as an open fd
        as_slurm = ["setpriv", f"--reuid={slurm.pw_uid}", f"--regid={slurm.pw_gid}"]
        create = f": > /proc/self/fd/{fd}/start.42"
        subprocess.run(
            [*as_slurm, "--clear-groups", "sh", "-c", create], pass_fds=(fd,), check=True
        )
    finally:
        os.close(fd)
    assert (notify / "start.42").stat().st_uid == slurm.pw_uid
    take = (
        "import sys; from pathlib import Path; from ibqos.slurm.notify import NotifyDir;"
        " print(open('/proc/self/status').read().count('CapEff:\\t0000000000000000'),"
        " NotifyDir(Path(sys.argv[1])).take())"
    )
    capless = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    out = subprocess.run(
        [*capless, sys.executable, "-c", take, str(notify)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split(None, 1) == ["1", "['start.42']\n"], out.stdout + out.stderr
    assert not out.stderr  # no warning: removed
    assert list(notify.iterdir()) == []
