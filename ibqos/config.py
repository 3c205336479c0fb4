"""ibqos configuration: YAML validated all at once into frozen dataclasses.

Search order: an explicit ``--config``, then ``$IBQOS_CONFIG``, then
``/etc/ibqos/ibqos.yaml``.  Every error names the file and the key path.  Sections other
stages will need are added as those stages land; unknown keys are errors so that typos
do not pass silently.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ibqos.errors import ConfigError

DEFAULT_PATH = Path("/etc/ibqos/ibqos.yaml")
JOB_SOURCES = ("file",)
FABRIC_SOURCES = ("ibnetdiscover", "file", "lab")
BACKENDS = ("native", "perfquery", "replay")


@dataclass(frozen=True)
class OpenSMConfig:
    """Where the site's OpenSM keeps what ibqos reads and writes."""

    conf: Path = Path("/etc/opensm/opensm.conf")
    policy_file: Path = Path("/etc/opensm/qos-policy.conf")
    log: Path = Path("/var/log/opensm.log")
    pid_file: Path | None = None


@dataclass(frozen=True)
class JobsConfig:
    """Where running jobs come from."""

    source: str = "file"
    path: Path = Path("/etc/ibqos/jobs.yaml")


@dataclass(frozen=True)
class FabricConfig:
    """Where the topology comes from.

    Attributes:
        source: "ibnetdiscover" (run it: SMP discovery from this host), "file" (an
            ibnetdiscover output at *path*), or "lab" (the lab's recorded discovery).
        path: the file for source "file".
        root_guids: GUIDs of the top-level switches, for fabrics where levels cannot be
            inferred from the leaves (like OpenSM's ftree root_guid_file); empty: infer.
        refresh_s: seconds between two reads of the topology while collecting, to notice
            ports that vanish or appear (0: never read it again).
    """

    source: str = "ibnetdiscover"
    path: Path | None = None
    root_guids: tuple[int, ...] = ()
    refresh_s: float = 300.0


@dataclass(frozen=True)
class CollectConfig:
    """How port counters are read (``ibqos.collect``).

    Attributes:
        backend: "native" (libibumad MADs), "perfquery" (infiniband-diags processes) or
            "replay" (a recorded sweep series at *replay_path*).
        interval_s: seconds between sweeps.
        xmit_wait: also read PortXmitWait (PortCounters) where PCE does not carry it.
        ca: CA to send MADs from (native); None: the first.
        port: CA port (native); 0: the first active one.
        window: MADs in flight at most (native).
        timeout_s: seconds to wait for one reply (native) or one perfquery process.
        retries: extra tries per MAD after a timeout (native).
        workers: perfquery processes at once.
        per_switch: one perfquery process per switch rather than per port.
        replay_path: recording directory for the replay backend.
        replay_loop: start the recording over when it ends.
    """

    backend: str = "native"
    interval_s: float = 10.0
    xmit_wait: bool = True
    ca: str | None = None
    port: int = 0
    window: int = 32
    timeout_s: float = 0.5
    retries: int = 2
    workers: int = 4
    per_switch: bool = True
    replay_path: Path | None = None
    replay_loop: bool = False


@dataclass(frozen=True)
class LabConfig:
    """Set when the config belongs to a simulated lab fabric."""

    name: str
    dir: Path


