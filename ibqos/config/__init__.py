"""The ibqos configuration (``ibqos.yaml``): its sections, loading and validation.

The sections are frozen pydantic dataclasses (:mod:`ibqos.config.models`,
:mod:`ibqos.config.planning`); :func:`load_config` finds every problem of a file at once
(:mod:`ibqos.config.load`).  Intensity classes and lane limits, which the planner takes
from the config, are in :mod:`ibqos.config.classes` and :mod:`ibqos.config.lanes`.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.config.classes import CLASSES, Class, Thresholds
    from ibqos.config.lanes import LaneConfig
    from ibqos.config.load import (
        DEFAULT_PATH,
        find_config,
        json_schema,
        load_config,
        parse_config,
    )
    from ibqos.config.models import (
        BACKENDS,
        DEFAULT_MODE,
        FABRIC_SOURCES,
        JOB_SOURCES,
        LAB_DISCOVERED_FILE,
        MODES,
        PORT_TYPES,
        ROUTE_SOURCES,
        SQUEUE_FORMATS,
        AgentConfig,
        BasicAuthConfig,
        CollectConfig,
        Config,
        FabricConfig,
        JobsConfig,
        LabConfig,
        MetricsConfig,
        OpenSMConfig,
        ProfilesConfig,
        SlurmConfig,
        TlsConfig,
    )
    from ibqos.config.planning import AUTO_LANE_KEYS, DEFAULT_RESERVED_SLS, LanesConfig
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".classes": ("CLASSES", "Class", "Thresholds"),
            ".lanes": ("LaneConfig",),
            ".load": (
                "DEFAULT_PATH",
                "find_config",
                "json_schema",
                "load_config",
                "parse_config",
            ),
            ".models": (
                "BACKENDS",
                "DEFAULT_MODE",
                "FABRIC_SOURCES",
                "JOB_SOURCES",
                "LAB_DISCOVERED_FILE",
                "MODES",
                "PORT_TYPES",
                "ROUTE_SOURCES",
                "SQUEUE_FORMATS",
                "AgentConfig",
                "BasicAuthConfig",
                "CollectConfig",
                "Config",
                "FabricConfig",
                "JobsConfig",
                "LabConfig",
                "MetricsConfig",
                "OpenSMConfig",
                "ProfilesConfig",
                "SlurmConfig",
                "TlsConfig",
            ),
            ".planning": ("AUTO_LANE_KEYS", "DEFAULT_RESERVED_SLS", "LanesConfig"),
        },
    )

__all__ = [
    "AUTO_LANE_KEYS",
    "BACKENDS",
    "CLASSES",
    "DEFAULT_MODE",
    "DEFAULT_PATH",
    "DEFAULT_RESERVED_SLS",
    "FABRIC_SOURCES",
    "JOB_SOURCES",
    "LAB_DISCOVERED_FILE",
    "MODES",
    "PORT_TYPES",
    "ROUTE_SOURCES",
    "SQUEUE_FORMATS",
    "AgentConfig",
    "BasicAuthConfig",
    "Class",
    "CollectConfig",
    "Config",
    "FabricConfig",
    "JobsConfig",
    "LabConfig",
    "LaneConfig",
    "LanesConfig",
    "MetricsConfig",
    "OpenSMConfig",
    "ProfilesConfig",
    "SlurmConfig",
    "Thresholds",
    "TlsConfig",
    "find_config",
    "json_schema",
    "load_config",
    "parse_config",
]
