"""Slurm: running jobs from squeue, and notifications from Slurm's prolog/epilog.

- :mod:`~ibqos.slurm.squeue`: reads ``squeue --json`` and the text fallback;
- :mod:`~ibqos.slurm.source`: the job source (polling, notifications, grace time);
- :mod:`~ibqos.slurm.notify`: the PrologSlurmctld/EpilogSlurmctld spool directory;
- :mod:`~ibqos.slurm.jobsource`: the job source the config names (a job file, or Slurm).

The hand-off of each job's SL to its tasks is :mod:`ibqos.agent.handoff` (any job source);
the scripts Slurm runs are in ``contrib/slurm/``; see ``docs/slurm.md``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.errors import SlurmError
    from ibqos.slurm.notify import NotifyDir
    from ibqos.slurm.source import SlurmJobSource
    from ibqos.slurm.squeue import parse_json, parse_text
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            "ibqos.errors": ("SlurmError",),
            ".notify": ("NotifyDir",),
            ".source": ("SlurmJobSource",),
            ".squeue": ("parse_json", "parse_text"),
        },
    )

__all__ = ["NotifyDir", "SlurmError", "SlurmJobSource", "parse_json", "parse_text"]
