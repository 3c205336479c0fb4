"""The config's names as ``ibqos.config.schema`` offers them: the sections, the loader and
their constants, from :mod:`ibqos.config.models`, :mod:`ibqos.config.planning` and
:mod:`ibqos.config.load`.  New code imports them from the package, :mod:`ibqos.config`.
"""

from ibqos.config.load import (
    DEFAULT_PATH,
    check_mapping,
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

__all__ = [
    "AUTO_LANE_KEYS",
    "BACKENDS",
    "DEFAULT_MODE",
    "DEFAULT_PATH",
    "DEFAULT_RESERVED_SLS",
    "FABRIC_SOURCES",
    "JOB_SOURCES",
    "LAB_DISCOVERED_FILE",
    "MODES",
    "PORT_TYPES",
    "SQUEUE_FORMATS",
    "AgentConfig",
    "BasicAuthConfig",
    "CollectConfig",
    "Config",
    "FabricConfig",
    "JobsConfig",
    "LabConfig",
    "LanesConfig",
    "MetricsConfig",
    "OpenSMConfig",
    "ProfilesConfig",
    "SlurmConfig",
    "TlsConfig",
    "check_mapping",
    "find_config",
    "json_schema",
    "load_config",
    "parse_config",
]
