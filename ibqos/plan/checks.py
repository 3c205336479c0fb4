"""What the planner refuses: lane configurations that do not fit, jobs that make no sense."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from ibqos.config.classes import CLASSES
from ibqos.config.lanes import (
    MAX_VLARB_ENTRIES,
    MIN_WEIGHT_RATIO,
    MTUS,
    NUM_SLS,
    WEIGHT_LAWS,
    LaneConfig,
)
from ibqos.errors import PlanError


class JobLike(Protocol):
    """What is checked of a job (:class:`ibqos.plan.planner.JobState`)."""

    @property
    def job_id(self) -> str: ...
    @property
    def intensity(self) -> float | None: ...
    @property
    def cls(self) -> str | None: ...
    @property
    def expected(self) -> str | None: ...
    @property
    def sl(self) -> int | None: ...


__all__ = ["check_jobs", "check_lanes"]


def check_lanes(cfg: LaneConfig) -> None:
    """Refuse a lane configuration the planner cannot plan with.

    Raises:
        PlanError: the first problem, naming the ``lanes`` key.
    """

    def bad(what: str) -> PlanError:
        return PlanError(f"lanes: {what}")

    if not 1 <= cfg.data_vls <= 15:
        raise bad(f"data_vls: expected 1-15, got {cfg.data_vls!r}")
    vls = range(cfg.data_vls)
    if cfg.mtu not in MTUS:
        raise bad(f"mtu: expected one of {MTUS}, got {cfg.mtu!r}")
    for sl in cfg.reserved_sls:
        if not 0 <= sl < NUM_SLS:
            raise bad(f"reserved_sls: SL {sl} is not 0-15")
    for vl in (*cfg.reserved_vls, cfg.default_vl):
        if vl not in vls:
            raise bad(f"VL {vl} is not a data VL of this fabric (0-{cfg.data_vls - 1})")
    for sl, vl in cfg.reserved_sl2vl:
        if sl not in cfg.reserved_sls:
            raise bad(f"reserved_sl2vl: SL {sl} is not reserved")
        if vl not in vls:
            raise bad(f"reserved_sl2vl: VL {vl} of SL {sl} is not a data VL (0-{vls[-1]})")
    if len(set(cfg.reserved_sls)) >= NUM_SLS:
        raise bad("every SL is reserved: none left for jobs")
    if all(vl in cfg.reserved_vls for vl in vls):
        raise bad("every data VL is reserved: none left for jobs")
    if cfg.weight_law not in WEIGHT_LAWS:
        raise bad(f"weight_law: expected one of {WEIGHT_LAWS}, got {cfg.weight_law!r}")
    if not (math.isfinite(cfg.weight_ratio) and cfg.weight_ratio >= MIN_WEIGHT_RATIO):
        raise bad(
            f"weight_ratio: expected a number >= {MIN_WEIGHT_RATIO:g}, got {cfg.weight_ratio!r}"
        )
    if cfg.weight_law == "linear" and cfg.weight_ratio < 1.0:
        # 1 + rank * (ratio - 1) reaches 0 at some rank: below 1 only a geometric law works
        raise bad(f"weight_ratio {cfg.weight_ratio:g} (below 1) needs weight_law geometric")
    if not 1 <= cfg.other_vl_packets <= cfg.packets_per_entry:
        raise bad(f"other_vl_packets: expected 1-{cfg.packets_per_entry} at MTU {cfg.mtu}")
    for name in ("vlarb_low_cap", "vlarb_high_cap"):
        if not 1 <= getattr(cfg, name) <= MAX_VLARB_ENTRIES:
            raise bad(f"{name}: expected 1-{MAX_VLARB_ENTRIES}, got {getattr(cfg, name)!r}")
    if len(cfg.vlarb_high) > cfg.vlarb_high_cap:
        raise bad(
            f"vlarb_high: {len(cfg.vlarb_high)} entries, VLArbHighCap is {cfg.vlarb_high_cap}"
        )
    for vl, weight in cfg.vlarb_high:
        if vl not in vls or not 0 <= weight <= 255:
            raise bad(f"vlarb_high: entry {vl}:{weight} needs a data VL and a weight 0-255")
    if not 0 <= cfg.high_limit <= 255:
        raise bad(f"high_limit: expected 0-255, got {cfg.high_limit!r}")
    for name in ("min_hold_s", "min_interval_s"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value >= 0):
            raise bad(f"{name}: expected seconds >= 0, got {value!r}")
    if cfg.default_class not in CLASSES:
        raise bad(f"default_class: expected one of {CLASSES}, got {cfg.default_class!r}")
    if len(cfg.class_intensity) != len(CLASSES) or not all(
        math.isfinite(x) and x >= 0 for x in cfg.class_intensity
    ):
        raise bad(f"class_intensity: expected {len(CLASSES)} numbers >= 0")


def check_jobs(jobs: Sequence[JobLike]) -> None:
    """Refuse jobs listed twice, or with a class, intensity or SL out of range.

    Raises:
        PlanError: the first problem, naming the job.
    """

    seen: set[str] = set()
    for job in jobs:
        if job.job_id in seen:
            raise PlanError(f"job {job.job_id}: listed twice")
        seen.add(job.job_id)
        for cls in (job.cls, job.expected):
            if cls is not None and cls not in CLASSES:
                raise PlanError(f"job {job.job_id}: class {cls!r} is not one of {CLASSES}")
        if job.intensity is not None and not (math.isfinite(job.intensity) and job.intensity >= 0):
            raise PlanError(f"job {job.job_id}: intensity {job.intensity!r} is not a number >= 0")
        if job.sl is not None and not 0 <= job.sl < NUM_SLS:
            raise PlanError(f"job {job.job_id}: SL {job.sl!r} is not 0-15")
