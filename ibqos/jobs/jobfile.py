"""Job files (YAML or JSON): which jobs run on which hosts, and how they communicate.

The simulated-fabric traffic model needs the traffic keys (``traffic=True``); the agent's file
job source needs only id and nodes, and uses a declared pattern as the job's profile.  The
schema is documented in ``docs/jobs.md``.
"""

from __future__ import annotations

import json
import logging
import math
import pathlib
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

import yaml
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from ibqos.errors import JobsError

log = logging.getLogger(__name__)

PATTERNS: tuple[str, ...] = ("all-to-all", "ring", "halo", "random-pairs", "matrix")
"""Communication patterns a job may declare."""
_CHOICES = ", ".join(PATTERNS)

_SUFFIXES = (".yaml", ".yml", ".json")
_REQUIRED = ("id", "nodes")
#: what the lab's traffic model needs of every job; optional for the agent
TRAFFIC_KEYS = ("pattern", "rate_bytes_per_s", "duty", "period_s")
_RATE_KEYS = TRAFFIC_KEYS[1:]
_OPTIONAL = ("name", "user", "start_time", "halo_dims", "seed", "matrix", *TRAFFIC_KEYS)
# Which pattern each pattern-specific key belongs to.
_PATTERN_KEYS = {"halo_dims": "halo", "seed": "random-pairs", "matrix": "matrix"}
# NodeSet would take "@group" or "a b" as a literal node name; host names never look like that.
_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_TOP_COMMA = re.compile(r",(?![^\[]*\])")  # a comma not inside [...]


@dataclass(frozen=True)
class Job:
    """One job as declared in a job file.

    Attributes:
        id: scheduler job id, unique within a file (or directory).
        nodes: host names in NodeSet (sorted) order, without repeats.
        pattern: one of :data:`PATTERNS`; "" when the job declares none.
        rate_bytes_per_s: bytes per second each node sends while communicating; 0.0 when
            not declared (then *duty* and *period_s* are their defaults too).
        duty: share of each iteration spent communicating, in (0, 1].
        period_s: iteration length in seconds.
        name: application name.
        user: user name, if known.
        start_time: seconds since the epoch (UTC), if known.
        halo_dims: halo grid dimensions (product == node count); None means one dimension.
        seed: seed for the random-pairs pairing; None lets the model derive one from the id.
        matrix: matrix pattern weights, rows = senders, columns = receivers, in node order.
    """

    id: str
    nodes: tuple[str, ...]
    pattern: str = ""
    rate_bytes_per_s: float = 0.0
    duty: float = 1.0
    period_s: float = 1.0
    name: str = ""
    user: str | None = None
    start_time: float | None = None
    halo_dims: tuple[int, ...] | None = None
    seed: int | None = None
    matrix: tuple[tuple[float, ...], ...] | None = None

    @property
    def has_rates(self) -> bool:
        """The job declares how much it sends (rate, duty, period), as the lab needs."""
        return self.rate_bytes_per_s > 0

    def to_dict(self) -> dict[str, object]:
        """Return a plain mapping in job file form; optional keys are left out when unset."""
        out = {
            "id": self.id,
            "name": self.name or None,
            "user": self.user,
            "nodes": str(NodeSet.fromlist(self.nodes, resolver=RESOLVER_NOGROUP)),
            "pattern": self.pattern or None,
            **(
                {"rate_bytes_per_s": self.rate_bytes_per_s, "duty": self.duty}
                | {"period_s": self.period_s}
                if self.has_rates
                else {}
            ),
            "start_time": self.start_time,
            "halo_dims": None if self.halo_dims is None else list(self.halo_dims),
            "seed": self.seed,
            "matrix": None if self.matrix is None else [list(row) for row in self.matrix],
        }
        return {key: value for key, value in out.items() if value is not None}


