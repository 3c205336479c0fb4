"""FileSwap: several files changed by renames, undone by renames, nothing half-done."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.fsio import FileSwap


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_commit_then_undo_gives_back_every_file_as_it_was(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.conf", tmp_path / "b.conf", tmp_path / "c.conf"
    a.write_text("old a\n")
    a.chmod(0o640)
    b.write_text("old b\n")
    swap = FileSwap({a: "new a\n", b: None, c: "new c\n"})  # replace, remove, create
    swap.prepare()
    assert a.read_text() == "old a\n" and b.exists() and not c.exists()  # nothing yet
    swap.commit()
    assert (a.read_text(), b.exists(), c.read_text()) == ("new a\n", False, "new c\n")
    assert stat.S_IMODE(a.stat().st_mode) == 0o640  # permissions kept
    swap.undo()
    assert (a.read_text(), b.read_text(), c.exists()) == ("old a\n", "old b\n", False)
    assert stat.S_IMODE(a.stat().st_mode) == 0o640
    swap.close()
    assert hidden(tmp_path) == []


def test_a_failed_prepare_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_text("old a\n")
    b.write_text("old b\n")
    real = os.write
    calls = [0]

    def write(fd: int, data: bytes) -> int:
        calls[0] += 1
        if calls[0] == 2:  # the second file's temp: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    swap = FileSwap({a: "new a\n", b: "new b\n"})
    with pytest.raises(OSError, match="No space left") as info:
        swap.prepare()
    assert info.value.filename == str(b)  # the target, not a temp name
    assert (a.read_text(), b.read_text()) == ("old a\n", "old b\n")
    assert hidden(tmp_path) == []


def test_files_are_copied_aside_where_links_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = tmp_path / "a.conf"
    a.write_text("old a\n")

    def no_link(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_link)
    swap = FileSwap({a: "new a\n"})
    swap.prepare()
    swap.commit()
    swap.undo()
    swap.close()
    assert a.read_text() == "old a\n" and hidden(tmp_path) == []


def test_what_a_dead_process_left_is_removed(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid is free now
    a = tmp_path / "a.conf"
    a.write_text("a\n")
    stale = [tmp_path / f".a.conf.ibqos-keep-{child.pid}", tmp_path / f".a.conf.tmp-{child.pid}-1"]
    mine = tmp_path / f".a.conf.tmp-{os.getppid()}-1"  # a live process's: left alone
    for path in [*stale, mine]:
        path.write_text("x")
    swap = FileSwap({a: "b\n"})
    swap.prepare()
    swap.close()
    assert hidden(tmp_path) == [mine.name]
