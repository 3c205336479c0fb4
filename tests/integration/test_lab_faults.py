"""Faults injected into a supervised lab: OpenSM stopped, started, restarted or killed,
and links taken down and up, through ``ibqos lab opensm|link`` and the supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ibqos.fabric.topology import Port, parse_ibnetdiscover
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab import faults, manage
from ibqos.lab.lab import Lab
from ibqos.lab.procs import ProcRef, alive

NAME = "faults"


class Supervised:
    """The module's lab, driven as a user drives it: the ``ibqos`` CLI."""

    def __init__(self, root: Path, lab: Lab) -> None:
        self.root, self.lab = root, lab
        self.env = dict(os.environ, IBQOS_LAB_ROOT=str(root))

    def ibqos(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ibqos", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def status(self) -> dict[str, Any]:
        return manage.status(NAME, root=self.root)

    def run(self, *argv: str, host: str | None = None) -> subprocess.CompletedProcess[str]:
        """A diag attached to the lab (from this process, as 'lab run' does)."""
        return self.lab.run(list(argv), host=host, timeout=30)

    def opensm_log(self) -> str:
        return self.lab.paths.opensm.log.read_text()


@pytest.fixture(scope="module")
def sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    root = tmp_path_factory.mktemp("faults") / "labs"
    lab = manage.up(NAME, build_xgft(parse_xgft("2;4,2;1,2")), root=root, tick_s=0.2, timeout=60)
    try:
        yield Supervised(root, lab)
    finally:
        if (root / NAME).exists():
            manage.down(NAME, root=root)


def wait_for(what: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def reaped(pid: int) -> bool:
    """No process, not even a zombie, has *pid* (its parent waited for it)."""
    return not Path(f"/proc/{pid}").exists()


def test_opensm_stop_start_restart(sup: Supervised) -> None:
    osm = sup.lab.paths.opensm
    first = sup.status()["opensm"]
    assert first["running"] and first["pid"] == int(osm.pid.read_text())
    log_start = sup.opensm_log()[:200]

    out = sup.ibqos("lab", "opensm", "stop", NAME).stdout
    assert "OpenSM is not running" in out
    info = sup.status()
    assert info["status"] == "up" and info["opensm"]["running"] is False
    assert info["opensm"]["pid"] is None and "opensm" not in info["processes"]
    assert reaped(first["pid"]) and not osm.pid.exists()
    # the fabric stays: SMPs are answered by ibsim, the SA (OpenSM) is gone
    assert "Ca\t" in sup.run("ibnetdiscover").stdout
    assert sup.run("saquery", "NR").returncode != 0

    again = sup.ibqos("lab", "opensm", "stop", NAME, check=False)
    assert again.returncode == 1 and "OpenSM is not running" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    ups = sup.opensm_log().count("SUBNET UP")
    out = sup.ibqos("lab", "opensm", "start", NAME, "--timeout", "30").stdout
    second = sup.status()["opensm"]
    assert second["running"] and second["pid"] != first["pid"]
    assert f"pid {second['pid']}" in out and int(osm.pid.read_text()) == second["pid"]
    log = sup.opensm_log()
    assert log.startswith(log_start) and log.count("SUBNET UP") > ups  # appended to
    assert "NodeDescription" in sup.run("saquery", "NR").stdout  # the SA answers again

    late = sup.ibqos("lab", "opensm", "start", NAME, check=False)
    assert late.returncode == 1 and "already runs" in late.stderr

    sup.ibqos("lab", "opensm", "restart", NAME)
    third = sup.status()["opensm"]
    assert third["running"] and third["pid"] not in (first["pid"], second["pid"])
    assert reaped(second["pid"])
    assert sup.opensm_log().count("SUBNET UP") > log.count("SUBNET UP")


def test_opensm_killed_is_recorded_and_the_lab_runs_on(sup: Supervised) -> None:
    pid = sup.status()["opensm"]["pid"]
    os.kill(pid, signal.SIGKILL)  # a crash; the lab started this process
    wait_for(
        lambda: "exited on its own" in sup.status()["opensm"]["note"],
        10,
        "the supervisor did not notice OpenSM's exit",
    )
    info = sup.status()
    assert info["status"] == "up" and not info["opensm"]["running"]
    assert reaped(pid)
    # umad2sim's fake sysfs of the killed OpenSM is cleaned up
    assert not (sup.lab.paths.run / f"sys-{pid}").exists()
    ticks = info["ticks"]
    wait_for(lambda: sup.status()["ticks"] > ticks, 10, "the lab stopped ticking")
    sup.ibqos("lab", "opensm", "start", NAME)
    assert sup.status()["opensm"]["running"]


def test_link_down_and_up_of_a_host_port(sup: Supervised) -> None:
    # the LIDs OpenSM gave, as the supervisor discovered them
    found = parse_ibnetdiscover(sup.lab.paths.discovered.read_text(), "ibnetdiscover.txt")
    host = next(ca for ca in found.cas() if ca.hostname == "cn0002")
    lid = found.lids[Port(host.id, 1)]

    def reachable() -> tuple[bool, bool]:
        found = "cn0002 " in sup.run("ibnetdiscover").stdout
        pq = sup.run("perfquery", "-x", str(lid), "1")
        return found, pq.returncode == 0

    assert reachable() == (True, True)
    out = sup.ibqos("lab", "link", "down", NAME, "cn0002[1]").stdout
    assert out.strip() == f"lab {NAME}: cn0002 port 1 down"
    assert reachable() == (False, False)  # ibsim took it down before answering

    refused = sup.ibqos("lab", "link", "down", NAME, "cn0002[1]", check=False)
    assert refused.returncode == 1 and "is not linked" in refused.stderr

    sup.ibqos("lab", "link", "up", NAME, "cn0002[1]")
    # ibsim relinks at once; OpenSM takes the port to Active after the trap's sweep
    wait_for(lambda: reachable() == (True, True), 20, "cn0002 did not come back")


def test_link_down_and_up_of_a_switch(sup: Supervised) -> None:
    """Every link of a spine at once: its leaves lose one uplink each, hosts stay."""
    spine = "sw-L2-0001"
    assert f"{spine}" in sup.run("ibnetdiscover").stdout
    sup.ibqos("lab", "link", "down", NAME, spine)
    disc = sup.run("ibnetdiscover").stdout
    assert spine not in disc and "cn0008 " in disc
    sup.ibqos("lab", "link", "up", NAME, spine)
    assert spine in sup.run("ibnetdiscover").stdout


def test_bad_link_targets_say_what_is_wrong(sup: Supervised) -> None:
    for target, words in (
        ("nosuch", "no node 'nosuch'"),
        ("cn0002[2]", "cn0002 has ports 1-1"),
        ("cn0002[x", "expected NODE or NODE[PORT]"),
    ):
        done = sup.ibqos("lab", "link", "down", NAME, target, check=False)
        assert done.returncode == 1 and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert (sup.root / NAME / "control").is_dir()
    assert list((sup.root / NAME / "control").iterdir()) == []  # nothing left behind


def test_down_ends_exactly_the_running_processes(sup: Supervised) -> None:
    state = json.loads(sup.lab.paths.state.read_text())
    refs = {k: ProcRef.from_dict(v) for k, v in state["procs"].items()}
    assert set(refs) == {"supervisor", "ibsim", "opensm"}
    assert all(alive(r) for r in refs.values())
    out = sup.ibqos("lab", "down", NAME).stdout
    assert "supervisor" in out
    assert not any(alive(r) for r in refs.values())
    # the supervisor reaped its children; it is itself detached (init reaps it)
    assert reaped(refs["ibsim"].pid) and reaped(refs["opensm"].pid)
    assert not (sup.root / NAME).exists()


def test_in_process_lab_api_and_file_faults(make_lab: Callable[..., Lab]) -> None:
    """The same faults on a Lab run in the test's own process, plus OpenSM's files."""
    lab = make_lab("1;4;1", name="inproc")
    host = Port(lab.resolve_node("cn0001"), 1)

    def perfquery_ok() -> bool:
        lid = str(lab.topo.lids[host])
        return lab.run(["perfquery", "-x", lid, "1"], timeout=30).returncode == 0

    def recorded() -> dict[str, Any]:
        return dict(json.loads(lab.paths.state.read_text())["procs"])

    first = lab.opensm_info()["pid"]
    assert recorded()["opensm"]["pid"] == first
    assert lab.stop_opensm() == 0
    assert lab.opensm_info() == {
        "running": False,
        "pid": None,
        "note": "stopped, exit status 0",
    }
    assert "opensm" not in recorded() and reaped(first)
    assert lab.start_opensm(30) > 0
    assert recorded()["opensm"]["pid"] == lab.opensm_info()["pid"] != first
    lab.restart_opensm(30)
    assert lab.run(["saquery", "NR"]).returncode == 0

    assert lab.link_down("cn0001", 1) == "cn0001 port 1 down"
    assert not perfquery_ok()
    assert lab.link_up("cn0001", 1) == "cn0001 port 1 up"
    wait_for(perfquery_ok, 20, "cn0001 did not come back")

    osm = lab.opensm
    assert osm is not None and osm.proc is not None
    log = lab.paths.opensm.log
    with faults.hidden_log(log) as hidden:
        size = hidden.stat().st_size
        osm.proc.send_signal(signal.SIGHUP)  # a reload: OpenSM logs its sweep...
        wait_for(lambda: hidden.stat().st_size > size, 10, "OpenSM logged nothing")
        assert not log.exists()  # ...into the file it holds, not a new one at the path
    assert log.exists() and not hidden.exists()

    with faults.stale_pid(lab.paths.opensm.pid) as decoy:
        # the lab ends its own OpenSM, whatever its pid file says
        running = osm.proc.pid
        lab.stop_opensm()
        assert reaped(running) and decoy.proc.poll() is None and decoy.hups() == 0
        lab.start_opensm(30)  # writes its own pid, which stale_pid then leaves alone
    assert int(lab.paths.opensm.pid.read_text()) == lab.opensm_info()["pid"]
