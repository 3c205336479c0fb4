"""Two jobs on the recorded 4-leaf lab fabric, each alone on two leaves: a heavy one and a
light one, and the rates that give each a chosen utilization of its leaves' uplinks."""

from __future__ import annotations

import pandas as pd

from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.fabric.model import Fabric
from ibqos.jobs.model import Job
from tests.support.fabric_rates import leaf_up_ports, rates, setup

NO_EWMA = Thresholds(tau_s=0.0)
LANES = LaneConfig(min_hold_s=60.0, min_interval_s=0.0)
LINK = 12.5e9  # 4x EDR, bytes/s per direction
HEAVY = Job("h", ("cn0001", "cn0002", "cn0009", "cn0010"), name="ft")  # leaves 1 and 2
LIGHT = Job("l", ("cn0017", "cn0018", "cn0025", "cn0026"), name="pairs")  # leaves 3 and 4


def traffic(heavy_util: float, light_util: float) -> tuple[Fabric, pd.DataFrame]:
    """Rates where each job is alone on its two leaves and sends *util* of their uplinks."""
    fabric, hp = setup()
    xmit = {}
    for job, util, leaves in ((HEAVY, heavy_util, (1, 2)), (LIGHT, light_util, (3, 4))):
        for host in job.nodes:
            xmit[hp[host]] = 2 * LINK * util  # two uplinks per leaf, two hosts per leaf
        for leaf in leaves:
            for key in leaf_up_ports(fabric, f"sw-L1-000{leaf}"):
                xmit[key] = LINK * util
    return fabric, rates(fabric, xmit)
