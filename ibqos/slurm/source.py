"""The Slurm job source: squeue is the source of truth, notifications only make it prompt.

:class:`SlurmJobSource` polls ``squeue`` every ``slurm.poll_s`` seconds, and at once when
the shipped PrologSlurmctld/EpilogSlurmctld script dropped a notification file (a job
started or ended, :mod:`ibqos.slurm.notify`) or when someone asks for the SL of a job the
agent does not know yet (:meth:`SlurmJobSource.refresh`).  Polling stays the truth: a lost
notification costs at most one poll interval, never a wrong job list.

When squeue fails (slurmctld down or unreachable, squeue hung), the last known jobs are
kept for ``slurm.grace_s`` seconds: one warning when it starts, none while it lasts.  Past
the grace time :meth:`SlurmJobSource.jobs` raises, so the agent's cycles fail (logged once)
and OpenSM's files stay exactly as they are: no job's SL is reshuffled on a guess.  When
squeue answers again, one line says so and the jobs are what Slurm says.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ibqos.config.models import SlurmConfig
from ibqos.errors import SlurmError
from ibqos.jobs.model import Job
from ibqos.slurm.notify import NotifyDir
from ibqos.slurm.squeue import JSON_SINCE, parse_json, parse_text, parse_version, squeue_argv
from ibqos.tools import run_tool

log = logging.getLogger(__name__)

#: seconds between two polls that a notification or a question forces: a flood of
#: questions for job ids Slurm does not know must not become a flood of squeue calls
MIN_FORCED_POLL_S = 0.5


@dataclass(frozen=True)
class Completed:
    """What one squeue run gave: exit status (127: not started), stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], float], Completed]
"""Runs argv with a timeout in seconds (tests pass recorded outputs)."""


def subprocess_runner(conf: str | None = None) -> Runner:
    """A :data:`Runner` over :func:`ibqos.tools.run_tool`; *conf* becomes ``SLURM_CONF``."""
    env = dict(os.environ)
    if conf is not None:
        env["SLURM_CONF"] = conf
    # the agent may run with the lab's LD_PRELOAD (umad2sim); squeue has no use for it
    env.pop("LD_PRELOAD", None)

    def run(argv: Sequence[str], timeout_s: float) -> Completed:
        done = run_tool(argv, timeout_s=timeout_s, env=env)
        if done.timed_out:
            return Completed(124, "", f"no answer within {timeout_s:g} s")
        if done.returncode is None:
            return Completed(127, "", f"cannot run {argv[0]}: {done.reason}")
        return Completed(done.returncode, done.stdout, done.stderr)

    return run


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "no output"


class SlurmJobSource:
    """Running jobs from Slurm (a :class:`~ibqos.attribute.jobmap.JobSource`).

    Args:
        config: the ``slurm`` section.
        run: runs squeue (default: a subprocess with ``slurm.conf`` as SLURM_CONF).
        clock: monotonic seconds.

    Attributes:
        read_at: monotonic time the last squeue that answered was started (-inf: never);
            a job that started before it is in :meth:`jobs` if Slurm runs it.
        down_since: monotonic time squeue started failing; None while it answers.
    """

    def __init__(
        self,
        config: SlurmConfig,
        run: Runner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.run = run or subprocess_runner(None if config.conf is None else str(config.conf))
        self.clock = clock
        self.read_at = float("-inf")
        self.down_since: float | None = None
        self._format = None if config.format == "auto" else config.format
        self._jobs: tuple[Job, ...] | None = None
        self._polled = float("-inf")  # when the last squeue (good or bad) started
        self._due = False
        self._warned: set[str] = set()
        self._notify = None if config.notify_dir is None else NotifyDir(config.notify_dir)
        self._last_problem = "never run"

    @property
    def up(self) -> bool | None:
        """True while squeue answers, False while it fails, None before the first poll."""
        if self._jobs is None and self.down_since is None:
            return None
        return self.down_since is None

    def refresh(self) -> None:
        """Poll squeue at the next :meth:`jobs` call (at most every MIN_FORCED_POLL_S)."""
        self._due = True

    def jobs(self) -> tuple[Job, ...]:
        """The running jobs: polled when due, else the last ones read.

        Raises:
            SlurmError: squeue has never answered, or has failed for longer than
                ``slurm.grace_s``.
        """
        if self._notify is not None:
            events = self._notify.take()
            if events:
                log.debug("notified: %s", ", ".join(events))
                self._due = True
        now = self.clock()
        since = now - self._polled
        if since >= self.config.poll_s or (self._due and since >= MIN_FORCED_POLL_S):
            self._poll(now)
        if self._jobs is None:
            raise SlurmError(f"squeue has not answered yet: {self._last_problem}")
        if self.down_since is not None and now - self.down_since > self.config.grace_s:
            # a stable message: the agent logs each distinct failure once
            raise SlurmError(
                f"squeue has failed for more than {self.config.grace_s:g} s"
                f" ({self._last_problem}); OpenSM's files are left as they are"
            )
        return self._jobs

    def _poll(self, now: float) -> None:
        self._polled = now
        self._due = False
        try:
            jobs = self._read()
        except SlurmError as err:
            self._last_problem = str(err)
            if self.down_since is None:
                self.down_since = now
                if self._jobs is not None:
                    log.warning(
                        "%s; keeping the last %d jobs for up to %g s, SLs unchanged",
                        err,
                        len(self._jobs),
                        self.config.grace_s,
                    )
            else:
                log.debug("still failing: %s", err)
            return
        if self.down_since is not None and self._jobs is not None:
            log.info(
                "squeue answers again after %.0f s: %d running jobs",
                now - self.down_since,
                len(jobs),
            )
        elif self._jobs is not None and jobs != self._jobs:
            old = {j.id for j in self._jobs}
            new = {j.id for j in jobs}
            log.info(
                "jobs: %d running (started %s; ended %s)",
                len(jobs),
                ", ".join(sorted(new - old)) or "-",
                ", ".join(sorted(old - new)) or "-",
            )
        self.down_since = None
        self.read_at = now
        self._jobs = jobs

    def _read(self) -> tuple[Job, ...]:
        """One squeue run, parsed.  Raises SlurmError naming the command."""
        fmt = self._format or self._detect()
        argv = squeue_argv(self.config.squeue, fmt)
        name = " ".join(argv)
        done = self.run(argv, self.config.timeout_s)
        if done.returncode != 0:
            raise SlurmError(f"{name}: exit {done.returncode}: {_first_line(done.stderr)}")
        if fmt == "json":
            jobs, warnings = parse_json(done.stdout, name)
        else:
            jobs, warnings = parse_text(done.stdout, name)
        for msg in warnings:
            if msg not in self._warned:  # once per bad entry, not once per poll
                self._warned.add(msg)
                log.warning("%s", msg)
        return jobs

    def _detect(self) -> str:
        """json for squeue >= 21.08, text before; decided once, when squeue first answers."""
        argv = [*self.config.squeue, "--version"]
        done = self.run(argv, self.config.timeout_s)
        if done.returncode != 0:
            problem = _first_line(done.stderr)
            raise SlurmError(f"{' '.join(argv)}: exit {done.returncode}: {problem}")
        version = parse_version(done.stdout)
        self._format = "json" if version is None or version >= JSON_SINCE else "text"
        log.info(
            "squeue %s: reading %s",
            ".".join(map(str, version)) if version else "(version unknown)",
            "--json" if self._format == "json" else f"--format={self._format}",
        )
        return self._format
