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

log = logging.getLogger("ibqos.slurm")

__all__ = ["take_notifications"]

#: files read per look; the rest wait for the next one (one poll covers them all anyway)
_MAX_PER_LOOK = 10000


def take_notifications(directory: Path) -> list[str]:
    """Names of the notification files in *directory*, removed as they are read.

    A missing or unreadable directory gives no notifications (polling goes on).
    Hidden files are someone's temporaries and are left alone.
    """
    try:
        names = [e.name for e in os.scandir(directory) if not e.name.startswith(".")]
    except OSError:
        return []
    taken = []
    for name in names[:_MAX_PER_LOOK]:
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            continue  # another reader took it
        except OSError as err:
            log.debug("cannot remove notification %s: %s", directory / name, err)
        taken.append(name)
    return taken
