"""OpenSM's two files as a plan wants them, checked before anything is written.

- opensm.conf: the admin's file with ibqos's block of QoS keys (:mod:`ibqos.opensm.conf`);
- qos-policy.conf: the admin's file with ibqos's block, a port-group per job and a
  qos-level per SL (:mod:`ibqos.opensm.policy`).

Both are rendered from the files as they are on disk now, for the OpenSM that reads them
(upstream or NVIDIA's, :mod:`ibqos.opensm.flavour`: on NVIDIA's the ``qos_sw2sw_*`` keys
get the switch tables too), and both must pass ibqos's own checker
(:mod:`ibqos.opensm.check`): a file OpenSM would reject, or drop the whole policy for, is
never handed on to be written.  Nothing here writes or signals (:mod:`ibqos.opensm.apply`
does).

An error on one of the admin's lines (outside ibqos's block) stops every render until the
admin fixes it: writing would only make OpenSM reject the file, ibqos roll back, and the
next cycle try again.  A warning (OpenSM keeps the policy, e.g. a match rule with a P_Key
no partition has, which it logs as ERR AC14) lets the files through, and the caller gets
it (:func:`render_checked`).  The policy is checked against the partitions of the
partition file opensm.conf names (:mod:`ibqos.opensm.partitions`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ibqos.errors import RenderError
from ibqos.opensm.apply import read_file
from ibqos.opensm.check import Finding, check_conf, check_policy
from ibqos.opensm.conf import BEGIN_MARK as CONF_BEGIN
from ibqos.opensm.conf import END_MARK as CONF_END
from ibqos.opensm.conf import find_block, managed_values, parse_conf, render_conf, split_lines
from ibqos.opensm.flavour import Detected, managed_types, resolve_flavour
from ibqos.opensm.partitions import DEFAULT_PARTITIONS_FILE, Partitions, read_partitions
from ibqos.opensm.policy.render import BEGIN_MARK as POLICY_BEGIN
from ibqos.opensm.policy.render import END_MARK as POLICY_END
from ibqos.opensm.policy.render import PolicyJob, render_policy

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ibqos.config.lanes import LaneConfig
    from ibqos.config.models import OpenSMConfig
    from ibqos.plan.planner import Plan


@dataclass(frozen=True)
class Rendered:
    """OpenSM's two files as they should be, and what the checker warns about in them.

    Attributes:
        files: path -> text (opensm.conf, then the policy).
        warnings: findings OpenSM accepts the files with (a rule it keeps but that never
            matches, a value it reads otherwise than likely meant, ...), each naming its
            file and line and whether the line is the admin's or ibqos's.
        flavour: the OpenSM the files were rendered for, and how that was told.
    """

    files: dict[Path, str]
    warnings: tuple[Finding, ...] = ()
    flavour: Detected | None = None


def render_files(
    cfg: OpenSMConfig,
    lanes: LaneConfig,
    plan: Plan,
    jobs: Sequence[tuple[str, tuple[int, ...], str]],
) -> dict[Path, str]:
    """opensm.conf and the policy as they should be, by path (:func:`render_checked`
    without its warnings)."""
    return render_checked(cfg, lanes, plan, jobs).files


def render_checked(
    cfg: OpenSMConfig,
    lanes: LaneConfig,
    plan: Plan,
    jobs: Sequence[tuple[str, tuple[int, ...], str]],
) -> Rendered:
    """opensm.conf and the policy as they should be, checked.

    Args:
        cfg: the ``opensm`` config section (the two files, the port types ibqos manages).
        lanes: the lanes the plan may use (data VLs, VLArb capacities), to check against.
        plan: the plan in force.
        jobs: (job id, port GUIDs of its CA ports, application name) of every planned job.

    Returns:
        The files, and the checker's warnings about them.

    Raises:
        RenderError: a file fails the checker, or its ibqos markers do not delimit one
            block; the message names the file and line, and whether the line is the
            admin's (to fix by hand: ibqos writes nothing until then) or ibqos's own.
            Nothing is to be written.
    """
    conf_source, policy_source = str(cfg.conf), str(cfg.policy_file)
    admin_conf = read_file(cfg.conf) or ""
    flavour = resolve_flavour(cfg.flavour, parse_conf(admin_conf), cfg.log, _pid(cfg.pid_file))
    log.debug("rendering for OpenSM %s", flavour)
    values = managed_values(plan.tables, managed_types(cfg.port_types, flavour.flavour))
    conf = render_conf(admin_conf, values, source=conf_source)
    policy_jobs = [
        PolicyJob(job_id, plan.job_sl[job_id], guids, name) for job_id, guids, name in jobs
    ]
    policy = render_policy(read_file(cfg.policy_file), policy_jobs, source=policy_source)
    findings = [
        *_owned(
            check_conf(
                conf,
                conf_source,
                data_vls=lanes.data_vls,
                vlarb_low_cap=lanes.vlarb_low_cap,
                vlarb_high_cap=lanes.vlarb_high_cap,
                flavour=flavour.flavour,
            ),
            conf,
            CONF_BEGIN,
            CONF_END,
        ),
        *_owned(
            check_policy(policy, policy_source, partitions=_partitions(conf)),
            policy,
            POLICY_BEGIN,
            POLICY_END,
        ),
    ]
    if "sw2sw" in cfg.port_types and flavour.flavour == "upstream":
        findings.append(Finding(conf_source, None, "opensm.port_types lists sw2sw, but this"
                                f" OpenSM is {flavour}: it has no qos_sw2sw_* keys, none"
                                " written", "warning"))  # fmt: skip
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RenderError(f"{errors[0]}{more}; nothing written")
    files = {cfg.conf: conf, cfg.policy_file: policy}
    return Rendered(files, tuple(findings), flavour)


def _pid(pid_file: Path | None) -> int | None:
    """The pid in OpenSM's pid file (None: no file, or no pid in it): a new one is a new
    OpenSM, whose version banner is looked for in its whole log."""
    if pid_file is None:
        return None
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _partitions(conf: str) -> Partitions | None:
    """The subnet's partitions, from the partition file opensm.conf names (OpenSM's
    default path without one); None when it cannot be read."""
    path = parse_conf(conf).get("partition_config_file", "(null)")
    return read_partitions(DEFAULT_PARTITIONS_FILE if path in ("", "(null)") else path)


def _owned(findings: list[Finding], text: str, begin: str, end: str) -> list[Finding]:
    """*findings* with their lines' owner said: ibqos's block, or the admin's part."""
    block = find_block(split_lines(text), begin, end, "")
    out = []
    for f in findings:
        ours = block is not None and f.line is not None and block[0] < f.line <= block[1] + 1
        owner = (
            "in ibqos's block"
            if ours
            else "the admin's line, outside ibqos's block: fix it by hand"
        )
        out.append(Finding(f.source, f.line, f"{f.message} [{owner}]", f.severity))
    return out
