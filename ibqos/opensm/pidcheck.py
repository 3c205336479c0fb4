"""Is the pid in OpenSM's pid file OpenSM's?

A pid file outlives the process that wrote it: after OpenSM crashed, its pid may be
reused by any process, which a blind SIGHUP would hang up (the default action of SIGHUP
ends a process).  So before a pid from the pid file is signalled, :func:`opensm_pid`
checks two things from ``/proc``:

- the process's executable is OpenSM's: the base name of ``/proc/<pid>/exe`` (or of
  ``/proc/<pid>/comm`` where the link cannot be read) starts with ``opensm``;
- the process started before the pid file was last written (its start time, field 22 of
  ``/proc/<pid>/stat`` in clock ticks after boot, plus the boot time of ``/proc/stat``,
  against the file's mtime, with :data:`START_SLACK_S` for the coarse boot time): a
  process that started later cannot have written it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import OpenSMNotRunning

log = logging.getLogger(__name__)

#: seconds a process may seem to start after its pid file was written: ``btime`` is whole
#: seconds, the file may be written in the same tick the process starts, and a step of
#: the wall clock (NTP, a resumed VM) moves ``btime`` and so every start time computed
#: from it, but not the file's mtime; a pid reused by another ``opensm`` within a minute
#: of the file is far less likely than such a step
START_SLACK_S = 60.0
#: what the executable's base name starts with
OPENSM_NAME = "opensm"


@dataclass(frozen=True)
class ProcInfo:
    """What ``/proc`` says of one process.

    Attributes:
        pid: its pid.
        name: its executable's base name (``exe``, else ``comm``).
        start_s: UNIX time it started, seconds.
    """

    pid: int
    name: str
    start_s: float


def boot_time(proc: Path = Path("/proc")) -> float:
    """UNIX time the machine booted, seconds (``btime`` of ``/proc/stat``)."""
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError(f"{proc / 'stat'}: no btime line")


def proc_info(pid: int, proc: Path = Path("/proc")) -> ProcInfo | None:
    """The process *pid* (None: there is none, or only its zombie)."""
    where = proc / str(pid)
    try:
        stat = (where / "stat").read_text()
        btime = boot_time(proc)
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None  # it has exited; only its parent's wait() is left
    start_s = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    try:
        # an upgraded package leaves "/usr/sbin/opensm (deleted)" behind a running OpenSM
        name = Path(str((where / "exe").readlink()).removesuffix(" (deleted)")).name
    except OSError:  # a kernel thread, or another user's process without CAP_SYS_PTRACE
        try:
            name = (where / "comm").read_text().strip()
        except OSError:
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
    return ProcInfo(pid, name, start_s)


def opensm_pid(pid_file: Path, proc: Path = Path("/proc")) -> int:
    """The pid of the OpenSM that wrote *pid_file*.

    Raises:
        OpenSMNotRunning: the pid file cannot be read or holds no pid, no such process
            runs, or the process is not OpenSM or started after the file was written.
    """
    try:
        text = pid_file.read_text().strip()
        written_s = pid_file.stat().st_mtime
    except OSError as err:
        raise OpenSMNotRunning(
            f"OpenSM is not running? cannot read pid file {pid_file}: {err.strerror}"
        ) from err
    if not text.isdigit() or int(text) <= 1:
        raise OpenSMNotRunning(f"pid file {pid_file}: expected a pid, got {text[:40]!r}")
    pid = int(text)
    info = proc_info(pid, proc)
    if info is None:
        raise OpenSMNotRunning(f"OpenSM is not running: pid {pid} from {pid_file} does not exist")
    if not info.name.startswith(OPENSM_NAME):
        raise OpenSMNotRunning(f"pid {pid} in {pid_file} is not OpenSM (it is {info.name!r})")
    if info.start_s > written_s + START_SLACK_S:
        raise OpenSMNotRunning(
            f"pid {pid} in {pid_file} is not the OpenSM that wrote it: it started"
            f" {info.start_s - written_s:.0f} s after the file was written (a stale pid file)"
        )
    return pid