@dataclass(frozen=True)
class Config:
    source: str
    opensm: OpenSMConfig = field(default_factory=OpenSMConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    lab: LabConfig | None = None


def find_config(explicit: Path | None) -> Path:
    """The config file to use, by the search order above."""
    if explicit is not None:
        return explicit
    env = os.environ.get("IBQOS_CONFIG")
    return Path(env) if env else DEFAULT_PATH


def load_config(path: Path) -> Config:
    """Read and validate a config file.

    Raises:
        ConfigError: ``<file>: <key.path>: <problem>``.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML") from err
    return parse_config(data if data is not None else {}, str(path))


def parse_config(data: object, source: str) -> Config:
    """Validate a loaded document (see :func:`load_config`)."""
    top = _mapping(data, source, "", ("opensm", "jobs", "fabric", "collect", "lab"))
    osm = _mapping(
        top.get("opensm", {}), source, "opensm", ("conf", "policy_file", "log", "pid_file")
    )
    jobs = _mapping(top.get("jobs", {}), source, "jobs", ("source", "path"))
    d_osm, d_jobs = OpenSMConfig(), JobsConfig()
    job_source = _str(jobs.get("source", d_jobs.source), source, "jobs.source")
    if job_source not in JOB_SOURCES:
        raise ConfigError(
            f"{source}: jobs.source: expected one of {JOB_SOURCES}, got {job_source!r}"
        )
    lab = None
    if "lab" in top:
        raw = _mapping(top["lab"], source, "lab", ("name", "dir"))
        lab = LabConfig(
            _str(raw.get("name"), source, "lab.name"), _path(raw.get("dir"), source, "lab.dir")
        )
    pid = osm.get("pid_file")
    return Config(
        source=source,
        opensm=OpenSMConfig(
            conf=_path(osm.get("conf", d_osm.conf), source, "opensm.conf"),
            policy_file=_path(
                osm.get("policy_file", d_osm.policy_file), source, "opensm.policy_file"
            ),
            log=_path(osm.get("log", d_osm.log), source, "opensm.log"),
            pid_file=None if pid is None else _path(pid, source, "opensm.pid_file"),
        ),
        jobs=JobsConfig(job_source, _path(jobs.get("path", d_jobs.path), source, "jobs.path")),
        fabric=_fabric(top.get("fabric", {}), source, lab),
        collect=_collect(top.get("collect", {}), source),
        lab=lab,
    )


def _fabric(value: object, source: str, lab: LabConfig | None) -> FabricConfig:
    raw = _mapping(value, source, "fabric", ("source", "path", "root_guids", "refresh_s"))
    # a lab's config reads the lab's own discovery unless told otherwise
    kind = _choice(
        raw.get("source", "lab" if lab else "ibnetdiscover"),
        source,
        "fabric.source",
        FABRIC_SOURCES,
    )
    path = None if raw.get("path") is None else _path(raw["path"], source, "fabric.path")
    if kind == "file" and path is None:
        raise ConfigError(f"{source}: fabric.path: required when fabric.source is file")
    if kind == "lab" and lab is None:
        raise ConfigError(f"{source}: fabric.source: 'lab' needs a lab section")
    guids = raw.get("root_guids", [])
    if not isinstance(guids, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and 0 < g < 2**64 for g in guids
    ):
        raise ConfigError(f"{source}: fabric.root_guids: expected a list of GUIDs (integers)")
    refresh = _number(raw.get("refresh_s", FabricConfig.refresh_s), source, "fabric.refresh_s", 0)
    return FabricConfig(kind, path, tuple(guids), refresh)


def _collect(value: object, source: str) -> CollectConfig:
    d = CollectConfig()
    raw = _mapping(value, source, "collect", tuple(CollectConfig.__dataclass_fields__))
    ca = raw.get("ca")
    replay = raw.get("replay_path")
    cfg = CollectConfig(
        backend=_choice(raw.get("backend", d.backend), source, "collect.backend", BACKENDS),
        interval_s=_number(raw.get("interval_s", d.interval_s), source, "collect.interval_s", 0.01),
        xmit_wait=_bool(raw.get("xmit_wait", d.xmit_wait), source, "collect.xmit_wait"),
        ca=None if ca is None else _str(ca, source, "collect.ca"),
        port=int(
            _number(raw.get("port", d.port), source, "collect.port", 0, integer=True, maximum=254)
        ),
        window=int(_number(raw.get("window", d.window), source, "collect.window", 1, integer=True)),
        timeout_s=_number(raw.get("timeout_s", d.timeout_s), source, "collect.timeout_s", 0.001),
        retries=int(
            _number(raw.get("retries", d.retries), source, "collect.retries", 0, integer=True)
        ),
        workers=int(
            _number(raw.get("workers", d.workers), source, "collect.workers", 1, integer=True)
        ),
        per_switch=_bool(raw.get("per_switch", d.per_switch), source, "collect.per_switch"),
        replay_path=None if replay is None else _path(replay, source, "collect.replay_path"),
        replay_loop=_bool(raw.get("replay_loop", d.replay_loop), source, "collect.replay_loop"),
    )
    if cfg.backend == "replay" and cfg.replay_path is None:
        raise ConfigError(f"{source}: collect.replay_path: required when collect.backend is replay")
    return cfg


def _choice(value: object, source: str, key: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{source}: {key}: expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _number(
    value: object,
    source: str,
    key: str,
    minimum: float,
    *,
    integer: bool = False,
    maximum: float = math.inf,
) -> float:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if integer and not isinstance(number, int):
        number = None
    # NaN and infinity are numbers to YAML (.nan, .inf), never sensible here
    if number is None or not math.isfinite(number) or not minimum <= number <= maximum:
        kind = "an integer" if integer else "a number"
        upper = f" and <= {maximum:g}" if maximum != math.inf else ""
        raise ConfigError(f"{source}: {key}: expected {kind} >= {minimum:g}{upper}, got {value!r}")
    return float(number)


def _bool(value: object, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: {key}: expected true or false, got {value!r}")
    return value


def _mapping(value: object, source: str, key: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    where = f"{source}: {key or 'top level'}"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if k not in allowed:
            prefix = f"{key}." if key else ""
            raise ConfigError(
                f"{source}: {prefix}{k}: unknown key (expected one of {', '.join(allowed)})"
            )
    return value


def _str(value: object, source: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {key}: expected a non-empty string, got {value!r}")
    return value


def _path(value: object, source: str, key: str) -> Path:
    if isinstance(value, Path):
        return value
    return Path(_str(value, source, key))
