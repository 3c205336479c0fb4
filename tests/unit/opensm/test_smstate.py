"""The SM state of the OpenSM beside ibqos: SMInfo's answer, the log's state lines, and how
often each is read."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pytest

from ibqos.errors import IbqosError, PortInfoError
from ibqos.opensm import smstate
from ibqos.opensm.smstate import LogStates, SmState, SmStateReader, parse_sminfo, scan

STAMP = "Dec 07 20:12:48 753573 [B92376C0] 0x80 -> "
#: what sminfo 1.x prints (infiniband-diags' sminfo.c), as read on the lab
MASTER = "sminfo: sm lid 1 sm guid 0xc42a10301000021, activity count 515 priority 10 state 3 SMINFO_MASTER\n"  # noqa: E501
STANDBY = "sminfo: sm lid 0 sm guid 0xc42a10301000001, activity count 137 priority 5 state 2 SMINFO_STANDBY\n"  # noqa: E501
OTHER_MASTER = "sminfo: sm lid 2 sm guid 0xc42a10301000001, activity count 9 priority 5 state 3 SMINFO_MASTER\n"  # noqa: E501


def lines(*texts: str) -> str:
    return "".join(f"{STAMP}{t}\n" for t in texts)


class FakeSminfo:
    """``sminfo`` by address: ``-D 0`` is the local port, none is the fabric's master."""

    def __init__(self, local: str | None, master: str | None = None) -> None:
        self.local = local
        self.master = master
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        answer = self.local if "-D" in argv else self.master
        if answer is None:
            raise PortInfoError("sminfo exited 255: sminfo: iberror: failed: query")
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sminfo_output_gives_state_guid_and_priority() -> None:
    assert parse_sminfo(MASTER) == (SmState.MASTER, 0x0C42A10301000021, 10)
    assert parse_sminfo(STANDBY) == (SmState.STANDBY, 0x0C42A10301000001, 5)
    with pytest.raises(IbqosError, match="no SMInfo"):
        parse_sminfo("sminfo: iberror: failed: query\n")
    with pytest.raises(IbqosError, match="unknown SM state 7"):
        parse_sminfo(MASTER.replace("state 3", "state 7"))


def test_the_last_state_line_wins_and_a_sweep_after_it_counts() -> None:
    text = lines(
        "Entering DISCOVERING state",
        "Entering STANDBY state",
        "Entering DISCOVERING state",
        "Entering MASTER state",
    ).encode()
    fh = io.BytesIO(text)
    assert scan(fh, 0, len(text)) == (SmState.MASTER, False)
    text += lines("SUBNET UP").encode()
    assert scan(io.BytesIO(text), 0, len(text)) == (SmState.MASTER, True)
    # the message boxes OpenSM prints at VERBOSE are no state lines
    box = lines("**** ENTERING SM STANDBY STATE ****").encode()
    assert scan(io.BytesIO(box), 0, len(box)) == (None, False)


