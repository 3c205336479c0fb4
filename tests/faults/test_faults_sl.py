"""Faults of the job-SL socket: a user who floods it cannot take the agent down.

The agent runs under a low limit of open files (``prlimit --nofile``), and the test holds
more connections to its socket than that limit, each with an unfinished ``SL …``, and opens
new ones as the agent closes them.  Meanwhile a job starts: its SL must come into force (the
cycle keeps the file descriptors it needs), the agent must live and serve its metrics, the
refused connections must show, and ``job-sl`` must answer once the flood ends.
"""

from __future__ import annotations

from ibqos.lab.faults import SocketFlood
from tests.faults.faultcheck import job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")

#: the agent's limit of open files (soft and hard: it cannot raise it)
NOFILE = 256
#: connections the flood holds: more than the agent could ever open
FLOOD = 400
#: open files the server leaves to the cycle (ibqos.agent.slserve.FD_RESERVE)
RESERVE = 128


def test_a_connection_flood_under_a_low_open_file_limit_kills_nothing(agent_on_lab) -> None:
    guard = agent_on_lab(A, B, start=False)
    guard.start(prefix=("prlimit", f"--nofile={NOFILE}", "--"))
    guard.steady("A", "B")
    lab = guard.lab
    assert guard.metric("process_max_fds") == NOFILE
    assert guard.metric("ibqos_sl_connections_limit") == NOFILE - RESERVE
    assert guard.metric("ibqos_sl_server_up") == 1
    failures = guard.metric("ibqos_cycle_failures_total")
    sweeps = guard.sweeps()
    with SocketFlood(guard.socket, FLOOD) as flood:
        guard.drive(lambda: (guard.metric("ibqos_sl_connections") or 0) >= NOFILE - RESERVE, 20)
        guard.drive(
            lambda: (guard.metric("ibqos_sl_connections_refused_total", reason="total") or 0) > 0,
            20,
        )
        write_jobs(lab, A, B, C)  # a job starts during the flood

        def c_applied() -> bool:
            in_force = (guard.state().get("in_force") or {}).get("job_sl", {})
            return "C" in in_force and guard.sa_sl("C") == in_force["C"]

        guard.drive(c_applied, 30)
        guard.settle(6)  # past agent.sl_idle_s: idle connections are closed and replaced
        assert guard.proc is not None and guard.proc.poll() is None, "the agent died"
        assert (guard.metric("process_open_fds") or NOFILE) < NOFILE
        assert guard.metric("ibqos_cycle_failures_total") == failures
        assert "Too many open files" not in guard.log()
        assert guard.metric("ibqos_sl_server_up") == 1
        assert flood.busy > 0 and flood.opened > FLOOD
    # the flood is over: job-sl answers, and only what the SA serves
    assert guard.in_force("A", "B", "C", timeout=20)
    guard.check_sls(["A", "B", "C"])
    guard.check_alive("C")
    guard.check_files()
    assert guard.sweeps() - sweeps <= 6  # opensm.reload_budget.burst
    refused = guard.metric("ibqos_sl_connections_refused_total", reason="total") or 0
    assert refused >= flood.busy > 0
    assert (guard.metric("ibqos_sl_connections_timed_out_total") or 0) > 0
    assert guard.metric("ibqos_sl_server_restarts_total") == 0