@dataclass
class _Problems:
    """Problems found so far; only the first one's cause is chained (it is the one shown)."""

    items: list[tuple[str, BaseException | None]] = field(default_factory=list)

    def add(self, msg: str, cause: BaseException | None = None) -> None:
        self.items.append((msg, cause))

    def raise_if_any(self) -> None:
        if not self.items:
            return
        msg, cause = self.items[0]
        if len(self.items) > 1:
            msg += f" (and {len(self.items) - 1} more problems)"
        raise JobsError(msg) from cause


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: object) -> float | None:
    """Return value as a finite float, or None if it is not a number.

    bool is an int subclass but never a number here; numeric strings are accepted
    because PyYAML loads ``2e9`` (no dot) as a string.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        num = float(value)
    except (ValueError, OverflowError):
        return None
    return num if math.isfinite(num) else None


def _timestamp(value: object) -> float | None:
    """Return seconds since the epoch for a number, ISO 8601 string, date or datetime."""
    if isinstance(value, str) and _number(value) is None:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if isinstance(value, datetime):
        # Job files speak UTC; a time without an offset is not local time.
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return _number(value)


def _nodes(value: object, where: str, problems: _Problems) -> tuple[str, ...]:
    """Expand a host list string (or list of them) into nodes in NodeSet order; () if bad."""
    specs = [value] if isinstance(value, str) else value
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        problems.add(f"{where}: expected a host list string or a list of them, got {_show(value)}")
        return ()
    before = len(problems.items)
    seen: Counter[str] = Counter()
    for k, spec in enumerate(specs):
        # NodeSet silently merges repeats, so expand each comma item (outside brackets) on its
        # own to catch "a[1-4],a2".  Lists with set operators (! & ^) only make sense whole.
        parts = [spec] if re.search(r"[!&^]", spec) else _TOP_COMMA.split(spec)
        try:
            NodeSet(spec, resolver=RESOLVER_NOGROUP)  # syntax errors as NodeSet reports them
            for part in parts:
                seen.update(NodeSet(part, resolver=RESOLVER_NOGROUP))
        except NodeSetException as err:
            at = f"{where}[{k}]" if isinstance(value, list) else where
            problems.add(f"{at}: bad host list {spec!r}: {err}", err)
    if len(problems.items) > before:
        return ()
    bad = [n for n in seen if not _HOST_RE.fullmatch(n)]
    twice = [n for n, count in seen.items() if count > 1]
    if bad:
        problems.add(f"{where}: invalid host name {bad[0]!r} (node groups are not supported)")
    elif twice:
        problems.add(f"{where}: host {twice[0]} is listed more than once")
    elif not seen:
        problems.add(f"{where}: expected at least one host, got {_show(value)}")
    else:
        return tuple(NodeSet.fromlist(list(seen), resolver=RESOLVER_NOGROUP))
    return ()


def expand_hosts(value: object, where: str) -> tuple[str, ...]:
    """Expand a host list (``cn[0001-0004],gpu01``, or a list of them) as job files do.

    Every job source goes through this one function, so a scheduler's node list and a job
    file's ``nodes`` key mean the same hosts (ClusterShell NodeSet syntax, no groups, no
    repeats).

    Args:
        value: a host list string or a list of them.
        where: names the input in errors (e.g. ``squeue: job 42: nodes``).

    Returns:
        The hosts in NodeSet (sorted) order.

    Raises:
        JobsError: the list does not parse, names a group or a host twice, or is empty.
    """
    problems = _Problems()
    hosts = _nodes(value, where, problems)
    problems.raise_if_any()
    return hosts


def _matrix(
    value: object, size: int, where: str, problems: _Problems
) -> tuple[tuple[float, ...], ...] | None:
    """Check an n x n weight matrix with a zero diagonal and at least one weight > 0."""
    want = f"expected a {size} x {size} list of lists (one row per node)"
    if not isinstance(value, list) or len(value) != size:
        problems.add(f"{where}: {want}, got {_show(value)}")
        return None
    rows: list[tuple[float, ...]] = []
    for i, row in enumerate(value):
        nums = [_number(x) for x in row] if isinstance(row, list) else []
        if len(nums) != size:
            problems.add(f"{where}[{i}]: expected a list of {size} numbers, got {_show(row)}")
        elif (j := next((j for j, x in enumerate(nums) if x is None or x < 0), None)) is not None:
            problems.add(f"{where}[{i}][{j}]: expected a number >= 0, got {_show(row[j])}")
        elif nums[i] != 0:
            problems.add(f"{where}[{i}][{i}]: expected 0 on the diagonal, got {_show(row[i])}")
        else:
            rows.append(tuple(x for x in nums if x is not None))
    if len(rows) == size and not any(any(row) for row in rows):
        problems.add(f"{where}: all weights are 0; at least one node must send")
    return tuple(rows) if len(rows) == size else None


def _float(
    raw: dict[str, object], key: str, where: str, problems: _Problems, default: float
) -> float:
    """Check a float key: > 0, and at most 1 for duty; *default* if bad or missing."""
    if key not in raw:
        return default
    got = _number(raw[key])
    if got is None or got <= 0 or (key == "duty" and got > 1):
        want = "a number in (0, 1]" if key == "duty" else "a number > 0"
        problems.add(f"{where}.{key}: expected {want}, got {_show(raw[key])}")
        return default
    return got


def _job(item: object, where: str, problems: _Problems, traffic: bool) -> Job | None:
    """Validate one job mapping; add its problems and return None if there are any.

    With *traffic* the traffic keys are required (the lab drives the fabric with them).
    Without, they are optional, but rate, duty and period come all three or none, and
    with a pattern: half a traffic model is surely a mistake.
    """
    if not isinstance(item, dict):
        problems.add(f"{where}: expected a mapping, got {_show(item)}")
        return None
    before = len(problems.items)
    # An optional key set to null means "use the default".
    required = _REQUIRED + (TRAFFIC_KEYS if traffic else ())
    raw = {str(k): v for k, v in item.items() if v is not None or k in required}
    for key in raw:
        if key not in _REQUIRED and key not in _OPTIONAL:
            problems.add(f"{where}.{key}: unknown key")
    for key in required:
        if key not in raw:
            problems.add(f"{where}.{key}: required key is missing")
    given = [key for key in _RATE_KEYS if key in raw]
    if not traffic and given:
        for key in TRAFFIC_KEYS:
            if key not in raw:
                problems.add(f"{where}.{key}: required with {given[0]}")
    # Go on without missing keys, so that one message can count every problem.
    job_id = raw.get("id", "?")
    if isinstance(job_id, bool) or not isinstance(job_id, int | str) or job_id == "":
        problems.add(f"{where}.id: expected a non-empty string, got {_show(job_id)}")
    nodes = _nodes(raw["nodes"], f"{where}.nodes", problems) if "nodes" in raw else ()
    pattern = raw.get("pattern")
    if "pattern" in raw and pattern not in PATTERNS:
        problems.add(f"{where}.pattern: expected one of {_CHOICES}, got {_show(pattern)}")
    rate, duty, period = (
        _float(raw, key, where, problems, default)
        for key, default in zip(_RATE_KEYS, (0.0, 1.0, 1.0), strict=True)
    )
    name, user = raw.get("name", ""), raw.get("user")
    for key, value in (("name", name), ("user", user)):
        if value is not None and not isinstance(value, str):
            problems.add(f"{where}.{key}: expected a string, got {_show(value)}")
    start = raw.get("start_time")
    start_time = None if start is None else _timestamp(start)
    if start is not None and start_time is None:
        want = "expected seconds since epoch or an ISO 8601 time"
        problems.add(f"{where}.start_time: {want}, got {_show(start)}")
    for key, owner in _PATTERN_KEYS.items():
        if key in raw and pattern != owner and (pattern in PATTERNS or pattern is None):
            problems.add(f"{where}.{key}: only allowed with pattern {owner}, not {pattern}")
    if pattern == "matrix" and "matrix" not in raw:
        problems.add(f"{where}.matrix: required with pattern matrix")
    dims = raw.get("halo_dims")
    if dims is not None and not (
        isinstance(dims, list) and dims and all(type(d) is int and d > 0 for d in dims)
    ):
        problems.add(f"{where}.halo_dims: expected a list of integers > 0, got {_show(dims)}")
        dims = None
    elif isinstance(dims, list) and nodes and math.prod(dims) != len(nodes):
        problems.add(f"{where}.halo_dims: product {math.prod(dims)} != node count {len(nodes)}")
    seed = raw.get("seed")
    # numpy's default_rng rejects negative seeds.
    if seed is not None and not (type(seed) is int and seed >= 0):
        problems.add(f"{where}.seed: expected an integer >= 0, got {_show(seed)}")
    matrix = None
    if "matrix" in raw and nodes:
        matrix = _matrix(raw["matrix"], len(nodes), f"{where}.matrix", problems)
    if len(problems.items) > before:
        return None
    return Job(
        id=str(job_id),
        nodes=nodes,
        pattern="" if pattern is None else str(pattern),
        rate_bytes_per_s=rate,
        duty=duty,
        period_s=period,
        name=str(name),
        user=None if user is None else str(user),
        start_time=start_time,
        halo_dims=None if dims is None else tuple(int(d) for d in dims),
        seed=None if seed is None else int(seed),
        matrix=matrix,
    )


def _document(
    data: object, source: str, problems: _Problems, traffic: bool
) -> list[tuple[str, Job]]:
    """Validate a whole document; return (key path, job) for each valid job."""
    if not isinstance(data, dict) or "jobs" not in data:
        problems.add(f"{source}: expected a mapping with the key 'jobs', got {_show(data)}")
        return []
    for key in data:
        if key != "jobs":
            problems.add(f"{source}: {key}: unknown key (only 'jobs' is allowed)")
    if not isinstance(data["jobs"], list):
        problems.add(f"{source}: jobs: expected a list (or []), got {_show(data['jobs'])}")
        return []
    found = []
    for i, item in enumerate(data["jobs"]):
        where = f"{source}: jobs[{i}]"
        if (job := _job(item, where, problems, traffic)) is not None:
            found.append((where, job))
    return found


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
        JobsError: naming the first problem and how many more there are.
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
        JobsError: a file is unreadable or not valid YAML/JSON, or the jobs are invalid.
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
        JobsError: ``SOURCE: jobs[i] (id X): unknown host NAME`` for the first such job.
    """
    known = known_hosts if isinstance(known_hosts, set | frozenset) else set(known_hosts)
    problems = _Problems()
    for i, job in enumerate(jobs):
        unknown = [node for node in job.nodes if node not in known]
        if unknown:
            many = f" ({len(unknown)} unknown hosts)" if len(unknown) > 1 else ""
            problems.add(f"{source}: jobs[{i}] (id {job.id}): unknown host {unknown[0]}{many}")
    problems.raise_if_any()


def shared_nodes(jobs: Sequence[Job]) -> dict[str, tuple[str, ...]]:
    """Map each host used by more than one job to those jobs' ids, in job order."""
    users: dict[str, list[str]] = {}
    for job in jobs:
        for node in job.nodes:
            users.setdefault(node, []).append(job.id)
    return {node: tuple(ids) for node, ids in users.items() if len(ids) > 1}
