"""Processes of a lab: start them tied to their owner, identify them, end them by pid.

A pid alone can be reused by an unrelated process after ours exits, so every recorded
process is a ``(pid, start time)`` pair read from ``/proc/<pid>/stat``; nothing is ever
signalled unless both match.  Nothing is matched by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ibqos.errors import LabError
from ibqos.tools import find_tool, run_tool


@dataclass(frozen=True)
class ProcRef:
    """A process we started: pid and kernel start time (clock ticks since boot)."""

    pid: int
    start: int

    def to_dict(self) -> dict[str, int]:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcRef:
        return cls(int(data["pid"]), int(data["start"]))


def start_time(pid: int) -> int | None:
    """Start time of *pid* in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie has exited; only its parent's wait() is left
    return int(fields[19])


def ref_of(pid: int) -> ProcRef:
    start = start_time(pid)
    if start is None:
        raise LabError(f"process {pid} exited right after it started")
    return ProcRef(pid, start)


def alive(ref: ProcRef) -> bool:
    """True if the very process *ref* names still runs."""
    return start_time(ref.pid) == ref.start


def end(ref: ProcRef, timeout: float = 5.0) -> None:
    """SIGTERM the process *ref*, then SIGKILL it if it is still there after *timeout* s."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        if not alive(ref):
            return
        try:
            os.kill(ref.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(ref):
                return
            time.sleep(0.02)
    if alive(ref):
        raise LabError(f"process {ref.pid} did not end after SIGKILL")


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = subprocess.STDOUT,
) -> subprocess.Popen[bytes]:
    """Start *argv* so that it gets SIGTERM if its owner (this process) dies.

    ``setpriv --pdeathsig`` sets the parent-death signal before exec, without a
    ``preexec_fn`` (unsafe once threads run).  An orphaned ibsim would otherwise read EOF
    on its console and spin at 100 % CPU (docs/design.md §8.1).
    """
    tool = find_tool(argv[0], env)
    if tool is None:
        raise LabError(f"{argv[0]}: not found on PATH (run 'make setup' to install it)")
    prefix = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []
    try:
        return subprocess.Popen(
            [*prefix, tool, *argv[1:]],
            env=dict(env),
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )
    except OSError as err:
        raise LabError(f"cannot start {argv[0]}: {err}") from err


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a one-shot command of the lab to its end and capture its output as text.

    Args:
        argv: the command line.
        env: its whole environment.
        cwd: its working directory.
        timeout: seconds before it is killed.
        stdin: text to feed it (None: this process's stdin).

    Raises:
        LabError: it could not start or did not end in time (naming ``argv[0]``); a
            non-zero exit is the caller's to judge.
    """
    done = run_tool(argv, timeout_s=timeout, env=env, cwd=cwd, stdin=stdin)
    if done.cause is not None:
        raise LabError(f"{argv[0]}: {done.cause}") from done.cause
    return done.completed()


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """End a child we hold a Popen for and reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5.0)


def tail(path: Path, lines: int = 8) -> str:
    """The last *lines* lines of a log file, for error messages ('' if unreadable)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
