"""The lab: a simulated fabric (real ibsim + real OpenSM) with a traffic model.

``Lab`` runs one in-process; ``ibqos lab up`` runs one in a background supervisor.
"""

from ibqos.errors import (
    PrometheusQueryError,
)
from ibqos.fabric.xgft import XgftSpec, build_xgft, parse_xgft
from ibqos.lab.lab import Lab, LabPaths, default_root
from ibqos.lab.prometheus import (
    PrometheusServer,
)

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
