"""The job file format (``docs/jobs.md``) as frozen pydantic models, and the machinery they
share with the other YAML files of jobs (job profiles, :mod:`ibqos.classify.profile_schema`).

:class:`JobFile` is a document, :class:`JobEntry` one job of it; each key's check reports
every problem it finds, with the key path, and the JSON Schema of the format
(``schemas/jobs.schema.json``) comes from the same models.  Validation takes a context
``{"traffic": True}`` when the lab's traffic model needs the traffic keys of every job.

The traffic keys (pattern, rate, duty, period, halo dims, matrix) are checked by the same
functions (:mod:`ibqos.jobs.checks`), with the same JSON Schemas, wherever they appear.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

import ibqos.jobs.checks as checks
from ibqos.jobs.checks import Invalid, Problem
from ibqos.jobs.hosts import shown
from ibqos.jobs.model import PATTERNS, TRAFFIC_KEYS, Job

#: the pydantic error type of every problem a check reports
PROBLEM = "ibqos"

_REQUIRED = ("id", "nodes")
_RATE_KEYS = TRAFFIC_KEYS[1:]
#: which pattern each pattern-specific key belongs to
PATTERN_KEYS = {"halo_dims": "halo", "seed": "random-pairs", "matrix": "matrix"}


def problem_error(problems: list[Problem], value: object) -> ValidationError:
    """One pydantic error per problem, each at its place below the checked key (raised by
    a check, pydantic puts them under the key's own path)."""
    return ValidationError.from_exception_data(
        "job",
        [
            InitErrorDetails(
                type=PydanticCustomError(
                    PROBLEM, "{message}", {"message": message, "cause": cause}
                ),
                loc=at,
                input=value,
            )
            for at, message, cause in problems
        ],
    )


def key_path(loc: tuple[int | str, ...]) -> str:
    """``("jobs", 0, "nodes", 1)`` -> ``jobs[0].nodes[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


#: the value of a key that is not there
ABSENT = object()


class Noted:
    """A key's value with problems found before its check (by a model's before-validator,
    :meth:`JobEntry._prepare`): a key that must be there and is not (*value*
    :data:`ABSENT`), or a key that does not go with the pattern (:func:`mark_pattern_keys`)."""

    __slots__ = ("note", "value")

    def __init__(self, note: str, value: object = ABSENT) -> None:
        self.note = note
        self.value = value


class Check:
    """One key's check as field metadata.

    Attributes:
        func: takes the value and the validation info (the keys before it in
            ``info.data``); returns the value the entry holds, or raises
            :class:`~ibqos.jobs.checks.Invalid`.
        schema: the JSON Schema of the values a job file may give.
    """

    __slots__ = ("func", "schema")

    def __init__(self, func: Callable[[Any, ValidationInfo], Any], schema: dict[str, Any]):
        self.func = func
        self.schema = schema

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def check(value: Any, info: ValidationInfo) -> Any:
            problems: list[Problem] = []
            if isinstance(value, Noted):
                problems = [((), value.note, None)]
                if value.value is ABSENT:  # nothing more to check
                    raise problem_error(problems, None)
                value = value.value
            try:
                result = self.func(value, info)
            except Invalid as err:
                problems += err.problems
            if problems:
                raise problem_error(problems, value)
            return result

        return core_schema.with_info_plain_validator_function(check)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return copy.deepcopy(self.schema)


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """Null for an optional key means its default."""
    return {"anyOf": [schema, {"type": "null"}]}


#: PyYAML reads a number without a dot (2e9) as a string
NUMERIC = {
    "type": "string",
    "pattern": r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$",
}
_HOSTS = {"type": "string", "minLength": 1}


def positive_schema(maximum: float | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0}
    if maximum is not None:
        schema["maximum"] = maximum
    return nullable({"anyOf": [schema, NUMERIC]})


#: the JSON Schemas of the traffic keys' values (null, where a key may be, is not in them)
PATTERN_SCHEMA: dict[str, Any] = {"enum": list(PATTERNS)}
HALO_DIMS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1},
    "minItems": 1,
}
MATRIX_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "array", "items": {"anyOf": [{"type": "number", "minimum": 0}, NUMERIC]}},
}


def mark_pattern_keys(raw: dict[str, Any], keys: Iterable[str]) -> None:
    """Mark in *raw* (a mapping with traffic keys) the pattern-specific *keys* (of
    :data:`PATTERN_KEYS`) that do not go with its pattern, and the matrix a matrix pattern
    needs when it has none.  A pattern that is no pattern is its own problem: nothing is
    marked against it."""
    pattern = raw.get("pattern")
    for key in keys:
        owner = PATTERN_KEYS[key]
        if key in raw and pattern != owner and (pattern in PATTERNS or pattern is None):
            raw[key] = Noted(f"only allowed with pattern {owner}, not {pattern}", raw[key])
    if pattern == "matrix":
        raw.setdefault("matrix", Noted("required with pattern matrix"))


def untitled(schema: dict[str, Any]) -> None:
    """Leave out pydantic's titles made from the key names; the docstring on one line."""
    schema.pop("title", None)
    schema["description"] = " ".join(schema.get("description", "").split())
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)


