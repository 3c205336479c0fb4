"""The lab: a simulated fabric (real ibsim + real OpenSM) with a traffic model.

``Lab`` runs one in-process; ``ibqos lab up`` runs one in a background supervisor.
"""

from ibqos.lab.lab import Lab, LabPaths, default_root
from ibqos.lab.prometheus import PrometheusQueryError, PrometheusServer
from ibqos.lab.xgft import XgftSpec, build_xgft, parse_xgft

__all__ = [
    "Lab",
    "LabPaths",
    "PrometheusQueryError",
    "PrometheusServer",
    "XgftSpec",
    "build_xgft",
    "default_root",
    "parse_xgft",
]
