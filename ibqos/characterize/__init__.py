"""Offline characterization of applications into job profiles (``docs/characterize.md``,
and the walk-through in the top-level ``characterize/`` folder).

The workflow, one module a stage::

    trace.py (ibqos CSV) / otf2trace.py (OTF2) / a lab job  ->  classify.levels.NodeTraffic
    command.py: placements on a fabric -> per-level rate, avail, util, class (classify.levels)
    report.py: tables (CSV, JSON, text) and plots (PNG, SVG)
    history.py: ibqos's own series of a job, read back from Prometheus

The profile store and the per-cycle priors the agent uses live in :mod:`ibqos.classify`
(``profiles``, ``prior``, ``levels``); how running jobs share the tree in
:mod:`ibqos.attribute.sharing`.  Submodules are imported by name: the plotting pulls in
matplotlib, which nothing else needs.
"""

__all__ = ["command", "extra", "history", "otf2trace", "report", "trace"]
