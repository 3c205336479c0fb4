"""OpenSM's log followed across rotations: renamed without a reopen, renamed then reopened
(SIGUSR1, as Debian's logrotate does), compressed away, copied and truncated in place; and
the apply path that waits on it, with one signal per apply whatever the rotation."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from ibqos.opensm.apply import Applier
from ibqos.opensm.osmlog import MAX_RENAMED, LogFollower, LogReport, follower
from ibqos.opensm.outcome import ApplyOutcome

STAMP = "Nov 26 10:00:00 123456 [7F1C2B3A] 0x01 -> "
UP = f"{STAMP}SUBNET UP\n"


class Writer:
    """Writes a log as OpenSM does: one file held open, appending, reopened by path only
    when told (SIGUSR1)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: IO[str] = open(path, "a")  # held open, as OpenSM holds its log
        self.write("OpenSM 3.3.23\n" + f"{STAMP}Entering MASTER state\n" * 50)

    def write(self, text: str) -> None:
        self.fh.write(text)
        self.fh.flush()

    def reopen(self) -> None:
        self.fh.close()
        self.fh = open(self.path, "a")

    def close(self) -> None:
        self.fh.close()


@pytest.fixture
def writer(tmp_path: Path):
    w = Writer(tmp_path / "opensm.log")
    yield w
    w.close()


def rename(log: Path, create: bool = True) -> Path:
    """logrotate's rename (``create``: an empty file in its place)."""
    old = log.with_name(log.name + ".1")
    log.rename(old)
    if create:
        log.touch()
    return old


def copytruncate(log: Path) -> Path:
    copy = log.with_name(log.name + ".1")
    shutil.copyfile(log, copy)
    with open(log, "r+") as fh:
        fh.truncate(0)
    return copy


def test_a_log_renamed_without_a_reopen_is_read_on(writer: Writer) -> None:
    """OpenSM writes on into the renamed file: its sweep's end is found there."""
    log = LogFollower(writer.path)
    mark = log.mark()
    rename(writer.path)
    writer.write(f"{STAMP}ERR AC05: Syntax error (line 3:1)\n" + UP)
    report = log.read_since(mark)
    assert report.swept and report.errors == ("ERR AC05: Syntax error (line 3:1)",)
    assert not report.truncated and log.rotations == 1
    log.close()


def test_a_rename_between_two_marks_is_followed(writer: Writer) -> None:
    """Rotated between two applies: the file OpenSM writes (no longer at the path) was
    held open since the first mark, and is still read."""
    log = LogFollower(writer.path)
    log.mark()
    rename(writer.path)
    mark = log.mark()
    writer.write(UP)
    assert log.read_since(mark).swept
    writer.write(UP)  # and at the next apply too: the new file stays empty
    mark = log.mark()
    assert not log.read_since(mark).swept
    writer.write(UP)
    assert log.read_since(mark).swept
    log.close()


def test_a_rename_then_reopen_is_read_in_both_files(writer: Writer) -> None:
    """Debian's logrotate: rename, then SIGUSR1; lines before the reopen are in the old
    file (even once ``compress`` removed it), the rest in the new one, from its start."""
    log = LogFollower(writer.path)
    mark = log.mark()
    old = rename(writer.path, create=False)
    writer.write(f"{STAMP}ERR AC14: pkey 0x0123 in match rule - partition doesn't exist\n")
    old.unlink()  # compressed away
    writer.reopen()
    writer.write(UP)
    report = log.read_since(mark)
    assert report.swept and len(report.warnings) == 1
    # the new file grew: OpenSM writes there now, the old one is let go at the next mark
    mark = log.mark()
    assert len(log._files) == 1
    writer.write(UP)
    assert log.read_since(mark).swept
    log.close()


def test_the_sweep_end_lands_before_the_reopen(writer: Writer) -> None:
    """SIGHUP's sweep ends before SIGUSR1's reopen: the line is in the renamed file."""
    log = LogFollower(writer.path)
    mark = log.mark()
    rename(writer.path)
    writer.write(UP)
    writer.reopen()
    assert log.read_since(mark).swept


def test_a_copytruncate_reads_the_copy_and_the_file_from_its_start(writer: Writer) -> None:
    log = LogFollower(writer.path)
    mark = log.mark()
    writer.write(UP)  # before the copy: only the copy has it
    copytruncate(writer.path)
    report = log.read_since(mark)
    assert report.swept and report.truncated and log.rotations == 1
    writer.write(f"{STAMP}ERR AC04: Error(s) in QoS policy file (/q)\n")  # after: in the file
    report = log.read_since(mark)
    assert report.errors == ("ERR AC04: Error(s) in QoS policy file (/q)",)
    assert log.rotations == 1  # counted once


def test_a_truncated_log_written_past_the_mark_is_told_by_its_bytes(writer: Writer) -> None:
    """Truncated, then written past where it ended: the size alone would hide it."""
    log = LogFollower(writer.path)
    mark = log.mark()
    with open(writer.path, "r+") as fh:
        fh.truncate(0)
    writer.write("x" * (writer.path.stat().st_size + 5000) + "\n" + UP)
    report = log.read_since(mark)
    assert report.swept and report.truncated


