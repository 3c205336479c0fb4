"""Faults that change what the SA serves behind ibqos's back: an outside rewrite of OpenSM's
files with QoS off, OpenSM restarted on another policy file, and a switch from observe to
enforce mode while OpenSM is stopped.

In each, ``job-sl`` must not hand out an SL the SA does not serve: the SLs in force are
re-checked through the SA (``ibqos.opensm.served``), withdrawn at once when not served
(``job-sl`` answers PENDING, ``ibqos_sl_unserved_jobs`` counts them), and handed out again
once the fault is cleared.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import yaml

from ibqos.agent.handoff import ask_sl
from ibqos.errors import HandoffError
from ibqos.lab.opensm import MINIMAL_POLICY
from ibqos.opensm import conf as osm_conf
from ibqos.opensm import policy as osm_policy
from tests.faults.faultcheck import SWEEP_DONE, Guard, job

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
JOBS = ["A", "B"]


def without_block(text: str, begin: str, end: str) -> str:
    """*text* without the lines from the one starting with *begin* to *end*'s."""
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(begin):
            inside = True
        if not inside:
            out.append(line)
        if inside and line.startswith(end):
            inside = False
    return "".join(out)


def with_key(text: str, key: str, value: str) -> str:
    """opensm.conf *text* with every ``key`` line set to *value* (appended when none)."""
    lines = text.splitlines(keepends=True)
    out = [f"{key} {value}\n" if line.split()[:1] == [key] else line for line in lines]
    return "".join(out) if out != lines else text + f"{key} {value}\n"


def hup_opensm(guard: Guard) -> None:
    """SIGHUP the lab's OpenSM, as the outside writer does, and wait for its heavy sweep."""
    log = guard.lab.paths.opensm.log
    before = log.read_text(errors="replace").count(SWEEP_DONE)
    os.kill(int(guard.lab.paths.opensm.pid.read_text()), signal.SIGHUP)
    deadline = time.monotonic() + 30
    while log.read_text(errors="replace").count(SWEEP_DONE) <= before:
        assert time.monotonic() < deadline, "no heavy sweep after SIGHUP"
        time.sleep(0.05)


def sample_sls(guard: Guard, seconds: float) -> None:
    """Ask ``job-sl`` again and again for *seconds*: never an SL the SA does not serve."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        guard.check_sls(JOBS)
        guard.settle(0.3)


def test_an_outside_rewrite_with_qos_off_withdraws_the_sls(agent_on_lab) -> None:
    """A template of opensm.conf (``qos FALSE``) and of the policy, without ibqos's blocks,
    written by someone else and OpenSM signalled.  The agent cannot put its files back here
    (their directory is read-only to it, as where config management owns them), so only
    the re-check stands between ``job-sl`` and the SA: the SLs are withdrawn within a cycle
    of OpenSM's sweep, and come back once the files are put back."""
    guard = agent_on_lab(A, B, start=False)
    # root in tests: drop every capability, so the directory's mode binds the agent too
    prefix = ("setpriv", "--bounding-set", "-all", "--inh-caps", "-all") if os.getuid() == 0 else ()
    guard.start(prefix=prefix)
    guard.steady(*JOBS)
    osm = guard.lab.paths.opensm
    good = guard.files()
    conf = without_block(good[osm.conf], osm_conf.BEGIN_MARK, osm_conf.END_MARK)
    policy = without_block(good[osm.policy], osm_policy.BEGIN_MARK, osm_policy.END_MARK)
    assert osm_policy.BEGIN_MARK not in policy and osm_conf.BEGIN_MARK not in conf
    withdrawals = guard.metric("ibqos_sl_withdrawals_total") or 0
    directory = osm.conf.parent
    mode = directory.stat().st_mode & 0o7777
    directory.chmod(0o555)
    try:
        osm.conf.write_text(with_key(conf, "qos", "FALSE"))  # in place: the files' owner
        osm.policy.write_text(policy or MINIMAL_POLICY)
        hup_opensm(guard)
        assert all(guard.sa_sl(j) == 0 for j in JOBS)  # QoS off: every path on SL 0
        took = guard.drive(lambda: guard.metric("ibqos_sl_unserved_jobs") == 2, 10)
        assert took < 5
        assert guard.metric("ibqos_sl_withdrawals_total") == withdrawals + 2
        sample_sls(guard, 6)
        assert not guard.served("A") and not guard.served("B")
        guard.check_alive("A")
        for path, text in good.items():  # cleared: the files put back, OpenSM signalled
            path.write_text(text)
        hup_opensm(guard)
        guard.in_force(*JOBS)
    finally:
        directory.chmod(mode)
    guard.drive(lambda: guard.metric("ibqos_sl_unserved_jobs") == 0, 10)
    guard.check_files()
    assert guard.metric("ibqos_sl_withdrawals_total") == withdrawals + 2


