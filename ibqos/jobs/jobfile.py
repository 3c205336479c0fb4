"""Job files (YAML or JSON): which jobs run on which hosts, and how they communicate.

The simulated-fabric traffic model needs the traffic keys (``traffic=True``); the agent's file
job source needs only id and nodes, and uses a declared pattern as the job's profile.  The
format is :mod:`ibqos.jobs.schema` (``docs/jobs.md``, ``schemas/jobs.schema.json``); every
problem of the files read is reported at once, one line each, naming the file and the key
path.  Jobs come out as :class:`~ibqos.jobs.model.Job`.
"""

from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ibqos.errors import JobsError
from ibqos.jobs.hosts import shown
from ibqos.jobs.model import Job
from ibqos.jobs.schema import PROBLEM, JobEntry, JobFile, key_path

# the names other modules import from here, with those defined here
__all__ = [
    "check_hosts",
    "dump_jobs",
    "job_files",
    "json_schema",
    "load_jobs",
    "parse_jobs",
]

log = logging.getLogger(__name__)

_SUFFIXES = (".yaml", ".yml", ".json")
#: the JSON Schema dialect pydantic writes
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass
class _Problems:
    """Problems found so far, one line each; the first cause found is chained."""

    lines: list[str] = field(default_factory=list)
    cause: BaseException | None = None

    def add(self, line: str, cause: BaseException | None = None) -> None:
        self.lines.append(line)
        self.cause = self.cause or cause

    def raise_if_any(self) -> None:
        if not self.lines:
            return
        raise JobsError("\n".join(self.lines)) from self.cause


def _problem(error: ErrorDetails, source: str, data: object) -> tuple[str, BaseException | None]:
    """One of pydantic's errors as a line of the message, and its cause."""
    loc, kind = tuple(error["loc"]), error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    if kind == PROBLEM:
        return f"{source}: {key_path(loc)}: {ctx['message']}", ctx.get("cause")
    if (kind == "model_type" and not loc) or (kind == "missing" and loc == ("jobs",)):
        return f"{source}: expected a mapping with the key 'jobs', got {shown(data)}", None
    if kind == "model_type":
        message = f"expected a mapping, got {shown(error['input'])}"
    elif kind in ("extra_forbidden", "invalid_key"):
        message = "unknown key (only 'jobs' is allowed)" if len(loc) == 1 else "unknown key"
    elif kind == "missing":
        message = "required key is missing"
    else:
        message = error["msg"]
    return f"{source}: {key_path(loc)}: {message}", None


def _document(
    data: object, source: str, problems: _Problems, traffic: bool
) -> list[tuple[str, Job]]:
    """Validate a whole document; return (key path, job) for each valid job."""
    context = {"traffic": traffic}
    try:
        entries = list(enumerate(JobFile.model_validate(data, context=context).jobs))
    except ValidationError as err:
        failed = set()
        for error in err.errors(include_url=False):
            problems.add(*_problem(error, source, data))
            if len(error["loc"]) > 1 and error["loc"][0] == "jobs":
                failed.add(error["loc"][1])
        # the valid jobs still take part in the check for duplicate ids
        items = data.get("jobs") if isinstance(data, dict) else None
        entries = [
            (i, JobEntry.model_validate(item, context=context))
            for i, item in enumerate(items if isinstance(items, list) else [])
            if i not in failed
        ]
    return [(f"{source}: jobs[{i}]", entry.job()) for i, entry in entries]


def _check_unique(found: list[tuple[str, Job]], problems: _Problems) -> None:
    first: dict[str, str] = {}
    for where, job in found:
        if job.id in first:
            problems.add(f"{where}.id: duplicate id {job.id!r} (first used at {first[job.id]})")
        else:
            first[job.id] = where


def parse_jobs(data: object, source: str, *, traffic: bool = False) -> tuple[Job, ...]:
    """Validate a loaded YAML/JSON job document.

    Args:
        data: the document as loaded by ``yaml.safe_load`` or ``json.load``.
        source: names the input in error messages (usually the file path).
        traffic: require the traffic keys (the lab's traffic model drives the fabric).

    Returns:
        The jobs in file order.

    Raises:
        JobsError: naming every problem, one per line.
    """
    problems = _Problems()
    found = _document(data, source, problems, traffic)
    _check_unique(found, problems)
    problems.raise_if_any()
    return tuple(job for _, job in found)


