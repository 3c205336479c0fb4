"""The re-check of the SLs in force (ibqos.opensm.served), on a fake SA and a fake clock."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from ibqos.errors import IbqosError
from ibqos.opensm import served as served_mod
from ibqos.opensm.served import (
    RETRY_S,
    SAMPLE_JOBS,
    Identity,
    OpenSMRuns,
    Recheck,
    opensm_identity,
)

WINDOW_S = 30.0


class FakeSA:
    """``saquery PR``: the SL of the path from LID *slid* (job n has LIDs 2n, 2n+1)."""

    def __init__(self, job_sl: dict[str, int]) -> None:
        self.sl: dict[int, int | None] = {}
        for n, sl in enumerate(job_sl.values()):
            self.sl[2 * n] = sl
        self.asked: list[int] = []
        self.down = False

    def __call__(self, argv: Sequence[str]) -> str:
        assert list(argv[:3]) == ["saquery", "PR", "--slid"]
        if self.down:
            raise IbqosError("saquery: timed out")
        slid = int(argv[3])
        self.asked.append(slid)
        sl = self.sl[slid]
        if sl is None:
            return ""  # the SA answered, without a record
        return f"PathRecord dump:\n\t\tdlid....0x{slid + 1:x}\n\t\tsl......0x{sl:x}\n"


class Setup:
    def __init__(self, tmp_path: Path, jobs: int) -> None:
        self.job_sl = {f"J{n:03d}": n % 8 for n in range(jobs)}
        self.lids = {job: [2 * n, 2 * n + 1] for n, job in enumerate(self.job_sl)}
        self.sa = FakeSA(self.job_sl)
        self.files = (tmp_path / "opensm.conf", tmp_path / "qos-policy.conf")
        for path in self.files:
            path.write_text("qos TRUE\n")
        self.now = 0.0
        self.identity: Identity = (100, 1.0)
        self.recheck = Recheck(
            self.files,
            self.sa,
            window_s=WINDOW_S,
            identity=lambda: self.identity,
            clock=lambda: self.now,
        )

    def check(self, withdrawn: dict[str, int] | None = None) -> served_mod.Verdict:
        self.sa.asked.clear()
        return self.recheck.check(self.job_sl, withdrawn or {}, self.lids)

    def tick(self, seconds: float = 10.0) -> served_mod.Verdict:
        self.now += seconds
        return self.check()


def test_every_job_at_start_then_a_sample_in_turn(tmp_path: Path) -> None:
    s = Setup(tmp_path, 10)
    first = s.check()
    assert first.full and first.served == set(s.job_sl) and first.checked == 10
    s.now = WINDOW_S + 1  # the window after the start is over
    seen: list[int] = []
    for _ in range(3):
        verdict = s.tick(1.0)
        assert not verdict.full and verdict.checked == SAMPLE_JOBS and not verdict.unserved
        seen += s.sa.asked
    assert set(seen) == {2 * n for n in range(10)}  # 12 asks go round all 10 jobs


def test_an_unserved_sl_and_a_missing_path(tmp_path: Path) -> None:
    s = Setup(tmp_path, 3)
    s.sa.sl[0] = 0  # J000 has SL 0 in the plan: served
    s.sa.sl[2] = 0  # J001 planned on SL 1
    s.sa.sl[4] = None
    verdict = s.check()
    assert verdict.served == {"J000"}
    assert verdict.unserved == {"J001": (1, 0), "J002": (2, None)}


@pytest.mark.parametrize("change", ["files", "identity", "request"])
def test_a_change_under_opensm_rechecks_every_job_for_the_window(
    tmp_path: Path, change: str
) -> None:
    s = Setup(tmp_path, 10)
    s.check()
    s.now = 100.0
    assert not s.tick().full
    if change == "files":
        s.files[1].write_text("qos FALSE\n")
    elif change == "identity":
        s.identity = (200, 150.0)
    else:
        s.recheck.request_all("the SM changed")
    for _ in range(3):  # 0, 10 and 20 s after it: within the window
        verdict = s.tick()
        assert verdict.full and verdict.checked == 10
    s.tick()
    assert not s.tick().full  # 40 s after it


def test_ibqos_s_own_write_is_no_change(tmp_path: Path) -> None:
    s = Setup(tmp_path, 10)
    s.check()
    s.now = 100.0
    s.files[0].write_text("qos TRUE\nqos_ca_sl2vl 0,1\n")
    s.recheck.files_written()
    assert not s.tick().full


def test_opensm_stopped_asks_nothing_and_everything_once_it_runs(tmp_path: Path) -> None:
    s = Setup(tmp_path, 5)
    s.check()
    s.now = 100.0
    s.identity = None
    verdict = s.tick()
    assert not verdict.answered and verdict.checked == 0 and not s.sa.asked
    assert s.recheck.opensm_down
    assert not s.recheck.confirm(s.job_sl, s.lids).answered
    s.identity = (300, 200.0)
    verdict = s.tick()
    assert verdict.full and verdict.checked == 5


def test_a_failed_query_stops_the_check_and_the_rest_follow(tmp_path: Path) -> None:
    s = Setup(tmp_path, 6)
    s.sa.down = True
    verdict = s.check()
    assert not verdict.answered and verdict.checked == 1 and not verdict.served
    s.sa.down = False
    s.now = WINDOW_S + 1  # past the window: the jobs left are still asked, all of them
    verdict = s.check()
    assert verdict.full and verdict.served == set(s.job_sl)
    assert not s.tick(1.0).full
    s.sa.down = True  # outside the window, a failure pauses the re-check
    assert not s.tick(1.0).answered
    s.sa.down = False
    s.now += RETRY_S - 1
    verdict = s.check()
    assert not verdict.answered and not s.sa.asked
    assert s.tick(1.0).answered and s.sa.asked


def test_withdrawn_jobs_are_asked_every_cycle(tmp_path: Path) -> None:
    s = Setup(tmp_path, 10)
    s.check()
    s.now = 100.0
    in_force = {j: sl for j, sl in s.job_sl.items() if j != "J009"}
    s.sa.asked.clear()
    verdict = s.recheck.check(in_force, {"J009": 5}, s.lids)  # the SA serves it SL 1
    assert verdict.unserved == {"J009": (5, 1)} and 18 in s.sa.asked
    assert verdict.checked == SAMPLE_JOBS + 1
    s.sa.sl[18] = 5
    s.sa.asked.clear()
    verdict = s.recheck.check(in_force, {"J009": 5}, s.lids)
    assert "J009" in verdict.served and 18 in s.sa.asked


def test_a_full_check_is_bounded_per_cycle(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(served_mod, "FULL_JOBS", 4)
    s = Setup(tmp_path, 10)
    assert s.check().checked == 4
    s.now = WINDOW_S + 1
    assert s.tick(1.0).checked == 4
    verdict = s.recheck.check(s.job_sl, {"J000": 7, "J001": 7, "J002": 7}, s.lids)
    assert verdict.checked == 4  # the last two of the full check, two of the withdrawn


def test_jobs_without_lids_are_not_asked(tmp_path: Path) -> None:
    s = Setup(tmp_path, 2)
    s.lids["J001"] = []
    verdict = s.check()
    assert verdict.served == {"J000"} and verdict.checked == 1


def test_identity_from_the_pid_file(tmp_path: Path) -> None:
    assert opensm_identity(None) == served_mod.UNKNOWN
    pid_file = tmp_path / "opensm.pid"
    assert opensm_identity(pid_file) is None  # no pid file: no OpenSM
    pid_file.write_text("1\n")
    assert opensm_identity(pid_file) is None  # pid 1 is never OpenSM's


def test_a_job_event_s_cycle_skips_the_sample(tmp_path: Path) -> None:
    """A cycle for a job that starts asks only what is due: the new job's SL waits on it."""
    s = Setup(tmp_path, 10)
    s.check()
    s.now = 100.0
    in_force = {j: sl for j, sl in s.job_sl.items() if j != "J009"}
    s.sa.asked.clear()
    verdict = s.recheck.check(in_force, {"J009": 1}, s.lids, sample=False)
    assert s.sa.asked == [18] and verdict.served == {"J009"}
    s.files[0].write_text("qos FALSE\n")
    assert s.recheck.check(in_force, {}, s.lids, sample=False).checked == 9  # due: all