def test_opensm_restarted_on_another_policy_file_withdraws_the_sls(
    agent_on_lab, tmp_path: Path
) -> None:
    """``qos_policy_file`` pointed at a policy without ibqos's block (opensm.conf keeps
    ibqos's keys, so its files look as they should) and OpenSM restarted: the SA serves
    SL 0 for every job until OpenSM is restarted on ibqos's policy again."""
    guard = agent_on_lab(A, B)
    osm = guard.lab.paths.opensm
    good = guard.files()
    elsewhere = tmp_path / "site-policy.conf"
    elsewhere.write_text(MINIMAL_POLICY)
    osm.conf.write_text(with_key(good[osm.conf], "qos_policy_file", str(elsewhere)))
    guard.lab.restart_opensm()
    assert all(guard.sa_sl(j) == 0 for j in JOBS)
    guard.drive(lambda: guard.metric("ibqos_sl_unserved_jobs") == 2, 10)
    assert (guard.metric("ibqos_sl_withdrawals_total") or 0) >= 2
    sample_sls(guard, 6)
    assert not guard.served("A") and not guard.served("B")
    guard.check_alive("A")
    osm.conf.write_text(good[osm.conf])  # cleared: OpenSM restarted on ibqos's files
    guard.lab.restart_opensm()
    guard.in_force(*JOBS)
    guard.drive(lambda: guard.metric("ibqos_sl_unserved_jobs") == 0, 10)
    guard.check_files()


def test_observe_to_enforce_while_opensm_is_stopped_hands_out_nothing(agent_on_lab) -> None:
    """SIGHUP from observe to enforce mode while OpenSM is stopped: observe mode's proposal
    is not in force, so ``job-sl`` answers no SL until OpenSM runs and serves it."""
    guard = agent_on_lab(A, B, start=False)
    doc = yaml.safe_load(guard.config.read_text())
    guard.config.write_text(yaml.safe_dump(doc | {"mode": "observe"}))
    proc = guard.start()
    guard.drive(lambda: set((guard.state().get("in_force") or {}).get("job_sl", {})) >= {"A"}, 30)
    guard.drive(lambda: guard.metric("ibqos_dry_run") == 1, 10)
    guard.lab.stop_opensm()
    guard.config.write_text(yaml.safe_dump(doc))  # enforce
    proc.send_signal(signal.SIGHUP)
    end = time.monotonic() + 8
    while time.monotonic() < end:
        for job_id in JOBS:
            try:
                sl = ask_sl(job_id, 1.0, socket_path=guard.socket)
            except HandoffError:
                continue  # PENDING, or no server yet: the tasks start on the default SL
            raise AssertionError(f"job {job_id}: SL {sl} handed out while OpenSM is stopped")
        guard.settle(0.2)
    assert guard.metric("ibqos_dry_run") == 0 and guard.metric("ibqos_opensm_up") == 0
    guard.check_alive("A")
    guard.lab.start_opensm()
    guard.in_force(*JOBS)
    guard.check_sls(JOBS)
