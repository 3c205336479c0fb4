"""Does the SA still serve the SLs ibqos hands out?  The re-check of what is in force.

ibqos checks through the SA after each of its own applies (:mod:`ibqos.opensm.verify`), but
what OpenSM serves can change without ibqos: someone rewrites opensm.conf or the policy and
signals OpenSM, OpenSM restarts with another ``qos_policy_file``, another SM takes over.
``job-sl`` must not hand out an SL the SA no longer serves, so :class:`Recheck` looks again,
one ``saquery PR`` per job (a reply of one MAD, a few tens of milliseconds; docs/design.md
§6.5):

- every cycle at the agent's cadence, :data:`SAMPLE_JOBS` of the jobs in force in turn (a
  cycle for a job that starts or ends skips the sample: the new job's SL waits on it), and
  at every cycle each job whose SL was withdrawn (is it served again?);
- every job in force once something changed under OpenSM: its process (pid or start time,
  from its pid file or its systemd unit: a restart), its files on disk
  (:func:`ibqos.opensm.hold.fingerprint`, a change ibqos did not make), or a caller's
  request (:meth:`Recheck.request_all`: the SM changed, the agent switched to enforce).
  OpenSM serves new files only after its heavy sweep, which may end after the change is
  seen, so every job is checked again at each cycle for ``window_s`` after the change.

At most :data:`FULL_JOBS` PathRecords are asked in one cycle; a full check of more jobs goes
on at the next cycles.  A query that fails (no SA answers, the fabric hangs) ends the
cycle's check, and outside the window after a change nothing is asked for
:data:`RETRY_S` after it: the others would fail alike, each after its timeout, and every
cycle would wait that long.  The jobs left are checked then.  Within the window (OpenSM
restarted and its SA may answer only after its first sweep) every cycle asks again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ibqos.errors import IbqosError, OpenSMNotRunning
from ibqos.opensm.hold import fingerprint
from ibqos.opensm.pidcheck import opensm_pid, proc_info
from ibqos.opensm.verify import Runner, parse_path_sl
from ibqos.tools import run_tool

log = logging.getLogger(__name__)

#: jobs in force re-checked every cycle, in turn (one ``saquery PR`` each, ~30 ms)
SAMPLE_JOBS = 4
#: PathRecords asked in one cycle at most (~8 s at ~30 ms each); a full check of more jobs
#: goes on at the next cycles
FULL_JOBS = 256

#: seconds after a query that failed before the SA is asked again
RETRY_S = 30.0
#: seconds ``systemctl show`` may take
SYSTEMCTL_TIMEOUT_S = 5.0

#: OpenSM's process as its pid file (or unit) names it: (pid, start time in UNIX seconds);
#: None when no OpenSM runs; :data:`UNKNOWN` when ibqos cannot tell
Identity = tuple[int, float] | None
UNKNOWN: Identity = (0, 0.0)


def opensm_identity(pid_file: Path | None, unit: str | None = None) -> Identity:
    """Which OpenSM process runs: its pid and start time (a restart changes them).

    Args:
        pid_file: ``opensm.pid_file`` (its pid must be OpenSM's:
            :func:`ibqos.opensm.pidcheck.opensm_pid`).
        unit: ``opensm.unit``, asked when there is no pid file (``systemctl show``: the
            unit's main pid).

    Returns:
        (pid, start time as UNIX seconds, to 0.1 s); None when OpenSM does not run;
        :data:`UNKNOWN` with neither, or when systemctl does not answer.
    """
    if pid_file is not None:
        try:
            pid = opensm_pid(pid_file)
        except OpenSMNotRunning:
            return None
    elif unit is not None:
        argv = ("systemctl", "show", "--property=MainPID", "--value", unit)
        run = run_tool(argv, timeout_s=SYSTEMCTL_TIMEOUT_S)
        text = run.stdout.strip() if run.returncode == 0 else ""
        if not text.isdigit():
            return UNKNOWN
        pid = int(text)
        if pid == 0:  # the unit has no main process: OpenSM does not run
            return None
    else:
        return UNKNOWN
    info = proc_info(pid)
    if info is None:  # it exited between the two looks
        return None
    return pid, round(info.start_s, 1)


@dataclass(frozen=True)
class Verdict:
    """What one re-check found.

    Attributes:
        served: jobs whose PathRecord carries the SL expected.
        unserved: job -> (the SL expected, the SL the SA serves; None: no PathRecord).
        checked: PathRecords asked.
        answered: the SA answered every query asked (False: one failed, the check stopped).
        full: every job in force was due (a change under OpenSM, or a request).
    """

    served: frozenset[str] = frozenset()
    unserved: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)
    checked: int = 0
    answered: bool = True
    full: bool = False


@dataclass(frozen=True)
class Probe:
    """One job to check: a PathRecord from *slid* to *dlid* must carry *sl*."""

    job_id: str
    slid: int
    dlid: int
    sl: int


def probe_paths(
    job_sl: Mapping[str, int], job_lids: Mapping[str, Sequence[int]], jobs: Iterable[str]
) -> list[Probe]:
    """The probes of *jobs* (those with an SL in *job_sl* and LIDs to ask between)."""
    out = []
    for job in jobs:
        lids = job_lids.get(job) or ()
        if job in job_sl and lids:
            out.append(Probe(job, lids[0], lids[-1], job_sl[job]))
    return out


def ask(probes: Sequence[Probe], run: Runner) -> Verdict:
    """Ask the SA for each probe's PathRecord, in order; stop at the first query that fails."""
    served: set[str] = set()
    unserved: dict[str, tuple[int, int | None]] = {}
    checked = 0
    for probe in probes:
        argv = ["saquery", "PR", "--slid", str(probe.slid), "--dlid", str(probe.dlid)]
        checked += 1
        try:
            text = run(argv)
        except IbqosError as err:
            what = " ".join(argv)
            log.info("re-check of the SLs in force paused for %g s: %s: %s", RETRY_S, what, err)
            return Verdict(frozenset(served), unserved, checked, answered=False)
        try:
            sl: int | None = parse_path_sl(text)
        except IbqosError:  # the SA answered without a path: no SL of this job is served
            sl = None
        if sl == probe.sl:
            served.add(probe.job_id)
        else:
            unserved[probe.job_id] = (probe.sl, sl)
    return Verdict(frozenset(served), unserved, checked)


class Recheck:
    """Re-checks through the SA the SLs in force (see the module docstring).

    Args:
        files: OpenSM's files ibqos writes (a change on disk ibqos did not make is a change
            under OpenSM).
        run: runs ``saquery`` (:class:`ibqos.collect.portinfo.SmpqueryRunner`).
        window_s: seconds after a change during which every job is checked at each cycle
            (OpenSM serves new files after its heavy sweep: ``opensm.sweep_timeout_s``).
        identity: tells OpenSM's process (:func:`opensm_identity`: its pid and start time
            tell a restart; :data:`UNKNOWN` always: restarts are seen through the files and
            the samples only).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        files: Iterable[Path],
        run: Runner,
        *,
        window_s: float,
        identity: Callable[[], Identity] = lambda: UNKNOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = tuple(sorted(files))
        self.run = run
        self.window_s = window_s
        self.clock = clock
        self._identity_of = identity
        self._identity: Identity = UNKNOWN
        self._fingerprint: str | None = None  # None: not looked at yet (the agent started)
        self._requested: list[str] = ["the agent started"]
        self._all_until = -math.inf
        self._left: set[str] = set()  # jobs in force the full check has still to ask about
        self._cursor = 0
        self._quiet_until = -math.inf  # a query failed: nothing is asked until then

    def request_all(self, reason: str) -> None:
        """Check every job in force at the next :meth:`check` (and during the window
        after it): *reason* (e.g. "the SM changed") is logged then."""
        self._requested.append(reason)

    def files_written(self) -> None:
        """ibqos wrote OpenSM's files and OpenSM took them (the apply was verified): their
        new content is no change under OpenSM."""
        self._fingerprint = fingerprint(self.files)

    def _changes(self) -> list[str]:
        """What changed under OpenSM since the last look (and the requests)."""
        reasons, self._requested = self._requested, []
        identity = self._identity_of()
        if identity != self._identity:
            # a first look (the agent started) is a request already
            if identity is not None and identity != UNKNOWN and self._fingerprint is not None:
                reasons.append(f"OpenSM pid {identity[0]} runs (it started again)")
            self._identity = identity
        seen = fingerprint(self.files)
        if self._fingerprint is not None and seen != self._fingerprint:
            reasons.append(f"{', '.join(p.name for p in self.files)} changed on disk")
        self._fingerprint = seen
        return reasons

    def _ask(self, probes: Sequence[Probe]) -> Verdict:
        """:func:`ask`, unless a query failed less than :data:`RETRY_S` ago outside the
        window after a change (then none is asked, and the verdict is not answered)."""
        now = self.clock()
        if self._all_until <= now < self._quiet_until:
            return Verdict(answered=False)
        verdict = ask(probes, self.run)
        if not verdict.answered:
            self._quiet_until = self.clock() + RETRY_S
        return verdict

    @property
    def opensm_down(self) -> bool:
        """No OpenSM runs (as of the last :meth:`check`; its pid file or unit says so)."""
        return self._identity is None

    def check(
        self,
        in_force: Mapping[str, int],
        withdrawn: Mapping[str, int],
        job_lids: Mapping[str, Sequence[int]],
        *,
        sample: bool = True,
    ) -> Verdict:
        """One cycle's re-check: the sample (or every job, when due) and the withdrawn.

        Args:
            in_force: job -> SL handed out now.
            withdrawn: job -> SL planned for it, taken back because the SA did not serve it.
            job_lids: job -> LIDs of its CA ports (a PathRecord from the first to the last
                carries its SL: :meth:`ibqos.plan.decide.Decider.job_lids`).
            sample: ask about :data:`SAMPLE_JOBS` jobs in force when no full check is due.

        Returns:
            What the SA serves; jobs it serves another SL (or no path) are in ``unserved``.
        """
        now = self.clock()
        reasons = self._changes()
        if reasons:
            log.info("re-checking every job's SL through the SA: %s", "; ".join(reasons))
            self._all_until = now + self.window_s
        full = now < self._all_until
        if full:
            self._left |= set(in_force)
        self._left &= set(in_force)
        if self.opensm_down:
            return Verdict(full=full, answered=False)  # no SA to ask; all of them once it runs
        checkable = {j for j in in_force if job_lids.get(j)}
        self._left &= checkable  # a job on shared hosts only has no sure PathRecord
        if self._left:
            picked = sorted(self._left)[:FULL_JOBS]
            full = True
        else:
            picked = self._sample(sorted(checkable)) if sample else []
        room = max(0, FULL_JOBS - len(picked))
        probes = probe_paths(in_force, job_lids, picked)
        probes += probe_paths(withdrawn, job_lids, sorted(withdrawn)[:room])
        verdict = self._ask(probes)
        self._left -= verdict.served | verdict.unserved.keys()
        return Verdict(verdict.served, verdict.unserved, verdict.checked, verdict.answered, full)

    def confirm(self, job_sl: Mapping[str, int], job_lids: Mapping[str, Sequence[int]]) -> Verdict:
        """Check the SA serves *job_sl* (jobs about to be handed out without a new apply:
        OpenSM's files already carried them); at most :data:`FULL_JOBS`."""
        if self.opensm_down:
            return Verdict(answered=False)
        return self._ask(probe_paths(job_sl, job_lids, sorted(job_sl)[:FULL_JOBS]))

    def _sample(self, jobs: Sequence[str]) -> list[str]:
        """:data:`SAMPLE_JOBS` of *jobs* in turn, from where the last sample ended."""
        if not jobs:
            return []
        n = min(SAMPLE_JOBS, len(jobs))
        start = self._cursor % len(jobs)
        self._cursor = start + n
        return [jobs[(start + i) % len(jobs)] for i in range(n)]


class OpenSMRuns:
    """Whether OpenSM runs, from its pid file (:func:`ibqos.opensm.pidcheck.opensm_pid`),
    cached for *ttl_s* seconds: cheap enough to ask at every job-SL question, so no SL is
    handed out in the cycle between OpenSM's stop and the re-check that withdraws it.

    Args:
        pid_file: ``opensm.pid_file`` (None: not known here; the cycle's re-check decides).
        ttl_s: seconds an answer is kept.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        pid_file: Path | None,
        ttl_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pid_file = pid_file
        self.ttl_s = ttl_s
        self.clock = clock
        self._runs = True
        self._until = -math.inf

    def __call__(self) -> bool:
        """True when OpenSM runs (or nothing can tell: no pid file)."""
        if self.pid_file is None:
            return True
        now = self.clock()
        if now >= self._until:
            try:
                opensm_pid(self.pid_file)
                self._runs = True
            except OpenSMNotRunning:
                self._runs = False
            self._until = now + self.ttl_s
        return self._runs
