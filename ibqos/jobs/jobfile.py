"""Job files (YAML or JSON): which jobs run on which hosts, and how they communicate.

The simulated-fabric traffic model needs the traffic keys (``traffic=True``); the agent's file
job source needs only id and nodes, and uses a declared pattern as the job's profile.  The
format is :mod:`ibqos.jobs.schema` (``docs/jobs.md``, ``schemas/jobs.schema.json``); every
problem of the files read is reported at once, one line each, naming the file and the key
path.  Jobs come out as :class:`~ibqos.jobs.model.Job`.
"""

from __future__ import annotations

import io
import json
import logging
import pathlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ibqos.errors import JobsError
from ibqos.jobs.chunks import parse_items, split_items
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
    "read_version",
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


#: libyaml's loader where PyYAML was built with it: four times as fast as the pure-Python
#: one on a big job file, and the same documents (the same resolver and constructor)
_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)


@dataclass(frozen=True)
class Version:
    """One version of one job file, as :func:`read_version` read it.

    Attributes:
        jobs: (key path, job) of each valid job, in file order.
        problems: the problems found, one line each (as :func:`load_jobs` words them).
        rejected: the jobs left out for them (1 for a document that is no job file).
        entries: the job of each valid entry, by the entry's text (``repr`` of what the
            file gave), for the next version's read.
        cause: the first problem's cause.
        items: what each item of a YAML file's ``jobs`` gave, by its text
            (:mod:`ibqos.jobs.chunks`), for the next version's parse; empty where the
            file is not cut so.
        whole: the document is no job file at all (empty, not a mapping with a list of
            jobs): most likely one being written, not one with bad jobs.
    """

    jobs: tuple[tuple[str, Job], ...]
    problems: tuple[str, ...] = ()
    rejected: int = 0
    entries: Mapping[str, Job] = field(default_factory=dict)
    cause: BaseException | None = None
    items: Mapping[str, object] = field(default_factory=dict)
    whole: bool = False


def _unchanged_entries(
    data: object, known: Mapping[str, Job], traffic: bool
) -> dict[str, Job] | None:
    """The job of every entry of a well-formed, valid document, in order, validating only
    the entries not in *known* (by their text); None when anything is wrong with it, for
    :func:`_document` to say what."""
    if not (isinstance(data, dict) and list(data) == ["jobs"] and isinstance(data["jobs"], list)):
        return None
    context = {"traffic": traffic}
    out: dict[str, Job] = {}
    for item in data["jobs"]:
        if not isinstance(item, dict):
            return None
        # What YAML and JSON give is str, numbers, bools, None, dates, lists and dicts:
        # their repr tells two entries apart exactly as validation would.
        key = repr(item)
        job = known.get(key) or out.get(key)
        if job is None:
            try:
                job = JobEntry.model_validate(item, context=context).job()
            except ValidationError:
                return None
        out[key] = job
    return out if len(out) == len(data["jobs"]) else None  # an entry twice: a duplicate id


def read_version(
    file: pathlib.Path, last: Version | None = None, *, traffic: bool = False
) -> Version:
    """Read one job file, parsing and validating only the entries that *last* (the
    file's previous version) does not have.

    A job file read again after a change differs in a few entries, and parsing and
    validating an entry (its host list above all) costs far more than finding it
    unchanged: a YAML file's items are parsed one by one where their text is new
    (:mod:`ibqos.jobs.chunks`), and only the entries whose content is new are validated.
    The jobs and problems are those of :func:`load_jobs` on the file, the same job
    objects where the entry did not change.

    Raises:
        JobsError: the file cannot be read or is not valid YAML/JSON.
    """
    text = _text(file)
    data: object = None
    split = None if file.suffix.lower() == ".json" else split_items(text)
    parsed = None
    if split is not None and last is not None and last.items and _FAST_LOADER is not None:
        parsed = parse_items(split, last.items, _FAST_LOADER)
    if parsed is not None:
        data = {"jobs": parsed}
    else:
        data = _parse(file, text)
        jobs = data.get("jobs") if isinstance(data, dict) else None
        if split is not None and isinstance(jobs, list) and len(jobs) == len(split):
            parsed = jobs  # the items of this parse, for the next one
    items = {} if parsed is None or split is None else dict(zip(split, parsed, strict=True))
    version = _validated(file, data, last.entries if last is not None else {}, traffic)
    return replace(version, items=items)


def _validated(
    file: pathlib.Path, data: object, known: Mapping[str, Job], traffic: bool
) -> Version:
    """The version of a parsed job file, validating only the entries not in *known*."""
    source = str(file)
    problems = _Problems()
    entries = _unchanged_entries(data, known, traffic)
    if entries is not None:
        found = [(f"{source}: jobs[{i}]", job) for i, job in enumerate(entries.values())]
        rejected = 0
    else:
        entries = {}
        found = _document(data, source, problems, traffic)
        items = data.get("jobs") if isinstance(data, dict) else None
        rejected = len(items) - len(found) if isinstance(items, list) else 1
    _check_unique(found, problems)
    if not problems.lines:
        return Version(tuple(found), entries=entries)
    ids: set[str] = set()
    kept = []
    for where, job in found:  # a later entry with an id used before is rejected
        if job.id in ids:
            rejected += 1
        else:
            ids.add(job.id)
            kept.append((where, job))
    whole = not (isinstance(data, dict) and isinstance(data.get("jobs"), list))
    return Version(tuple(kept), tuple(problems.lines), rejected, entries, problems.cause, {}, whole)


def _read(file: pathlib.Path) -> object:
    """The document in *file*, as ``yaml.safe_load`` (or ``json.load``) gives it."""
    return _parse(file, _text(file))


def _text(file: pathlib.Path) -> str:
    try:
        with open(file, encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as err:
        raise JobsError(f"{file}: cannot read job file") from err


class _Named(io.StringIO):
    """A file's text as a stream with the file's name, for PyYAML's messages."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


def _parse(file: pathlib.Path, text: str) -> object:
    """The document *text* of *file* holds (JSON for ``.json``, else YAML).

    YAML is parsed by libyaml when PyYAML has it; a document libyaml refuses is parsed
    again by the pure-Python parser, whose message (problem and position) is the cause.
    """
    try:
        if file.suffix.lower() == ".json":
            return json.loads(text)
        if _FAST_LOADER is not None:
            try:
                return yaml.load(_Named(text, str(file)), Loader=_FAST_LOADER)  # noqa: S506
            except yaml.YAMLError:
                pass  # for the pure-Python parser's message, below
        return yaml.safe_load(_Named(text, str(file)))
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
