"""ibqos configuration: YAML validated all at once into frozen dataclasses.

Search order: an explicit ``--config``, then ``$IBQOS_CONFIG``, then
``/etc/ibqos/ibqos.yaml``.  Every error names the file and the key path.  Sections other
stages will need are added as those stages land; unknown keys are errors so that typos
do not pass silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ibqos.errors import ConfigError

DEFAULT_PATH = Path("/etc/ibqos/ibqos.yaml")
JOB_SOURCES = ("file",)


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
class LabConfig:
    """Set when the config belongs to a simulated lab fabric."""

    name: str
    dir: Path


@dataclass(frozen=True)
class Config:
    source: str
    opensm: OpenSMConfig = field(default_factory=OpenSMConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
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
    top = _mapping(data, source, "", ("opensm", "jobs", "lab"))
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
        lab=lab,
    )


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
