"""Notifications from Slurm's PrologSlurmctld/EpilogSlurmctld: files in a spool directory.

The shipped script ``contrib/slurm/ibqos-slurmctld`` creates ``<notify_dir>/<event>.<job id>``
(``start.42``, ``end.42``) and exits 0 at once.  A directory, not a socket, because
slurmctld must never wait for ibqos: creating a file cannot block, works while the agent is
down or restarting, and needs nothing but ``sh``.  The agent looks at the directory every
``agent.job_poll_s`` and removes what it read; a file only says "poll squeue now": the job
list itself always comes from squeue.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["NotifyDir"]

#: files read per look; the rest wait for the next one (one poll covers them all anyway)
_MAX_PER_LOOK = 10000


class NotifyDir:
    """The spool directory of one job source; :meth:`take` returns what is new in it.

    A file the agent cannot remove (under ibqos.service root has no CAP_DAC_OVERRIDE or
    CAP_FOWNER, so a directory it may not write, or a sticky one it does not own, keeps
    the files) is reported once, as a warning, and not taken again while it stays as it
    is: else every look would count it as a new notification and poll squeue for ever.
    A file rewritten since (a new mtime) is a new notification.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._stuck: dict[str, int] = {}  # name -> mtime (ns) when it could not be removed
        self._warned = False

    def take(self) -> list[str]:
        """Names of the new notification files, removed as they are read.

        A missing or unreadable directory gives no notifications (polling goes on).
        Hidden files are someone's temporaries and are left alone.
        """
        try:
            entries = {e.name: e for e in os.scandir(self.directory) if not e.name.startswith(".")}
        except OSError:
            return []
        self._stuck = {n: t for n, t in self._stuck.items() if n in entries}
        taken = []
        for name, entry in list(entries.items())[:_MAX_PER_LOOK]:
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:
                continue  # another reader took it
            if self._stuck.get(name) == mtime:
                continue  # seen, and still there because it cannot be removed
            try:
                (self.directory / name).unlink()
            except FileNotFoundError:
                continue
            except OSError as err:
                self._stuck[name] = mtime
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "slurm.notify_dir %s: cannot remove %s (%s): each notification"
                        " is taken once and left there; the directory must be writable"
                        " by root without capabilities (systemd/README.md: root:slurm"
                        " mode 1770)",
                        self.directory,
                        name,
                        err.strerror,
                    )
            taken.append(name)
        return taken
