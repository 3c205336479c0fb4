"""How OpenSM is told to re-read its files, and whether it runs.

- :class:`PidFileSignaller`: SIGHUP to the pid in OpenSM's pid file, once that pid is
  known to be OpenSM's (:mod:`ibqos.opensm.pidcheck`); it runs while that pid does;
- :class:`UnitSignaller`: ``systemctl kill --signal=SIGHUP --kill-whom=main <unit>``
  (Debian's unit has no ExecReload; docs/design.md §8.6); it runs while ``systemctl is-active``
  says so;
- :class:`CommandSignaller`: the admin's ``opensm.reload_command``; whether OpenSM runs
  cannot be told.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ibqos.errors import ApplyError, OpenSMNotRunning
from ibqos.opensm.pidcheck import opensm_pid
from ibqos.tools import run_tool

log = logging.getLogger(__name__)

#: seconds ``systemctl is-active`` may take
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Liveness:
    """Whether OpenSM runs.

    Attributes:
        up: True: it runs; False: it does not; None: cannot tell.
        detail: how that was found, for messages ("pid 1234", "inactive").
    """

    up: bool | None
    detail: str


class Signaller(Protocol):
    """How OpenSM is told to re-read its files."""

    def describe(self) -> str:
        """What is signalled, for messages."""
        ...

    def signal(self) -> None:
        """Make OpenSM re-read its files (a heavy sweep).

        Raises:
            ApplyError: OpenSM is not running or cannot be signalled.
        """
        ...


@runtime_checkable
class Probed(Protocol):
    """A signaller that can also tell whether OpenSM runs."""

    def alive(self) -> Liveness:
        """Whether OpenSM runs now."""
        ...


@dataclass(frozen=True)
class PidFileSignaller:
    """SIGHUP to the pid in OpenSM's pid file (``opensm --pidfile``), once the pid is
    known to be OpenSM's (:func:`ibqos.opensm.pidcheck.opensm_pid`)."""

    pid_file: Path

    def describe(self) -> str:
        return f"OpenSM (pid file {self.pid_file})"

    def alive(self) -> Liveness:
        try:
            return Liveness(True, f"pid {opensm_pid(self.pid_file)}")
        except OpenSMNotRunning as err:
            return Liveness(False, str(err))

    def signal(self) -> None:
        pid = opensm_pid(self.pid_file)
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError as err:
            raise OpenSMNotRunning(
                f"OpenSM is not running: pid {pid} from {self.pid_file} does not exist"
            ) from err
        except PermissionError as err:
            raise ApplyError(f"not allowed to signal OpenSM pid {pid} ({self.pid_file})") from err


@dataclass(frozen=True)
class CommandSignaller:
    """A command that makes OpenSM re-read its files (``opensm.reload_command``).  It
    cannot tell whether OpenSM runs: OpenSM is taken to run."""

    argv: tuple[str, ...]
    timeout_s: float = 30.0

    def describe(self) -> str:
        return " ".join(self.argv)

    def signal(self) -> None:
        proc = run_tool(self.argv, timeout_s=self.timeout_s)
        if proc.timed_out:
            # killed mid-way: the signal may already have reached OpenSM
            raise ApplyError(f"{self.describe()}: {proc.cause}", maybe_signalled=True)
        if proc.cause is not None:
            raise ApplyError(f"{self.describe()}: {proc.cause}")
        assert proc.returncode is not None  # it exited
        if proc.returncode < 0:  # killed (SIGTERM to the service's control group)
            raise ApplyError(
                f"{self.describe()}: killed by signal {-proc.returncode}", maybe_signalled=True
            )
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ApplyError(f"{self.describe()}: exit {proc.returncode}: {last[0]}")


@dataclass(frozen=True)
class UnitSignaller:
    """SIGHUP to the main process of a systemd unit (Debian's unit has no ExecReload;
    docs/design.md §8.6); ``systemctl is-active`` says whether it runs."""

    unit: str
    timeout_s: float = 10.0  # systemctl kill returns at once; a hung one is cut short

    @property
    def argv(self) -> tuple[str, ...]:
        return ("systemctl", "kill", "--signal=SIGHUP", "--kill-whom=main", self.unit)

    def describe(self) -> str:
        return " ".join(self.argv)

    def signal(self) -> None:
        CommandSignaller(self.argv, self.timeout_s).signal()

    def alive(self) -> Liveness:
        run = run_tool(("systemctl", "is-active", self.unit), timeout_s=PROBE_TIMEOUT_S)
        if run.returncode is None:  # no systemctl, or it hung: cannot tell
            return Liveness(None, run.message())
        state = run.stdout.strip() or f"exit {run.returncode}"
        if run.returncode == 0:
            return Liveness(True, f"{self.unit} {state}")
        return Liveness(False, f"OpenSM is not running ({self.unit} is {state})")
