"""The lab: a simulated fabric (real ibsim + real OpenSM) with a traffic model.

``Lab`` runs one in-process; ``ibqos lab up`` runs one in a background supervisor;
:mod:`ibqos.lab.agentrun` runs the agent (``ibqos run``) on either.
``SlurmCluster`` runs a real Slurm cluster on this host for the lab's hosts, and
``PrometheusServer`` a Prometheus that scrapes the lab's endpoints.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.errors import PrometheusQueryError
    from ibqos.fabric.xgft import XgftSpec, build_xgft, parse_xgft
    from ibqos.lab.files import LabPaths, default_root
    from ibqos.lab.lab import Lab
    from ibqos.lab.prometheus import PrometheusServer
    from ibqos.lab.slurm import SlurmCluster
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            "ibqos.errors": ("PrometheusQueryError",),
            "ibqos.fabric.xgft": ("XgftSpec", "build_xgft", "parse_xgft"),
            ".files": ("LabPaths", "default_root"),
            ".lab": ("Lab",),
            ".prometheus": ("PrometheusServer",),
            ".slurm": ("SlurmCluster",),
        },
    )

__all__ = [
    "Lab",
    "LabPaths",
    "PrometheusQueryError",
    "PrometheusServer",
    "SlurmCluster",
    "XgftSpec",
    "build_xgft",
    "default_root",
    "parse_xgft",
]
