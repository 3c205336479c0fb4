"""Run an external tool once and say how it ended.

One-shot commands (infiniband-diags' ``perfquery``, ``smpquery`` and ``ibnetdiscover``,
``squeue``, the lab's diags and Slurm commands, ``promtool``) go through
:func:`run_tool`, with an argument list, an environment, a working directory and
a wall-clock limit.  It does not raise for the tool's sake: the four ways a run ends come
back in one :class:`ToolRun` that names the tool,

- the program is not there (``not_found``), or cannot be executed (``exec_error``);
- it did not end within the limit and was killed (``timed_out``);
- it exited, with its status (``returncode``) and what it printed.

Each caller turns a failure into its own error class and words (the messages are part of
ibqos's interface), or uses :meth:`ToolRun.message`.  Long-running children (OpenSM,
ibsim, slurmctld) are started and ended by pid in :mod:`ibqos.lab.procs`, which finds its
programs with :func:`find_tool` too.

The waiter.  :func:`run_tool` waits for a tool in slices of at most :data:`SLICE_S`
seconds, and between two slices calls the process-wide *waiter*, if one is set
(:func:`set_waiter`, or :func:`waiter` as a context manager).  A daemon sets one that pings
its watchdog and raises :class:`~ibqos.errors.StopRequested` once it is asked to stop: a
tool that hangs (ibnetdiscover on a sick fabric, perfquery on a dead LID) then never keeps
the loop quiet for longer than a slice, and a stop ends the tool at once, by its pid, and
reaps it, before the waiter's exception goes on up.  Other waits on the fabric (the native
backend's MAD replies) call :func:`poll_waiter` as often.  The waiter runs in the thread
that waits, which is not always the main one (the perfquery backend runs tools from a
pool of threads): it must be safe to call from any thread, and whatever it raises reaches
that thread's caller.  With no waiter (the default), a run only ends by itself or at its
limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = [
    "SLICE_S",
    "ToolRun",
    "Waiter",
    "find_tool",
    "poll_waiter",
    "run_tool",
    "set_waiter",
    "waiter",
]

#: Longest wait, seconds, between two calls of the waiter while a tool runs.
SLICE_S = 0.5

#: Called between slices of a wait; may raise to end the wait (and the tool).
Waiter = Callable[[], None]

_waiter: Waiter | None = None


def set_waiter(fn: Waiter | None) -> Waiter | None:
    """Make *fn* the process-wide waiter (None: no waiter); returns the one it replaces.

    See the module docstring: *fn* is called at least every :data:`SLICE_S` seconds while
    a tool runs or the native backend waits for MAD replies, from the waiting thread.
    Whatever it raises ends the wait: a running tool is killed by its pid and reaped, and
    the exception propagates to the caller of :func:`run_tool`.
    """
    global _waiter
    previous, _waiter = _waiter, fn
    return previous


@contextlib.contextmanager
def waiter(fn: Waiter | None) -> Iterator[None]:
    """Set *fn* as the waiter for the ``with`` block, then put the previous one back."""
    previous = set_waiter(fn)
    try:
        yield
    finally:
        set_waiter(previous)


def poll_waiter() -> None:
    """Call the waiter, if one is set (what it raises propagates)."""
    fn = _waiter
    if fn is not None:
        fn()


@dataclass(frozen=True)
class ToolRun:
    """How one run of a tool ended.

    Attributes:
        name: how messages name the tool (its ``argv[0]`` unless the caller chose).
        argv: the command line as given.
        timeout_s: the wall-clock limit of the run, seconds.
        returncode: exit status; None when the tool did not run to an exit of its own
            (it could not start, or was killed after ``timeout_s``).
        stdout: what it printed on stdout ("" when it did not exit).
        stderr: what it printed on stderr ("" when it did not exit).
        cause: the exception that stopped the run: an OSError from starting it, or the
            :class:`subprocess.TimeoutExpired` of the limit; None when it exited.
    """

    name: str
    argv: tuple[str, ...]
    timeout_s: float
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    cause: OSError | subprocess.TimeoutExpired | None = None

    @property
    def ok(self) -> bool:
        """It exited with status 0."""
        return self.returncode == 0

    @property
    def exec_error(self) -> OSError | None:
        """The OSError that kept the tool from starting, if any."""
        return self.cause if isinstance(self.cause, OSError) else None

    @property
    def not_found(self) -> bool:
        """The program (or a directory it needs) does not exist."""
        return isinstance(self.cause, FileNotFoundError)

    @property
    def timed_out(self) -> bool:
        """It ran past ``timeout_s`` and was killed."""
        return isinstance(self.cause, subprocess.TimeoutExpired)

    @property
    def reason(self) -> str:
        """Why it could not start (the OS's words), else ""."""
        err = self.exec_error
        return "" if err is None else str(err.strerror or err)

    def last_stderr(self, default: str = "no output on stderr") -> str:
        """The last non-blank line the tool printed on stderr, stripped, else *default*."""
        for line in reversed(self.stderr.splitlines()):
            if line.strip():
                return line.strip()
        return default

    def message(self, hint: str = "") -> str:
        """One line saying what went wrong, naming the tool ("" when it exited 0).

        Args:
            hint: where the program comes from, added when it is not found
                (e.g. "infiniband-diags installs it").
        """
        if self.not_found:
            return f"{self.name}: command not found" + (f" ({hint})" if hint else "")
        if self.exec_error is not None:
            return f"{self.name}: cannot run: {self.reason}"
        if self.timed_out:
            return f"{self.name}: no answer within {self.timeout_s:g} s"
        if self.returncode != 0:
            return f"{self.name} failed (exit status {self.returncode}): {self.last_stderr()}"
        return ""

    def completed(self) -> subprocess.CompletedProcess[str]:
        """The run as :func:`subprocess.run` returns it (for APIs that hand that on).

        Raises:
            ValueError: the tool did not exit (see ``cause``).
        """
        if self.returncode is None:
            raise ValueError(f"{self.name} did not exit: {self.cause}")
        return subprocess.CompletedProcess(
            list(self.argv), self.returncode, self.stdout, self.stderr
        )


def find_tool(program: str, env: Mapping[str, str] | None = None) -> str | None:
    """Full path of *program* on the PATH of *env* (default: this process's), or None.

    An environment without PATH searches :data:`os.defpath`, as ``execvpe`` would.
    """
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which(program, path=search)


def run_tool(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    executable: str | None = None,
    stdin: str | None = None,
    errors: str = "strict",
    name: str | None = None,
) -> ToolRun:
    """Run *argv* once, capture its output as text, and say how it ended.

    Args:
        argv: the command line; ``argv[0]`` is the program (looked up on the PATH of
            *env*) unless *executable* is given.
        timeout_s: wall-clock limit, seconds; the tool is killed (by its own pid) and
            reaped when it runs longer.  While it runs, the waiter is called every
            :data:`SLICE_S` seconds (module docstring).
        env: the whole environment of the tool (default: this process's).
        cwd: its working directory (default: this process's).
        executable: the program to run instead of ``argv[0]``, which the tool then still
            sees as its name (so its own messages keep it).
        stdin: text fed to the tool's stdin; None leaves stdin as this process's.
        errors: how undecodable output is decoded (``"replace"`` for tools that print
            names from the fabric, which need not be UTF-8).
        name: how :meth:`ToolRun.message` names the tool (default: ``argv[0]``).

    Returns:
        how the run ended; a run that could not start or timed out has ``cause`` set and
        ``returncode`` None.

    Raises:
        BaseException: whatever the waiter raised (e.g. StopRequested), after the tool
            was killed and reaped.
    """
    args = list(argv)
    label = name or args[0]
    try:
        proc = subprocess.Popen(
            args,
            executable=executable,
            stdin=None if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            cwd=cwd,
            text=True,
            errors=errors,
        )
    except OSError as err:
        log.debug("%s: %s", label, err)
        return ToolRun(label, tuple(args), timeout_s, cause=err)
    deadline = time.monotonic() + timeout_s
    feed = stdin
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                # communicate() may be called again after a timeout without losing
                # output, but takes the input only the first time
                out, err_text = proc.communicate(feed, timeout=max(0.0, min(SLICE_S, left)))
                break
            except subprocess.TimeoutExpired:
                feed = None
                if left <= SLICE_S:
                    _end(proc)
                    expired = subprocess.TimeoutExpired(args, timeout_s)
                    log.debug("%s: %s", label, expired)
                    return ToolRun(label, tuple(args), timeout_s, cause=expired)
                poll_waiter()
    except BaseException:
        # the waiter (a stop), Ctrl-C, or a pipe error: no tool outlives its caller
        _end(proc)
        raise
    return ToolRun(label, tuple(args), timeout_s, proc.returncode, out, err_text)


def _end(proc: subprocess.Popen[str]) -> None:
    """Kill *proc* (by its pid), reap it and close its pipes.

    The pipes are closed, not read to their end: a child of the tool that inherited them
    would keep them open, and the output of a killed tool is not used anyway.
    """
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