@pytest.mark.parametrize(("main_pid", "want"), [("0", None), ("self", "self"), ("", "unknown")])
def test_identity_from_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, main_pid: str, want: str | None
) -> None:
    """``systemctl show --property=MainPID --value``: 0 when the unit does not run."""
    pid = os.getpid()
    printed = str(pid) if main_pid == "self" else main_pid
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(f"#!/bin/sh\necho '{printed}'\n")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    got = opensm_identity(None, "opensm.service")
    if want is None:
        assert got is None
    elif want == "unknown":
        assert got == served_mod.UNKNOWN
    else:
        assert got is not None and got[0] == pid and got[1] > 0


def test_within_the_window_a_failed_query_is_tried_again_at_once(tmp_path: Path) -> None:
    """OpenSM restarted: its SA answers only after its first sweep, so every cycle of the
    window asks again; outside it, a failure pauses the re-check."""
    s = Setup(tmp_path, 3)
    s.check()
    s.now = 100.0
    s.identity = (400, 99.0)
    s.sa.down = True
    assert not s.tick(1.0).answered
    s.sa.down = False
    verdict = s.tick(1.0)
    assert verdict.answered and verdict.served == set(s.job_sl)


def test_whether_opensm_runs_is_read_from_its_pid_file_and_kept_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    pid_file = tmp_path / "opensm.pid"
    runs = OpenSMRuns(pid_file, ttl_s=0.5, clock=lambda: now[0])
    assert runs() is False  # no pid file: no OpenSM
    monkeypatch.setattr(served_mod, "opensm_pid", lambda path: 4242)
    assert runs() is False  # the answer is kept for ttl_s
    now[0] = 0.6
    assert runs() is True
    assert OpenSMRuns(None)() is True  # nothing to tell by: the cycle's re-check decides
