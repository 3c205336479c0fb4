"""OpenSM's two files as a plan wants them, checked before anything is written.

- opensm.conf: the admin's file with ibqos's block of QoS keys (:mod:`ibqos.opensm.conf`);
- qos-policy.conf: the admin's file with ibqos's block, a port-group per job and a
  qos-level per SL (:mod:`ibqos.opensm.policy`).

Both are rendered from the files as they are on disk now, and both must pass ibqos's own
checker (:mod:`ibqos.opensm.check`): a file OpenSM would reject, or drop the whole policy
for, is never handed on to be written.  Nothing here writes or signals
(:mod:`ibqos.opensm.apply` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ibqos.errors import RenderError
from ibqos.opensm.apply import read_file
from ibqos.opensm.check import check_conf, check_policy
from ibqos.opensm.conf import managed_values, render_conf
from ibqos.opensm.policy import PolicyJob, render_policy

if TYPE_CHECKING:
    from ibqos.config.lanes import LaneConfig
    from ibqos.config.models import OpenSMConfig
    from ibqos.plan.planner import Plan


def render_files(
    cfg: OpenSMConfig,
    lanes: LaneConfig,
    plan: Plan,
    jobs: Sequence[tuple[str, tuple[int, ...], str]],
) -> dict[Path, str]:
    """opensm.conf and the policy as they should be, by path.

    Args:
        cfg: the ``opensm`` config section (the two files, the port types ibqos manages).
        lanes: the lanes the plan may use (data VLs, VLArb capacities), to check against.
        plan: the plan in force.
        jobs: (job id, port GUIDs of its CA ports, application name) of every planned job.

    Raises:
        RenderError: a file fails the checker; nothing is to be written.
    """
    values = managed_values(plan.tables, cfg.port_types)
    conf = render_conf(read_file(cfg.conf) or "", values)
    policy_jobs = [
        PolicyJob(job_id, plan.job_sl[job_id], guids, name) for job_id, guids, name in jobs
    ]
    policy = render_policy(read_file(cfg.policy_file), policy_jobs)
    findings = [
        *check_conf(
            conf,
            str(cfg.conf),
            data_vls=lanes.data_vls,
            vlarb_low_cap=lanes.vlarb_low_cap,
            vlarb_high_cap=lanes.vlarb_high_cap,
        ),
        *check_policy(policy, str(cfg.policy_file)),
    ]
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise RenderError(
            f"{errors[0]} (and {len(errors) - 1} more); nothing written"
            if len(errors) > 1
            else f"{errors[0]}; nothing written"
        )
    return {cfg.conf: conf, cfg.policy_file: policy}
