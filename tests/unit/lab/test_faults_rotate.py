"""The lab's log rotations (``ibqos.lab.faults.rotate_log``), against a stand-in for OpenSM
that holds its log open and reopens it on SIGUSR1, as OpenSM 3.3.23 does."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ibqos.errors import LabError
from ibqos.lab.faults import rotate_log

# appends a line on SIGHUP, reopens its log by path on SIGUSR1; ready once it wrote "up"
_WRITER = """\
import signal, sys
path = sys.argv[1]
fh = open(path, "a")
def hup(*_):
    fh.write("SUBNET UP\\n"); fh.flush()
def usr1(*_):
    global fh
    fh.close(); fh = open(path, "a")
signal.signal(signal.SIGHUP, hup)
signal.signal(signal.SIGUSR1, usr1)
fh.write("up\\n"); fh.flush()
while True:
    signal.pause()
"""


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path / "opensm.log"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(log)])
    try:
        deadline = time.monotonic() + 10
        while not (log.exists() and log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def hup_and_wait(proc: subprocess.Popen[bytes], path: Path, count: int) -> None:
    proc.send_signal(1)
    deadline = time.monotonic() + 10
    while path.read_text().count("SUBNET UP") < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_each_rotation_leaves_the_writer_where_logrotate_would(
    writer: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    log = tmp_path / "opensm.log"
    # renamed, OpenSM not told: it writes on into <log>.1, the new file stays empty
    assert rotate_log(log, "rename") == tmp_path / "opensm.log.1"
    hup_and_wait(writer, tmp_path / "opensm.log.1", 1)
    assert log.read_text() == ""
    # renamed and SIGUSR1: the older rotation moves up, the writer reopens the path
    rotate_log(log, "signal", pid=writer.pid)
    assert (tmp_path / "opensm.log.2").read_text() == "up\nSUBNET UP\n"
    hup_and_wait(writer, log, 1)
    # copied and truncated in place: the same file, empty, written on
    rotate_log(log, "copytruncate")
    assert (tmp_path / "opensm.log.1").read_text() == "SUBNET UP\n"
    assert (tmp_path / "opensm.log.2").read_text() == ""
    assert (tmp_path / "opensm.log.3").read_text() == "up\nSUBNET UP\n"
    hup_and_wait(writer, log, 1)
    assert log.read_text() == "SUBNET UP\n"


def test_a_rotation_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    with pytest.raises(LabError, match="no such log rotation"):
        rotate_log(log, "shred")
    with pytest.raises(LabError, match="needs OpenSM's pid"):
        rotate_log(log, "signal")
    with pytest.raises(LabError, match="cannot rotate"):
        rotate_log(log, "rename")