def _read(file: pathlib.Path) -> object:
    try:
        with open(file, encoding="utf-8") as stream:
            if file.suffix.lower() == ".json":
                return json.load(stream)
            return yaml.safe_load(stream)
    except (OSError, UnicodeDecodeError) as err:
        raise JobsError(f"{file}: cannot read job file") from err
    except json.JSONDecodeError as err:
        raise JobsError(f"{file}: invalid JSON") from err
    except yaml.YAMLError as err:
        # PyYAML's message spans lines (problem, then position); it follows as the cause.
        raise JobsError(f"{file}: invalid YAML") from err


def _is_job_file(path: pathlib.Path) -> bool:
    # Hidden files are editor backups and half-written temporaries, not jobs.
    return path.suffix.lower() in _SUFFIXES and not path.name.startswith(".") and path.is_file()


def job_files(directory: pathlib.Path) -> list[pathlib.Path]:
    """The job files of a directory, in the order :func:`load_jobs` reads them.

    Raises:
        OSError: the directory cannot be listed.
    """
    return sorted(p for p in directory.iterdir() if _is_job_file(p))


def load_jobs(path: pathlib.Path, *, traffic: bool = False) -> tuple[Job, ...]:
    """Load a job file, or every job file in a directory.

    A directory is read in file name order; only ``*.yaml``, ``*.yml`` and ``*.json``
    files count, and hidden files are skipped.
    Ids must be unique across all files.  ``.json`` files are read as JSON, others as YAML.
    *traffic* requires the traffic keys, as :func:`parse_jobs`.

    Raises:
        JobsError: a file is unreadable or not valid YAML/JSON, or the jobs are invalid
            (every problem of every file, one per line).
    """
    try:
        files = job_files(path) if path.is_dir() else [path]
    except OSError as err:
        raise JobsError(f"{path}: cannot list job directory") from err
    problems = _Problems()
    found: list[tuple[str, Job]] = []
    for file in files:
        found += _document(_read(file), str(file), problems, traffic)
    _check_unique(found, problems)
    problems.raise_if_any()
    log.debug("loaded %d jobs from %d files under %s", len(found), len(files), path)
    return tuple(job for _, job in found)


class _Dumper(yaml.SafeDumper):
    """Writes lists of scalars (halo dims, matrix rows) on one line, the rest as blocks."""


def _represent_list(dumper: yaml.SafeDumper, data: list[object]) -> yaml.SequenceNode:
    flow = not any(isinstance(item, list | dict) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_jobs(jobs: Sequence[Job]) -> str:
    """Return YAML text of ``{'jobs': [...]}`` that :func:`parse_jobs` reads back unchanged."""
    doc = {"jobs": [job.to_dict() for job in jobs]}
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def check_hosts(jobs: Sequence[Job], known_hosts: Collection[str], source: str) -> None:
    """Check that every job runs on known hosts (``jobs[i]`` in errors indexes ``jobs``).

    Raises:
        JobsError: ``SOURCE: jobs[i] (id X): unknown host NAME``, one line per such job.
    """
    known = known_hosts if isinstance(known_hosts, set | frozenset) else set(known_hosts)
    problems = _Problems()
    for i, job in enumerate(jobs):
        unknown = [node for node in job.nodes if node not in known]
        if unknown:
            many = f" ({len(unknown)} unknown hosts)" if len(unknown) > 1 else ""
            problems.add(f"{source}: jobs[{i}] (id {job.id}): unknown host {unknown[0]}{many}")
    problems.raise_if_any()


def json_schema() -> dict[str, Any]:
    """The JSON Schema of job files, as shipped in ``schemas/jobs.schema.json``."""
    schema = JobFile.model_json_schema()
    return {"$schema": JSON_SCHEMA_DIALECT, "title": "ibqos job file"} | schema