class JobEntry(BaseModel):
    """One job: its id and hosts, and how it communicates (the traffic keys: pattern,
    rate_bytes_per_s, duty, period_s, all four or none; the lab needs them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=untitled)

    id: Annotated[str, Check(checks.job_id, {"type": ["string", "integer"], "minLength": 1})] = (
        Field(description="scheduler job id, unique in the file (or directory); quote it")
    )
    nodes: Annotated[
        tuple[str, ...],
        Check(checks.nodes, {"anyOf": [_HOSTS, {"type": "array", "items": _HOSTS}]}),
    ] = Field(
        description="the job's hosts: a ClusterShell host list (cn[0001-0004],gpu01) "
        "or a list of them; no node groups, no host twice"
    )
    pattern: Annotated[str | None, Check(checks.pattern, nullable(PATTERN_SCHEMA))] = Field(
        default=None, description="communication pattern (docs/jobs.md)"
    )
    rate_bytes_per_s: Annotated[
        float, Check(checks.positive("rate_bytes_per_s"), positive_schema())
    ] = Field(default=0.0, description="bytes per second each node sends while communicating")
    duty: Annotated[float, Check(checks.positive("duty"), positive_schema(1))] = Field(
        default=1.0, description="share of each iteration spent communicating, in (0, 1]"
    )
    period_s: Annotated[float, Check(checks.positive("period_s"), positive_schema())] = Field(
        default=1.0, description="length of one iteration (compute + communicate), seconds"
    )
    name: Annotated[str, Check(checks.string, nullable({"type": "string"}))] = Field(
        default="", description="application name"
    )
    user: Annotated[str | None, Check(checks.string, nullable({"type": "string"}))] = Field(
        default=None, description="user who runs the job"
    )
    start_time: Annotated[
        float | None, Check(checks.start_time, nullable({"type": ["number", "string"]}))
    ] = Field(
        default=None,
        description="when the job started: seconds since the epoch, or an ISO 8601 date or "
        "time (UTC unless it gives an offset)",
    )
    halo_dims: Annotated[
        tuple[int, ...] | None, Check(checks.halo_dims, nullable(HALO_DIMS_SCHEMA))
    ] = Field(
        default=None,
        description="pattern halo: grid dimensions, their product the node count "
        "(default: one dimension)",
    )
    seed: Annotated[int | None, Check(checks.seed, nullable({"type": "integer", "minimum": 0}))] = (
        Field(
            default=None,
            description="pattern random-pairs: seed of the pairing (default: derived from the id)",
        )
    )
    matrix: Annotated[
        tuple[tuple[float, ...], ...] | None,
        Check(checks.matrix, nullable(MATRIX_SCHEMA)),
    ] = Field(
        default=None,
        description="pattern matrix (required with it): weights from node i (row) to node j "
        "(column) in node order, 0 on the diagonal, some weight > 0",
    )

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any, info: ValidationInfo) -> Any:
        """Mark the keys a job must have and does not; drop the optional keys set to null.

        With the context ``traffic`` the traffic keys are required (the lab drives the
        fabric with them).  Without, they are optional, but rate, duty and period come all
        three or none, and with a pattern: half a traffic model is surely a mistake.
        """
        if not isinstance(data, dict):
            return data
        traffic = bool(info.context and info.context.get("traffic"))
        required = _REQUIRED + (TRAFFIC_KEYS if traffic else ())
        # An optional key set to null means "use the default".
        raw: dict[str, Any] = {str(k): v for k, v in data.items() if v is not None or k in required}
        mark_pattern_keys(raw, PATTERN_KEYS)
        given = [key for key in _RATE_KEYS if key in raw]
        for key in required:
            raw.setdefault(key, Noted("required key is missing"))
        if not traffic and given:
            for key in TRAFFIC_KEYS:
                raw.setdefault(key, Noted(f"required with {given[0]}"))
        return raw

    def job(self) -> Job:
        """The job as ibqos uses it."""
        return Job(
            id=self.id,
            nodes=self.nodes,
            pattern=self.pattern or "",
            rate_bytes_per_s=self.rate_bytes_per_s,
            duty=self.duty,
            period_s=self.period_s,
            name=self.name,
            user=self.user,
            start_time=self.start_time,
            halo_dims=self.halo_dims,
            seed=self.seed,
            matrix=self.matrix,
        )


def _a_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise problem_error([((), f"expected a list (or []), got {shown(value)}", None)], value)
    return value


class JobFile(BaseModel):
    """A job file: a mapping with one key, jobs, a list of jobs (may be empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=untitled)

    jobs: Annotated[tuple[JobEntry, ...], BeforeValidator(_a_list)] = Field(
        description="the jobs; ids unique in the file (or directory)"
    )
