"""The lab's control requests (client and supervisor sides, without a fabric), its fault
helpers, and how a restarted OpenSM's start is told apart from the previous one's."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ibqos.errors import LabError
from ibqos.lab import control, faults, procs
from ibqos.lab.files import LabPaths
from ibqos.lab.opensm import OpenSM, OpenSMFiles

# a stand-in supervisor: alive, and deaf to the wake-up signal
DEAF = "import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); time.sleep(60)"


class StubLab:
    """What control.execute calls on a Lab, recorded."""

    def __init__(self, paths: LabPaths) -> None:
        self.paths = paths
        self.calls: list[tuple[str, Any]] = []

    def stop_opensm(self) -> int:
        self.calls.append(("stop", None))
        return 0

    def start_opensm(self, timeout: float, abort: Any) -> float:
        self.calls.append(("start", timeout))
        if timeout < 1:
            raise LabError("lab t: OpenSM did not bring the subnet up within 0 s")
        return 0.1

    def restart_opensm(self, timeout: float, abort: Any) -> float:
        self.calls.append(("restart", timeout))
        return 0.1

    def opensm_info(self) -> dict[str, Any]:
        return {"running": True, "pid": 42, "note": "up"}

    def links(self, action: str, targets: list[tuple[str, int | None]]) -> list[str]:
        self.calls.append((action, targets))
        return [f"{n} {action}" for n, _ in targets]


@pytest.fixture
def paths(tmp_path: Path) -> LabPaths:
    p = LabPaths(tmp_path, "t")
    p.dir.mkdir()
    p.spec.write_text("{}\n")
    return p


def record_supervisor(paths: LabPaths, pid: int) -> None:
    state = {"procs": {"supervisor": procs.ref_of(pid).to_dict()}, "status": "up"}
    paths.state.write_text(json.dumps(state))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("cn0001", ("cn0001", None)),
        ("cn0001[1]", ("cn0001", 1)),
        (" sw-L1-0002[12] ", ("sw-L1-0002", 12)),
        ("H-0c42a10301000004[1]", ("H-0c42a10301000004", 1)),
    ],
)
def test_parse_target(text: str, want: tuple[str, int | None]) -> None:
    assert control.parse_target(text) == want


@pytest.mark.parametrize("text", ["", "cn0001[", "cn0001[x]", "cn0001[1]x", "a b", "[1]"])
def test_parse_target_rejects(text: str) -> None:
    with pytest.raises(LabError, match="expected NODE or NODE\\[PORT\\]"):
        control.parse_target(text)


def test_requests_are_served_in_order_and_answered(paths: LabPaths) -> None:
    folder = control.control_dir(paths)
    folder.mkdir()
    requests = [
        ("002", {"op": "link", "args": {"action": "down", "targets": [["cn0001", 1]]}}),
        ("001", {"op": "opensm", "args": {"action": "restart", "timeout": 5}}),
        ("003", {"op": "opensm", "args": {"action": "start", "timeout": 0.5}}),
        ("004", {"op": "reboot", "args": {}}),
        ("005", {"op": "link", "args": {"action": "up"}}),
        ("006", ["not", "a", "request"]),
    ]
    for rid, req in requests:
        (folder / f"{rid}.request").write_text(json.dumps(req))
    (folder / "007.request").write_text("{truncated")
    lab = StubLab(paths)
    assert control.serve_pending(lab, lambda: False) == 7
    assert lab.calls == [("restart", 5.0), ("down", [("cn0001", 1)]), ("start", 0.5)]
    replies = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.reply")}
    assert sorted(replies) == [f"00{i}" for i in range(1, 8)]
    assert not list(folder.glob("*.request"))
    assert replies["001"] == {"ok": True, "result": {"running": True, "pid": 42, "note": "up"}}
    assert replies["002"] == {"ok": True, "result": ["cn0001 down"]}
    assert replies["003"]["error"] == "lab t: OpenSM did not bring the subnet up within 0 s"
    assert "unknown control request 'reboot'" in replies["004"]["error"]
    assert "malformed control request" in replies["005"]["error"]
    assert "malformed control request" in replies["006"]["error"]
    assert "malformed control request None" in replies["007"]["error"]


def test_ask_without_a_supervisor(paths: LabPaths) -> None:
    with pytest.raises(LabError, match="lab t has no running supervisor"):
        control.ask(paths, "opensm", {"action": "stop"}, 1.0)
    paths.state.write_text(json.dumps({"procs": {"supervisor": {"pid": 1, "start": 1}}}))
    with pytest.raises(LabError, match="no running supervisor"):
        control.ask(paths, "opensm", {"action": "stop"}, 1.0)
    with pytest.raises(LabError, match="no lab nosuch"):
        control.ask(LabPaths(paths.root, "nosuch"), "opensm", {}, 1.0)


def test_ask_round_trip_and_timeout(paths: LabPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    deaf = procs.spawn([sys.executable, "-c", DEAF], env=os.environ, cwd=paths.dir)
    try:
        time.sleep(0.3)  # its handler is set before anyone signals it
        record_supervisor(paths, deaf.pid)
        lab = StubLab(paths)
        stop = threading.Event()

        def supervise() -> None:
            while not stop.wait(0.02):
                control.serve_pending(lab, stop.is_set)

        server = threading.Thread(target=supervise)
        server.start()
        try:
            got = control.ask(paths, "link", {"action": "up", "targets": [["cn1", None]]}, 5)
            assert got == ["cn1 up"]
            with pytest.raises(LabError, match=r"^lab t: OpenSM did not bring"):
                control.ask(paths, "opensm", {"action": "start", "timeout": 0.5}, 5)
        finally:
            stop.set()
            server.join()
        assert not list(control.control_dir(paths).iterdir())  # replies taken
        monkeypatch.setattr(control, "MARGIN_S", 0.0)
        with pytest.raises(LabError, match="no answer from its supervisor to opensm within 0 s"):
            control.ask(paths, "opensm", {"action": "stop"}, 0.2)
        assert not list(control.control_dir(paths).iterdir())  # request withdrawn
    finally:
        procs.stop_child(deaf)


def test_hidden_log_is_put_back(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    log.write_text("one\n")
    with faults.hidden_log(log) as hidden:
        assert not log.exists() and hidden.read_text() == "one\n"
        with hidden.open("a") as fh:  # OpenSM writes on into the file it holds open
            fh.write("two\n")
    assert log.read_text() == "one\ntwo\n" and not hidden.exists()
    # a new log made meanwhile (OpenSM restarted) stays; the hidden one is left beside it
    with faults.hidden_log(log) as hidden:
        log.write_text("new\n")
    assert log.read_text() == "new\n" and hidden.read_text() == "one\ntwo\n"
    with pytest.raises(LabError, match="cannot hide OpenSM's log"):
        with faults.hidden_log(tmp_path / "missing.log"):
            pass


def test_stale_pid_decoy_counts_sighups_and_is_cleaned_up(tmp_path: Path) -> None:
    pid_file = tmp_path / "opensm.pid"
    pid_file.write_text("12345\n")
    with faults.stale_pid(pid_file) as decoy:
        assert pid_file.read_text() == f"{decoy.pid}\n"
        assert decoy.hups() == 0
        os.kill(int(pid_file.read_text()), signal.SIGHUP)  # what a reload would do
        deadline = time.monotonic() + 5
        while decoy.hups() < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert decoy.hups() == 1
        assert decoy.proc.poll() is None  # it did not die of it
    assert pid_file.read_text() == "12345\n"
    assert decoy.proc.returncode is not None and not decoy.hup_file.exists()
    # a pid file rewritten meanwhile (a restarted OpenSM) is left alone
    with faults.stale_pid(pid_file):
        pid_file.write_text("777\n")
    assert pid_file.read_text() == "777\n"
    pid_file.unlink()
    with faults.stale_pid(pid_file):
        pass
    assert not pid_file.exists()


def test_opensm_start_waits_for_this_starts_subnet_up(tmp_path: Path) -> None:
    files = OpenSMFiles(tmp_path)
    old = "Entering MASTER state\nSUBNET UP\nExiting SM\n"
    files.log.write_text(old)
    osm = OpenSM(files, os.environ, tmp_path)
    osm._log_from = osm._log_end()  # as spawn() records it
    osm.proc = procs.spawn(["sleep", "30"], env=os.environ, cwd=tmp_path)
    try:
        with pytest.raises(LabError, match="did not bring the subnet up within 0 s"):
            osm.wait_up(0.3)  # the previous run's lines do not count
        with files.log.open("a") as fh:
            fh.write("Entering MASTER state\nSUBNET UP\n")
        osm.wait_up(5)
        assert osm.note == "up"
        # a log replaced since (renamed away) is read from its start
        files.log.rename(tmp_path / "old.log")
        files.log.write_text("Entering MASTER state\nSUBNET UP\n")
        osm._log_from = (osm._log_from[0], 10**6)
        osm.wait_up(5)
        assert osm.info() == {"running": True, "pid": osm.proc.pid, "note": "up"}
    finally:
        osm.stop()
    assert osm.note.startswith("stopped, exit status")
    assert osm.info()["running"] is False and osm.info()["pid"] is None
    assert not files.pid.exists()
