"""The ``classify`` and ``lanes`` sections of ``ibqos.yaml``: what planning is given.

Their YAML keys are the fields of :class:`~ibqos.config.classes.Thresholds` and
:class:`~ibqos.config.lanes.LaneConfig`; the section models here check them, and the config
holds those two runtime classes (``cfg.classify``, ``cfg.lanes.base``).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from ibqos.config.classes import CLASSES, Thresholds
from ibqos.config.fields import (
    Check,
    FromSection,
    auto,
    choice,
    described,
    integers,
    number,
    pairs,
    problem,
    text,
)
from ibqos.config.lanes import MIN_WEIGHT_RATIO, MTUS, WEIGHT_LAWS, Entry, LaneConfig

#: SLs jobs never get unless ``lanes.reserved_sls`` says otherwise
DEFAULT_RESERVED_SLS = (0,)

#: ``lanes`` keys that may be ``auto``: read from the fabric (PortInfo) or OpenSM's config
AUTO_LANE_KEYS = ("data_vls", "vlarb_low_cap", "vlarb_high_cap", "mtu", "routing_engine")

_THRESHOLDS = Thresholds()
_LANES = LaneConfig()


@dataclass(frozen=True, config=ConfigDict(extra="forbid", json_schema_extra=described(Thresholds)))
class ClassifySection:
    """How intensities become classes (``ibqos.config.classes.Thresholds``)."""

    moderate: Annotated[float, number(0)] = _THRESHOLDS.moderate
    high: Annotated[float, number(0)] = _THRESHOLDS.high
    hysteresis: Annotated[float, number(0)] = _THRESHOLDS.hysteresis
    tau_s: Annotated[float, number(0)] = _THRESHOLDS.tau_s


def _thresholds(section: ClassifySection) -> Thresholds:
    try:
        return Thresholds(**dataclasses.asdict(section))
    except ValueError as err:  # its message starts with the key name(s)
        key, _, message = str(err).partition(": ")
        raise problem(message, key=key, cause=err) from err


#: ``Annotated[Thresholds, CLASSIFY]``: the ``classify`` section
CLASSIFY = FromSection(ClassifySection, _thresholds, Thresholds)


@dataclass(frozen=True, config=ConfigDict(extra="forbid", json_schema_extra=described()))
class ClassIntensity:
    """Prior intensity of each class for jobs not measured yet (fraction of the bandwidth
    available to the job).

    Attributes:
        low: of class low.
        moderate: of class moderate.
        high: of class high.
    """

    low: Annotated[float, number(0)] = _LANES.class_intensity[0]
    moderate: Annotated[float, number(0)] = _LANES.class_intensity[1]
    high: Annotated[float, number(0)] = _LANES.class_intensity[2]


def _class_intensity(section: ClassIntensity) -> tuple[float, float, float]:
    return (section.low, section.moderate, section.high)


def _integer(low: int, high: int) -> Check:
    return number(low, high, integer=True)


def _mtu() -> Check:
    pick = choice(MTUS).func
    return Check(lambda value: int(pick(value)), {"enum": list(MTUS)})


@dataclass(frozen=True, config=ConfigDict(extra="forbid", json_schema_extra=described(LaneConfig)))
class LanesSection:
    """What the planner may use (``ibqos.config.lanes.LaneConfig``).  The keys that may be
    `auto` (the default) are read at run time: data VLs, arbitration caps and MTU from the
    ports' PortInfo, the routing engine from opensm.conf."""

    data_vls: Annotated[int | str, auto(_integer(1, 15))] = "auto"
    reserved_sls: Annotated[tuple[int, ...], integers(15)] = DEFAULT_RESERVED_SLS
    reserved_vls: Annotated[tuple[int, ...], integers(14)] = _LANES.reserved_vls
    reserved_sl2vl: Annotated[tuple[tuple[int, int], ...], pairs((15, 14))] = _LANES.reserved_sl2vl
    default_vl: Annotated[int, _integer(0, 14)] = _LANES.default_vl
    weight_law: Annotated[str, choice(WEIGHT_LAWS)] = _LANES.weight_law
    weight_ratio: Annotated[float, number(MIN_WEIGHT_RATIO)] = _LANES.weight_ratio
    other_vl_packets: Annotated[int, _integer(1, 255)] = _LANES.other_vl_packets
    vlarb_high: Annotated[tuple[Entry, ...], pairs((14, 255))] = _LANES.vlarb_high
    high_limit: Annotated[int, _integer(0, 255)] = _LANES.high_limit
    vlarb_low_cap: Annotated[int | str, auto(_integer(1, 64))] = "auto"
    vlarb_high_cap: Annotated[int | str, auto(_integer(1, 64))] = "auto"
    mtu: Annotated[int | str, auto(_mtu())] = "auto"
    min_hold_s: Annotated[float, number(0)] = _LANES.min_hold_s
    min_interval_s: Annotated[float, number(0)] = _LANES.min_interval_s
    routing_engine: Annotated[str, auto(text())] = "auto"
    default_class: Annotated[str, choice(CLASSES)] = _LANES.default_class
    class_intensity: Annotated[
        tuple[float, float, float], FromSection(ClassIntensity, _class_intensity, tuple)
    ] = Field(
        default=_LANES.class_intensity,
        json_schema_extra={"default": dict(zip(CLASSES, _LANES.class_intensity, strict=True))},
    )


@dataclasses.dataclass(frozen=True)
class LanesConfig:
    """The ``lanes`` section: what the planner may use (``ibqos.plan.planner.LaneConfig``).

    Attributes:
        base: the values given, defaults for the rest.
        auto: keys of :data:`AUTO_LANE_KEYS` to read at run time: data VLs, arbitration
            caps and MTU from the ports' PortInfo, the routing engine from opensm.conf;
            their values in *base* are only fallbacks.
    """

    # SL 0 is the policy's DEFAULT level: unmanaged traffic (storage, IPoIB, management)
    # takes it, so jobs stay off it unless the admin says otherwise
    base: LaneConfig = dataclasses.field(
        default_factory=lambda: LaneConfig(reserved_sls=DEFAULT_RESERVED_SLS)
    )
    auto: tuple[str, ...] = AUTO_LANE_KEYS


def _lanes(section: LanesSection) -> LanesConfig:
    given: dict[str, Any] = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    # a key left at auto keeps LaneConfig's default as its fallback
    read = tuple(key for key in AUTO_LANE_KEYS if given[key] == "auto")
    return LanesConfig(LaneConfig(**{k: v for k, v in given.items() if k not in read}), read)


#: ``Annotated[LanesConfig, LANES]``: the ``lanes`` section
LANES = FromSection(LanesSection, _lanes, LanesConfig)