def test_a_copy_of_another_log_is_not_read(writer: Writer) -> None:
    """The copy is told by the bytes before the mark: an unrelated ``.1`` is not read."""
    log = LogFollower(writer.path)
    mark = log.mark()
    writer.path.with_name(writer.path.name + ".1").write_text("y" * 100000 + UP)
    with open(writer.path, "r+") as fh:
        fh.truncate(0)
    report = log.read_since(mark)
    assert report.truncated and not report.swept


def test_a_truncation_between_two_marks_is_counted_and_read_from_the_mark(
    writer: Writer,
) -> None:
    log = LogFollower(writer.path)
    log.mark()
    copytruncate(writer.path)
    writer.write(f"{STAMP}ERR AC05: old\n")
    mark = log.mark()
    assert log.rotations == 1
    writer.write(UP)
    report = log.read_since(mark)
    assert report.swept and report.errors == () and not report.truncated


def test_a_missing_log_reads_nothing_and_is_followed_again(writer: Writer) -> None:
    log = LogFollower(writer.path)
    hidden = writer.path.with_name("opensm.log.hidden")
    writer.path.rename(hidden)
    mark = log.mark()  # no file at the path, none followed yet
    assert log.read_since(mark) == LogReport()
    hidden.rename(writer.path)
    writer.write(UP)
    assert log.read_since(mark).swept  # a file new since the mark: read from its start
    assert LogFollower(writer.path.with_name("none")).read_since(mark).swept is False


def test_renamed_files_are_let_go_past_the_limit(writer: Writer) -> None:
    log = LogFollower(writer.path)
    log.mark()
    for n in range(MAX_RENAMED + 2):
        writer.path.rename(writer.path.with_name(f"opensm.log.{n}"))
        writer.path.touch()
        log.mark()
    assert len(log._files) == MAX_RENAMED + 1  # the limit, and the file at the path
    log.close()
    assert log._files == {}


# appends a line on SIGHUP to the log it holds open; ready once it wrote "up"
_OPENSM = """\
import signal, sys
fh = open(sys.argv[1], "a")
def hup(*_):
    fh.write("SUBNET UP\\n"); fh.flush()
signal.signal(signal.SIGHUP, hup)
fh.write("up\\n"); fh.flush()
while True:
    signal.pause()
"""


def test_a_log_renamed_before_the_first_look_is_found_through_proc(tmp_path: Path) -> None:
    """Renamed without a reopen before ibqos ever opened it: OpenSM's open files tell
    where it writes (a sibling log of another name is not taken)."""
    path = tmp_path / "opensm.log"
    proc = subprocess.Popen([sys.executable, "-c", _OPENSM, str(path)])
    try:
        deadline = time.monotonic() + 10
        while not (path.exists() and path.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        rename(path)
        (tmp_path / "opensm.logbook").write_text(UP)
        log = LogFollower(path)
        mark = log.mark(proc.pid)
        assert len(log._files) == 2  # the empty file at the path, and the renamed one
        proc.send_signal(signal.SIGHUP)
        while not log.read_since(mark).swept:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # no such process: the file at the path only
        assert len(LogFollower(path).mark(2**22 + 1).ends) == 1
        log.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_follower_is_shared_per_path(tmp_path: Path) -> None:
    first = follower(tmp_path / "a.log")
    assert follower(tmp_path / "a.log") is first
    assert follower(tmp_path / "b.log") is not first


# -- the apply path --------------------------------------------------------------------------


class RotatingOpenSM:
    """Signalled like OpenSM, with its log rotated between the mark and its sweep's end."""

    def __init__(self, writer: Writer, how: str) -> None:
        self.writer = writer
        self.how = how
        self.calls = 0

    def describe(self) -> str:
        return "fake OpenSM"

    def signal(self) -> None:
        self.calls += 1
        log = self.writer.path
        if self.how == "rename":
            rename(log)
            self.writer.write(UP)
        elif self.how == "reopen":
            old = rename(log, create=False)
            self.writer.reopen()
            self.writer.write(UP)
            old.unlink()
        elif self.how == "copytruncate":
            self.writer.write(UP)
            copytruncate(log)
        elif self.how == "lost":  # the line lands between the copy and the truncation
            shutil.copyfile(log, log.with_name(log.name + ".1"))
            self.writer.write(UP)
            with open(log, "r+") as fh:
                fh.truncate(0)


@pytest.mark.parametrize("how", ["rename", "reopen", "copytruncate", "lost"])
def test_a_rotation_during_the_wait_costs_one_signal(
    writer: Writer, tmp_path: Path, how: str
) -> None:
    conf = tmp_path / "opensm.conf"
    conf.write_text("qos TRUE\n")
    osm = RotatingOpenSM(writer, how)
    applier = Applier(tmp_path / "state", osm, writer.path, sweep_timeout_s=5.0, settle_s=0.3)
    verified: list[int] = []
    result = applier.apply({conf: "qos TRUE\nqos_max_vls 8\n"}, lambda: verified.append(1) or [])
    assert result.outcome is ApplyOutcome.VERIFIED and not result.rolled_back
    assert osm.calls == 1 and verified == [1] and applier.log_rotations == 1
    # the sweep's end was seen, except where it was lost: then the SA check decided
    assert (result.sweep_s is None) == (how == "lost")
