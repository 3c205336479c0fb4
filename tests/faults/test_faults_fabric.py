"""Faults of the fabric and its tools: a hung discovery, counters rewritten, ports gone."""

from __future__ import annotations

import os
import signal
import time

from ibqos.fabric.topology import Port
from ibqos.lab.counters import EXT, perfset
from tests.faults.faultcheck import job
from tests.support.agentrun import write_jobs
from tests.support.systemdunit import Systemd

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")


def test_a_hung_discovery_keeps_the_watchdog_fed_and_sigterm_ends_it(
    agent_on_lab, tmp_path
) -> None:
    """ibsim stopped (SIGSTOP): ibnetdiscover and every MAD hang.  The agent pings the
    watchdog through it and ends within 10 s of SIGTERM."""
    guard = agent_on_lab(A, B, start=False, fabric={"source": "ibnetdiscover", "refresh_s": 2.0})
    lab = guard.lab
    systemd = Systemd(tmp_path / "notify")
    guard.start(env={"NOTIFY_SOCKET": str(systemd.path), "WATCHDOG_USEC": "2000000"})
    assert lab.ibsim is not None and lab.ibsim.proc is not None
    ibsim = lab.ibsim.proc.pid
    stopped = False
    try:
        guard.steady("A", "B")
        os.kill(ibsim, signal.SIGSTOP)  # the lab's own ibsim, by pid
        stopped = True
        t0 = time.monotonic()
        time.sleep(8)  # a discovery (every 2 s) and sweeps now hang
        assert guard.proc is not None and guard.proc.poll() is None
        during = systemd.pings(after=t0)
        gaps = [b - a for a, b in zip([t0, *during], during, strict=False)]
        assert during and max(gaps) < 2.0, gaps  # never as long as WatchdogSec
        t1 = time.monotonic()
        guard.proc.send_signal(signal.SIGTERM)
        while "stopped while waiting on a tool or the fabric" not in guard.log():
            assert time.monotonic() - t1 < 10, "SIGTERM did not end the wait within 10 s"
            time.sleep(0.1)
        print(f"SIGTERM during a hung discovery: agent done after {time.monotonic() - t1:.1f} s")
        # umad2sim's exit handler waits for ibsim's goodbye (a real umad device does not):
        # the process itself ends once ibsim runs again
        os.kill(ibsim, signal.SIGCONT)
        stopped = False
        assert guard.stop() == 0
    finally:
        if stopped:
            os.kill(ibsim, signal.SIGCONT)
        systemd.close()


def test_counters_rewritten_give_no_implausible_rates(agent_on_lab) -> None:
    """A counter set far ahead (as after a reset and rewrite): the sample is dropped and
    counted, the job's intensity stays what the link can carry."""
    guard = agent_on_lab(A, B)
    lab = guard.lab
    assert guard.metric("ibqos_invalid_samples_total") == 0
    sweeps = guard.sweeps()
    host = Port(lab.resolve_node("cn0001"), 1)
    assert lab.ibsim is not None
    assert not lab.ibsim.command([perfset(host, f"{EXT}.PortXmitData", 2**50)])
    time.sleep(2.5)  # no ticks: the next sweeps read the value before the model rewrites it
    guard.drive(lambda: (guard.metric("ibqos_invalid_samples_total") or 0) >= 1, 10)
    guard.settle(3)
    jobs = {j["id"]: j for j in guard.state()["plan"]["jobs"]}
    assert jobs["A"]["intensity"] < 1.0 and jobs["A"]["class"] != "high"
    assert guard.sweeps() == sweeps
    guard.check_files()
    guard.check_sls(["A", "B"])
    guard.check_alive("A")


def test_a_sweep_that_reaches_too_few_ports_changes_no_plan(agent_on_lab) -> None:
    """Host links down: the sweeps reach too few ports; job A turns heavy meanwhile, but
    the plan waits for a sweep that reaches enough ports."""
    spread = job("A", "cn[0001,0005]")  # on two leaves: its traffic crosses the spines
    other = job("B", "cn[0002,0006]")
    guard = agent_on_lab(spread, other)
    lab = guard.lab
    down = ["cn0003", "cn0004", "cn0007", "cn0008"]  # 4 of 26 ports: coverage 0.85

    def classes() -> dict[str, str]:
        return {j["id"]: j["class"] for j in guard.state()["plan"]["jobs"]}

    assert classes()["A"] == "low"
    reloads = guard.metric("ibqos_opensm_reloads_total")
    for host in down:
        lab.link_down(host)
    guard.drive(lambda: (guard.metric("ibqos_sweep_coverage_ratio") or 1) < 0.9, 10)
    write_jobs(lab, spread | {"rate_bytes_per_s": 2.0e10}, other)  # A turns heavy
    guard.settle(5)  # longer than lanes.min_hold_s
    assert classes()["A"] == "low"
    # OpenSM sweeps on its own for the links that went down; ibqos signals it not once
    assert guard.metric("ibqos_opensm_reloads_total") == reloads
    guard.check_alive("A")
    for host in down:
        lab.link_up(host)
    guard.drive(lambda: guard.metric("ibqos_sweep_coverage_ratio") == 1, 15)
    guard.drive(lambda: classes()["A"] == "high", 20)