def test_a_log_is_scanned_backwards_in_chunks_and_within_its_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(smstate, "CHUNK", 7)  # every line spans chunks
    text = (lines("Entering STANDBY state") + lines("noise") * 20).encode()
    assert scan(io.BytesIO(text), 0, len(text)) == (SmState.STANDBY, False)
    # beyond the cap the state line is not looked for
    assert scan(io.BytesIO(text), 0, len(text), cap=len(text) // 2) == (None, False)
    # nor before the start asked for
    start = text.index(b"noise")
    assert scan(io.BytesIO(text), start, len(text)) == (None, False)


def test_the_log_is_followed_across_appends_rotations_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    follow = LogStates(log)
    assert not follow.poll() and follow.state is None  # no log yet
    log.write_text(lines("Entering DISCOVERING state", "Entering STANDBY state"))
    assert follow.poll() and (follow.state, follow.swept) == (SmState.STANDBY, False)
    assert not follow.poll()  # nothing new
    with log.open("a") as fh:
        fh.write(lines("Entering DISCOVERING state", "Entering MASTER state"))
    assert follow.poll() and (follow.state, follow.swept) == (SmState.MASTER, False)
    with log.open("a") as fh:
        fh.write(lines("SUBNET UP"))
    assert not follow.poll() and follow.swept  # a sweep, no new state
    # rotated (renamed, a new file): the new file has no state line yet, the state stays
    log.rename(tmp_path / "opensm.log.1")
    log.write_text(lines("SUBNET UP"))
    assert not follow.poll() and follow.state is SmState.MASTER
    # truncated and rewritten: read from its start
    log.write_text(lines("Entering STANDBY state"))
    assert follow.poll() and follow.state is SmState.STANDBY


def test_sminfo_on_opensms_port_is_the_answer(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text(lines("Entering MASTER state"))  # the log is not asked when SMInfo answers
    run = FakeSminfo(STANDBY)
    reader = SmStateReader(log, ca="mlx5_0", port=1, runner=run)
    reading = reader.read()
    assert (reading.state, reading.source, reading.priority) == (SmState.STANDBY, "sminfo", 5)
    assert reading.standby
    assert run.calls == [["sminfo", "-C", "mlx5_0", "-P", "1", "-D", "0"]]
    assert reading.describe() == "standby (sminfo: priority 5)"


def test_a_port_without_sm_beside_another_master_reads_not_active(tmp_path: Path) -> None:
    run = FakeSminfo(None, OTHER_MASTER)
    reading = SmStateReader(tmp_path / "opensm.log", runner=run).read()
    assert reading.state is SmState.NOTACTIVE and reading.standby
    assert "the master is 0x0c42a10301000001" in reading.detail
    assert run.calls[-1] == ["sminfo"]  # the master, through the port's SM LID


def test_opensm_bound_to_a_port_by_guid_is_told_from_another_sm(tmp_path: Path) -> None:
    conf = tmp_path / "opensm.conf"
    conf.write_text("guid 0x0c42a10301000021\n")
    log = tmp_path / "opensm.log"
    # this port's SM is another one (0x...01); OpenSM's own (0x...21) is the master
    reading = SmStateReader(log, conf, runner=FakeSminfo(STANDBY, MASTER)).read()
    assert (reading.state, reading.guid) == (SmState.MASTER, 0x0C42A10301000021)
    # ... or OpenSM is not the master: another SM runs the fabric
    reading = SmStateReader(log, conf, runner=FakeSminfo(STANDBY, OTHER_MASTER)).read()
    assert reading.state is SmState.NOTACTIVE
    assert "is not OpenSM's" in reading.detail


def test_without_smInfo_the_log_stands_in_unless_opensm_is_down(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text(lines("Entering STANDBY state"))
    up: list[bool | None] = [None]
    reader = SmStateReader(log, runner=FakeSminfo(None), alive=lambda: up[0])
    reading = reader.read()
    assert (reading.state, reading.source) == (SmState.STANDBY, "log")
    up[0] = False  # its last line tells of an OpenSM that is gone
    reader.last = None
    assert reader.read().state is None
    empty = SmStateReader(tmp_path / "none.log", runner=FakeSminfo(None)).read()
    assert empty.state is None and not empty.standby
    assert empty.describe().startswith("unknown (no SM answers on this port")


def test_sminfo_is_asked_every_few_seconds_and_at_once_after_a_state_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "opensm.log"
    log.write_text(lines("Entering STANDBY state"))
    clock, run = Clock(), FakeSminfo(STANDBY)
    reader = SmStateReader(log, runner=run, clock=clock)
    reader.read()
    clock.now += smstate.EVERY_S / 2
    reader.read()
    assert len(run.calls) == 1  # cached
    with log.open("a") as fh:
        fh.write(lines("Entering DISCOVERING state", "Entering MASTER state"))
    run.local = MASTER
    assert reader.read().state is SmState.MASTER and len(run.calls) == 2
    clock.now += smstate.EVERY_S
    reader.read()
    assert len(run.calls) == 3


def test_unanswered_reads_back_off_by_their_own_duration(tmp_path: Path) -> None:
    clock = Clock()

    class Slow(FakeSminfo):
        def __call__(self, argv: Sequence[str]) -> str:
            clock.now += 1.0  # a MAD timeout
            return super().__call__(argv)

    run = Slow(None)
    reader = SmStateReader(tmp_path / "opensm.log", runner=run, clock=clock)
    start = clock.now
    reader.read()
    assert len(run.calls) == 2  # this port, then the master: 2 s
    clock.now = start + smstate.RETRY_FACTOR * 2 - 0.5
    reader.read()
    assert len(run.calls) == 2
    clock.now = start + smstate.RETRY_FACTOR * 2
    reader.read()
    assert len(run.calls) == 4


def test_no_sminfo_installed_leaves_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    log = tmp_path / "opensm.log"
    log.write_text(lines("Entering MASTER state"))
    reading = SmStateReader(log).read()
    assert (reading.state, reading.source) == (SmState.MASTER, "log")
    assert "sminfo not found" in reading.detail
