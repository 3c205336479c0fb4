"""Another writer of OpenSM's files beside ibqos, and ``ibqos restore``, on a real OpenSM.

Config management (Ansible, Puppet, Salt) that owns opensm.conf and the QoS policy puts
its template back on every run.  Without ibqos's blocks in the template, each run undid
ibqos's plan on disk and ibqos wrote it back with a reload: a rewrite every 5 s gave 7
reloads in 80 s, then 2 a minute for as long as it ran.  Now ibqos sees that someone
else rewrote its lines, holds (nothing written, OpenSM not signalled), says so in a
metric and one log line, and writes the files once more when they stand still for
``opensm.outside_quiet_s``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ibqos.opensm.conf import strip_conf
from ibqos.opensm.policy import strip_policy
from tests.faults.faultcheck import Guard, job
from tests.support.agentrun import write_jobs

A = job("A", "cn[0001-0002]")
B = job("B", "cn[0003,0007]")
C = job("C", "cn[0004,0008]")
IBQOS = Path(sys.executable).parent / "ibqos"
#: seconds the files must stand still after the writer's last rewrite (300 by default)
QUIET_S = 12.0


class Rewriter:
    """Config management in a thread: puts *template* back every *every_s* seconds, as a
    temporary file renamed over each target, and never signals OpenSM."""

    def __init__(self, template: dict[Path, str], every_s: float) -> None:
        self.template = template
        self.every_s = every_s
        self.runs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Rewriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for path, text in self.template.items():
                tmp = path.with_name(f".{path.name}.cm-tmp")
                tmp.write_text(text)
                os.replace(tmp, path)
            self.runs += 1
            self._stop.wait(self.every_s)


def template(guard: Guard) -> dict[Path, str]:
    """The admin's files without ibqos's lines: a template kept before ibqos ran."""
    osm = guard.lab.paths.opensm
    orig = (guard.tmp_path / "state" / "backup" / "opensm.conf.orig").read_text()
    return {
        osm.conf: strip_conf(osm.conf.read_text(), orig),
        osm.policy: strip_policy(osm.policy.read_text()),
    }


def test_config_management_rewriting_the_files_is_held_off_not_fought(agent_on_lab) -> None:
    """A rewrite every 3 s for 45 s, no SIGHUP: at most one reload, then a hold visible in
    the metrics; job C, which starts meanwhile, is not handed an SL OpenSM does not serve.
    Once the writer stops, the files are written once more after the quiet period."""
    guard = agent_on_lab(A, B, opensm={"outside_quiet_s": QUIET_S})
    sweeps = guard.sweeps()
    applies = guard.metric("ibqos_opensm_applies_total") or 0
    files = template(guard)
    t0 = time.monotonic()
    with Rewriter(files, 3.0) as writer:
        guard.drive(lambda: guard.metric("ibqos_opensm_outside_writer") == 1, 20)
        held_after = time.monotonic() - t0
        write_jobs(guard.lab, A, B, C)
        guard.drive(lambda: time.monotonic() - t0 >= 45, 60)
        assert guard.metric("ibqos_opensm_outside_writer") == 1
        reloads = guard.sweeps() - sweeps
        writes = guard.metric("ibqos_opensm_outside_writes_total") or 0
        print(
            f"rewrites {writer.runs} in {time.monotonic() - t0:.0f} s: OpenSM reloads"
            f" {reloads}, outside writes seen {writes:g}, held after {held_after:.1f} s"
        )
        assert reloads <= 1  # the measured storm was 7 in 80 s
        assert (guard.metric("ibqos_opensm_applies_total") or 0) - applies <= 1
        assert writes >= writer.runs // 2  # every rewrite seen, at the cycle's pace
        assert (guard.metric("ibqos_opensm_rejected") or 0) == 0
        guard.check_sls(["A", "B", "C"])
        assert not guard.served("C")  # its SL waits: OpenSM does not serve it
        guard.check_alive("C")
    log = guard.log()
    assert log.count("keep ibqos's managed blocks out of its template") == 1  # said once
    assert log.count("cycle failed: apply: held, nothing written") <= 1
    # the writer stopped: after the quiet period ibqos writes the files once more
    sweeps = guard.sweeps()
    t_stop = time.monotonic()
    guard.in_force("A", "B", "C", timeout=QUIET_S + 30)
    took = time.monotonic() - t_stop
    print(
        f"in force again {took:.1f} s after the writer stopped, reloads {guard.sweeps() - sweeps}"
    )
    assert took >= QUIET_S - 4  # not before the files stood still (the last rewrite <= 3 s ago)
    assert guard.metric("ibqos_opensm_outside_writer") == 0
    assert 1 <= guard.sweeps() - sweeps <= 2  # the write once more (and C's measured class)
    assert "stood unchanged for 12 s since another writer" in guard.log()
    guard.check_files()
    guard.check_sls(["A", "B", "C"])


def test_a_template_that_keeps_ibqos_blocks_out_ends_the_hold(agent_on_lab) -> None:
    """The admin fixes the template so that it leaves ibqos's blocks alone (Ansible
    blockinfile, Salt file.blockreplace): the files carry ibqos's lines again and the hold
    ends at the next cycle, with no reload."""
    guard = agent_on_lab(A, B)  # the quiet period is 300 s: only the fix ends the hold
    mine = guard.files()
    files = template(guard)
    sweeps = guard.sweeps()
    with Rewriter(files, 2.0):
        guard.drive(lambda: guard.metric("ibqos_opensm_outside_writer") == 1, 20)
        guard.settle(6)
    assert guard.sweeps() == sweeps  # the template equals the admin's part: no write at all
    guard.check_sls(["A", "B"])
    with Rewriter(mine, 2.0):  # the fixed tool: its own lines, ibqos's block left in place
        guard.drive(lambda: guard.metric("ibqos_opensm_outside_writer") == 0, 15)
        guard.settle(4)
        assert guard.metric("ibqos_opensm_outside_writer") == 0
    assert guard.sweeps() == sweeps
    assert "the hold on the other writer ends" in guard.log()
    guard.in_force("A", "B")
    guard.check_alive("A")


def test_restore_keeps_the_admins_edits_and_is_verified_through_the_sa(agent_on_lab) -> None:
    """``ibqos restore`` after the admin edited both files while ibqos ran: only ibqos's
    blocks and keys go, the edits stay, OpenSM re-reads the files (one heavy sweep) and
    the SA serves the admin's DEFAULT SL on the jobs' paths again."""
    guard = agent_on_lab(A, B)
    osm = guard.lab.paths.opensm
    assert guard.stop() == 0
    orig = (guard.tmp_path / "state" / "backup" / "opensm.conf.orig").read_text()
    # the admin's edits since ibqos's first write: an option, and the DEFAULT level's SL
    edit = "# the admin's edit while ibqos ran\nlog_max_size 0\n"
    osm.conf.write_text(edit + osm.conf.read_text())
    policy = osm.policy.read_text()
    assert policy.count("    sl: 0\n") >= 1  # the lab's DEFAULT level, in the admin's part
    osm.policy.write_text(
        "# DEFAULT moved to SL 1\n" + policy.replace("    sl: 0\n", "    sl: 1\n", 1)
    )
    sweeps = guard.sweeps()
    out = subprocess.run(
        [str(IBQOS), "restore", "--config", str(guard.config)],
        env=guard.lab.env(),
        cwd=guard.tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"restored {osm.conf}" in out.stdout and "OpenSM: applied" in out.stdout
    assert "verified: the SA serves SL 1 (the admin's DEFAULT) on 2 path(s)" in out.stdout
    conf = osm.conf.read_text()
    assert conf == edit + orig  # ibqos's block gone, the admin's qos line back, the edit kept
    restored = osm.policy.read_text()
    assert "ibqos_" not in restored and "ibqos managed" not in restored
    assert restored.startswith("# DEFAULT moved to SL 1\n")
    assert "    sl: 1\n" in restored
    assert guard.sweeps() == sweeps + 1  # OpenSM re-read them once
    for job_id in ("A", "B"):
        assert guard.sa_sl(job_id) == 1
    guard.good = guard.files()
    guard.check_files()
