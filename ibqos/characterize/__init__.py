"""Offline characterization of applications, and the job profiles ibqos uses as priors
(``docs/characterize.md``).

The pipeline, one module a stage::

    trace.py (ibqos CSV) / otf2trace.py (OTF2) / a lab job  ->  levels.NodeTraffic
    levels.py: placements on a fabric -> per level rate, avail, util, class
    report.py: tables (CSV, JSON, text) and plots (PNG, SVG)
    profiles.py: the profile store (YAML)     history.py: ibqos's own series from Prometheus
    prior.py: profiles as the planner's priors (expected class, attribution pattern)
    sharing.py: how running jobs share the tree (scheduler advice, exported metrics)
    command.py: what ``ibqos characterize`` does below the CLI

Submodules are imported by name (``from ibqos.classify.levels import ...``): the
agent's decision cycle needs only ``prior`` and ``sharing``, not the plotting.
"""

__all__ = [
    "command",
    "history",
    "levels",
    "otf2trace",
    "prior",
    "profiles",
    "report",
    "sharing",
    "trace",
]
