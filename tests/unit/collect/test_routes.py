"""The agent's forwarding-table source: dump re-read on change, ibroute in the background,
bad input leaves the last good tables in use (recorded real files from a lab)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

import ibqos.collect.routes as routes_mod
from ibqos.collect.routes import RouteSource, ibroute_runner, switch_lids
from ibqos.errors import CollectError
from ibqos.fabric.lfts import read_lft_dump
from ibqos.fabric.model import fabric_from_file
from tests.support.paths import TESTS

LAB = TESTS / "data" / "lfts" / "lab-xgft-2_4.2_1.2"
DUMP_TEXT = (LAB / "opensm-lfts.dump").read_text()
TABLES = read_lft_dump(DUMP_TEXT)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Ibroute:
    """The recorded ``ibroute -n LID`` outputs, counting runs; *fail* LIDs raise."""

    def __init__(self) -> None:
        self.runs: list[int] = []
        self.fail: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, lid: int) -> str:
        with self.lock:
            self.runs.append(lid)
        if lid in self.fail:
            raise CollectError(f"ibroute -n {lid}: ibroute: iberror: failed: dump tables")
        return (LAB / "ibroute-n" / f"{lid}.txt").read_text()


@pytest.fixture
def fabric():
    return fabric_from_file(LAB / "ibnetdiscover.txt")


def write(path: Path, text: str, stamp: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(stamp, stamp))  # a new mtime even within the clock's resolution


def source(mode: str, dump: Path | None, run=None, refresh_s: float = 300.0, clock=None):
    return RouteSource(mode, dump, refresh_s, run=run or Ibroute(), clock=clock or Clock())


def test_the_dump_is_read_once_and_again_when_it_changes(tmp_path, fabric) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    write(dump, DUMP_TEXT, 1)
    src = source("dump", dump)
    assert src.poll(fabric) is True
    assert src.tables == TABLES and src.source == "dump"
    first = src.tables
    assert src.poll(fabric) is False and src.tables is first  # unchanged: not read
    # OpenSM rewrites it after a heavy sweep with other routes for one destination
    moved = DUMP_TEXT.replace("0x0002 001 #", "0x0002 002 #", 1)
    write(dump, moved, 2)
    assert src.poll(fabric) is True
    assert src.tables == read_lft_dump(moved)
    # rewritten the same: read, found equal, not handed on
    write(dump, moved, 3)
    assert src.poll(fabric) is False


def test_a_bad_dump_keeps_the_last_good_tables(tmp_path, fabric, caplog) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    write(dump, DUMP_TEXT, 1)
    src = source("dump", dump)
    assert src.poll(fabric)
    good = src.tables
    second = DUMP_TEXT.index(" lids dumped", DUMP_TEXT.index(" lids dumped") + 1)
    write(dump, DUMP_TEXT[: DUMP_TEXT.rindex("\n", 0, second) + 1], 2)  # caught mid-write
    with caplog.at_level(logging.WARNING):
        assert src.poll(fabric) is False
        assert src.poll(fabric) is False
    assert src.tables is good and src.source == "dump"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once while it lasts
    assert warnings[0].startswith(f"routes: {dump}:")
    assert "ends inside the table of switch Lid" in warnings[0]
    assert warnings[0].endswith("keeping the last good tables (dump, 4 switches)")
    assert src.status()["problem"] is not None
    write(dump, DUMP_TEXT, 3)  # OpenSM finished writing
    assert src.poll(fabric) is False  # the same tables as before: nothing to hand on
    assert src.problem == "" and src.status()["problem"] is None


def test_a_dump_missing_a_switch_is_refused(tmp_path, fabric, caplog) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    head = DUMP_TEXT.index("Unicast lids", 1)  # drop the first switch's table
    write(dump, DUMP_TEXT[head:], 1)
    src = source("dump", dump)
    with caplog.at_level(logging.WARNING):
        assert src.poll(fabric) is False
    assert src.tables is None and src.source == "none"
    first_lid = int(DUMP_TEXT.split("of switch Lid ", 1)[1].split()[0])
    assert caplog.messages == [
        f"routes: {dump}: no table for 1 of the fabric's 4 switches (LID {first_lid});"
        " no routes until then (attribution splits by subtree)"
    ]


def test_a_dump_that_vanishes_in_dump_mode(tmp_path, fabric, caplog) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    write(dump, DUMP_TEXT, 1)
    src = source("dump", dump)
    src.poll(fabric)
    dump.unlink()
    with caplog.at_level(logging.WARNING):
        assert src.poll(fabric) is False
    assert src.tables == TABLES
    assert caplog.messages[-1].startswith(f"routes: {dump}: No such file or directory;")


def test_ibroute_reads_every_switch_in_the_background(fabric) -> None:
    run, clock = Ibroute(), Clock()
    src = source("ibroute", None, run, refresh_s=300.0, clock=clock)
    assert src.poll(fabric) is False  # started, not finished: nothing yet
    src.wait(10)
    assert src.poll(fabric) is True
    assert src.tables == TABLES and src.source == "ibroute"
    assert sorted(run.runs) == switch_lids(fabric)
    clock.now += 299.0
    assert src.poll(fabric) is False
    assert len(run.runs) == 4  # not due yet
    clock.now += 1.0
    src.poll(fabric)
    src.wait(10)
    assert src.poll(fabric) is False  # read again, the same tables
    assert len(run.runs) == 8


def test_ibroute_again_after_a_fabric_change(fabric) -> None:
    run = Ibroute()
    src = source("ibroute", None, run, refresh_s=0.0)
    src.poll(fabric)
    src.wait(10)
    src.poll(fabric)
    assert src.poll(fabric) is False and len(run.runs) == 4  # refresh_s 0: not again
    changed = fabric_from_file(LAB / "ibnetdiscover.txt")  # a new model: a fabric change
    src.poll(changed)
    src.wait(10)
    src.poll(changed)
    assert len(run.runs) == 8


def test_ibroute_failing_on_a_switch_keeps_the_last_good(fabric, caplog) -> None:
    run, clock = Ibroute(), Clock()
    src = source("ibroute", None, run, refresh_s=10.0, clock=clock)
    src.poll(fabric)
    src.wait(10)
    assert src.poll(fabric)
    run.fail = {switch_lids(fabric)[2]}
    clock.now += 10.0
    src.poll(fabric)
    src.wait(10)
    with caplog.at_level(logging.WARNING):
        assert src.poll(fabric) is False
    assert src.tables == TABLES
    assert caplog.messages == [
        f"routes: ibroute: 1 of 4 switches not read, first: ibroute -n {sorted(run.fail)[0]}:"
        " ibroute: iberror: failed: dump tables; keeping the last good tables (ibroute, 4"
        " switches)"
    ]


def test_auto_takes_the_dump_when_readable_else_ibroute(tmp_path, fabric) -> None:
    dump = tmp_path / "opensm-lfts.dump"
    run = Ibroute()
    src = source("auto", dump, run)
    src.poll(fabric)  # no dump yet: ibroute
    src.wait(10)
    assert src.poll(fabric) and src.source == "ibroute"
    write(dump, DUMP_TEXT, 1)  # OpenSM's first dump with the ROUTING flag on
    assert src.poll(fabric) is True and src.source == "dump"
    assert src.tables == TABLES
    assert len(run.runs) == 4


def test_off_reads_nothing(tmp_path, fabric) -> None:
    run = Ibroute()
    src = source("off", tmp_path / "x", run)
    assert src.poll(fabric) is False and src.tables is None and run.runs == []
    assert src.status() == {
        "mode": "off",
        "source": "none",
        "path": None,
        "switches": 0,
        "read_s": None,
        "problem": None,
    }


def test_the_real_runner_without_ibroute_on_path(tmp_path) -> None:
    run = ibroute_runner(env={"PATH": str(tmp_path)})
    with pytest.raises(CollectError, match="ibroute not found on PATH"):
        run(3)


def test_the_real_runner_names_the_lid_and_ibroutes_last_word(tmp_path) -> None:
    # a stand-in printing what the real one printed for a CA's LID (recorded)
    fake = tmp_path / "ibroute"
    stdout = LAB / "ibroute-bad-lid" / "stdout.txt"
    fake.write_text(f"#!/bin/sh\n/bin/cat {stdout}\nexit 255\n")
    fake.chmod(0o755)
    run = ibroute_runner(env={"PATH": str(tmp_path)})
    with pytest.raises(CollectError) as info:
        run(2)
    assert str(info.value) == "ibroute -n 2: ibroute: iberror: failed: dump tables: not a switch"


def test_a_big_dump_is_read_in_the_background(tmp_path, fabric, monkeypatch) -> None:
    monkeypatch.setattr(routes_mod, "INLINE_DUMP_BYTES", 16)  # every dump is big
    dump = tmp_path / "opensm-lfts.dump"
    write(dump, DUMP_TEXT, 1)
    src = source("dump", dump)
    assert not src.poll(fabric)  # the read started; nothing yet
    src.wait(30)
    assert src.poll(fabric)
    assert src.source == "dump" and src.tables == TABLES
    assert not src.poll(fabric)  # unchanged: not read again
    src.close()
