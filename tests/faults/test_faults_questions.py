"""Questions a user can put to the job-SL server: a job id with a space, and thousands of
ids nobody runs.

A job file may name a job ``job 7``: ``job-sl`` must ask for it whole (not for ``job``),
and get the SL the SA serves.  A loop of questions for unknown ids must be answered,
counted, and logged at a bounded rate, while the agent goes on applying.
"""

from __future__ import annotations

import pytest

from ibqos.agent import handoff
from ibqos.errors import HandoffError
from tests.faults.faultcheck import job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
SPACED = job("job 7", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")
#: questions for ids nobody runs
UNKNOWN = 3000


def test_a_job_id_with_a_space_is_asked_whole(agent_on_lab) -> None:
    guard = agent_on_lab(A, SPACED)
    sls = guard.in_force("A", "job 7")
    assert guard.sa_sl("job 7") == sls["job 7"]
    with pytest.raises(HandoffError, match="job job is not running"):
        guard.sl("job", 1.0)  # the id's first word is another job, which nobody runs
    guard.check_sls(["A", "job 7"])
    guard.check_alive("job 7")


def test_thousands_of_unknown_ids_are_counted_and_logged_at_a_bounded_rate(agent_on_lab) -> None:
    guard = agent_on_lab(A, SPACED)
    unknown = guard.metric("ibqos_job_sl_requests_total", result="unknown") or 0
    sweeps = guard.sweeps()
    for n in range(UNKNOWN):
        with pytest.raises(HandoffError):
            guard.sl(f"nobody{n}", 1.0)
    write_jobs(guard.lab, A, SPACED, C)  # the agent goes on applying
    guard.in_force("A", "job 7", "C")
    counted = guard.metric("ibqos_job_sl_requests_total", result="unknown") or 0
    assert counted - unknown == UNKNOWN
    lines = [line for line in guard.log().splitlines() if "job-sl: job nobody" in line]
    assert len(lines) <= handoff.MISS_LINES
    guard.check_sls(["A", "job 7", "C"])
    guard.check_alive("C")
    assert guard.sweeps() - sweeps <= 6  # opensm.reload_budget.burst
