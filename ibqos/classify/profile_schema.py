"""The job profile format (``docs/characterize.md``) as frozen pydantic models.

:class:`ProfileEntry` is one profile file, :class:`ModelEntry` its traffic model and
:class:`ObservationEntry` one of its observations.  They are validated as job files are
(:mod:`ibqos.jobs.schema`): each key's check reports every problem it finds, and every
problem of a file is reported at once, one line each, naming the file and the key path::

    lammps.yaml: confidence: expected a number in [0, 1], got 1.5
    lammps.yaml: model.duty: expected a number in (0, 1], got 2

The model's traffic keys are a job file's, checked by the same functions
(:mod:`ibqos.jobs.checks`), but for the rate: a profile's is a mean over the whole
iteration, and 0 (or none) means not known.  The JSON Schema of the format
(``schemas/profile.schema.json``) comes from the same models.  The profiles themselves,
and their store, are :mod:`ibqos.classify.profiles`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

import ibqos.jobs.checks as checks
from ibqos.config.classes import CLASSES, Class, as_class
from ibqos.errors import ProfileError
from ibqos.jobs.checks import Invalid
from ibqos.jobs.hosts import shown
from ibqos.jobs.jobfile import JSON_SCHEMA_DIALECT
from ibqos.jobs.model import PATTERNS
from ibqos.jobs.schema import (
    HALO_DIMS_SCHEMA,
    MATRIX_SCHEMA,
    NUMERIC,
    PATTERN_SCHEMA,
    PROBLEM,
    Check,
    key_path,
    mark_pattern_keys,
    nullable,
    positive_schema,
    problem_error,
    untitled,
)

__all__ = [
    "NAME_PATTERN",
    "VERSION",
    "ModelEntry",
    "ObservationEntry",
    "ProfileEntry",
    "describes",
    "json_schema",
    "validate_profile",
]

VERSION = 1
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_NAME_SCHEMA = {"type": "string", "pattern": NAME_PATTERN.pattern}
_CLASS_SCHEMA = {"enum": list(CLASSES)}
#: a number >= 0 (PyYAML reads one without a dot, 4.5e8, as a string)
_AMOUNT_SCHEMA = {"anyOf": [{"type": "number", "minimum": 0}, NUMERIC]}


def describes(
    nodes: int, halo_dims: Sequence[int] | None, matrix: Sequence[Sequence[float]] | None
) -> bool:
    """A model of this halo grid or matrix describes a job of *nodes* nodes (a matrix or a
    grid has a size; a model with neither fits any job)."""
    if matrix is not None:
        return len(matrix) == nodes
    if halo_dims is not None:
        return math.prod(halo_dims) == nodes
    return True


# -- the checks of a profile's own keys ----------------------------------------------------


def _version(value: Any, info: ValidationInfo) -> int:
    if value != VERSION:
        raise Invalid.one(f"expected {VERSION}, got {shown(value)}")
    return VERSION


def _application(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise Invalid.one(f"expected a name of letters, digits and _.+-, got {shown(value)}")
    return value


def _user(value: Any, info: ValidationInfo) -> str | None:
    if value is not None and (not isinstance(value, str) or not NAME_PATTERN.match(value)):
        raise Invalid.one(f"expected a user name or null, got {shown(value)}")
    return value


def _nodes(value: Any, info: ValidationInfo) -> int | None:
    if value is not None and (type(value) is not int or value < 1):
        raise Invalid.one(f"expected an integer >= 1 or null, got {shown(value)}")
    return value


def _class(value: Any, info: ValidationInfo) -> Class:
    try:
        return as_class(value)
    except ValueError:
        raise Invalid.one(f"expected one of {', '.join(CLASSES)}, got {shown(value)}") from None


def _confidence(value: Any, info: ValidationInfo) -> float:
    got = checks.number(value)
    if got is None or not 0 <= got <= 1:
        raise Invalid.one(f"expected a number in [0, 1], got {shown(value)}")
    return got


def _optional_amount(value: Any, info: ValidationInfo) -> float | None:
    """None, or a number >= 0 (:func:`ibqos.jobs.checks.non_negative`)."""
    return None if value is None else checks.non_negative(value, info)


def _source(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid.one(f"expected a non-empty string, got {shown(value)}")
    return value


def _characterized(value: Any, info: ValidationInfo) -> tuple[dict[Any, Any], ...]:
    """Kept as written (for people): a list of mappings; null or empty, none."""
    rows = value or []
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise Invalid.one(f"expected a list of mappings, got {shown(value)}")
    return tuple(dict(r) for r in rows)


def _a_list(value: Any) -> Any:
    """Null or empty: none."""
    if value and not isinstance(value, list):
        raise problem_error([((), f"expected a list, got {shown(value)}", None)], value)
    return value or None


def _present(data: Any, required: Sequence[str], optional: Sequence[str]) -> Any:
    """*data* with the *required* keys it lacks as null (their checks then say what they
    expected) and the *optional* keys it sets to null left out (their defaults)."""
    if not isinstance(data, dict):
        return data
    raw = {k: v for k, v in data.items() if v is not None or k not in optional}
    for key in required:
        raw.setdefault(key, None)
    return raw


# -- the models ----------------------------------------------------------------------------


#: the keys of a profile's model other than its pattern
_MODEL_OPTIONS = ("halo_dims", "matrix", "rate_bytes_per_s", "duty", "period_s", "phase_trials")


class ModelEntry(BaseModel):
    """An application's traffic, in the lab's job format (docs/jobs.md): a pattern, with
    its options, and what each node sends."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=untitled)

    pattern: Annotated[str, Check(checks.pattern, PATTERN_SCHEMA)] = Field(
        description="communication pattern (docs/jobs.md); the attribution prior"
    )
    halo_dims: Annotated[
        tuple[int, ...] | None, Check(checks.halo_dims, nullable(HALO_DIMS_SCHEMA))
    ] = Field(default=None, description="pattern halo: grid dimensions (default: one dimension)")
    matrix: Annotated[
        tuple[tuple[float, ...], ...] | None,
        Check(checks.square_matrix, nullable(MATRIX_SCHEMA)),
    ] = Field(
        default=None,
        description="pattern matrix (required with it): relative weights from node i (row) to "
        "node j (column), 0 on the diagonal, some weight > 0; the profile is for jobs of its size",
    )
    rate_bytes_per_s: Annotated[float, Check(checks.non_negative, nullable(_AMOUNT_SCHEMA))] = (
        Field(
            default=0.0,
            description="mean bytes per second each node sends, over all the job's nodes, compute "
            "phases included (0 or none: not known)",
        )
    )
    duty: Annotated[float | None, Check(checks.positive("duty"), positive_schema(1))] = Field(
        default=None, description="share of each iteration spent communicating, in (0, 1]"
    )
    period_s: Annotated[float | None, Check(checks.positive("period_s"), positive_schema())] = (
        Field(default=None, description="length of one iteration alone on the fabric, seconds")
    )
    phase_trials: Annotated[
        int | None, Check(_nodes, nullable({"type": "integer", "minimum": 1}))
    ] = Field(
        default=None,
        description="setups tried on the fabric that duty and period_s were fitted on "
        "(null: declared or characterized)",
    )

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        """A model must name its pattern; its other keys set to null take their defaults,
        and its pattern options must go with its pattern."""
        raw = _present(data, ("pattern",), _MODEL_OPTIONS)
        if isinstance(raw, dict) and raw["pattern"] in PATTERNS:
            mark_pattern_keys(raw, ("halo_dims", "matrix"))
        return raw


class ObservationEntry(BaseModel):
    """One thing seen of the application: what, the class it showed, and its intensity and
    time when known."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=untitled)

    source: Annotated[str, Check(_source, {"type": "string", "minLength": 1})] = Field(
        description="what: a trace and placement, 'job <id>' (measured), ..."
    )
    cls: Annotated[Class, Check(_class, _CLASS_SCHEMA)] = Field(
        alias="class", description="the class it showed"
    )
    intensity: Annotated[float | None, Check(_optional_amount, nullable(_AMOUNT_SCHEMA))] = Field(
        default=None, description="its intensity (a fraction), if known"
    )
    time_s: Annotated[float | None, Check(_optional_amount, nullable(_AMOUNT_SCHEMA))] = Field(
        default=None, description="when, seconds since the epoch, if known"
    )

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        return _present(data, ("source", "class"), ())


class ProfileEntry(BaseModel):
    """A job profile: what ibqos expects of an application before it has measured its job,
    keyed by the application name and, optionally, a user and a node count."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=untitled)

    version: Annotated[int, Check(_version, {"const": VERSION})] = Field(
        description="the format's version"
    )
    application: Annotated[str, Check(_application, _NAME_SCHEMA)] = Field(
        description="the application (job) name: letters, digits, _.+-"
    )
    user: Annotated[str | None, Check(_user, nullable(_NAME_SCHEMA))] = Field(
        default=None, description="only this user's jobs; null: anyone's"
    )
    nodes: Annotated[int | None, Check(_nodes, nullable({"type": "integer", "minimum": 1}))] = (
        Field(default=None, description="only jobs of this many nodes; null: any size")
    )
    expected_class: Annotated[Class, Check(_class, _CLASS_SCHEMA)] = Field(
        description="the class a new job of the application is expected to have"
    )
    confidence: Annotated[
        float,
        Check(_confidence, {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, NUMERIC]}),
    ] = Field(description="how sure the profile is of expected_class, 0 to 1")
    model: ModelEntry | None = Field(
        default=None,
        description="the application's traffic, to predict its class on a job's placement",
    )
    characterized: Annotated[
        tuple[dict[Any, Any], ...],
        Check(_characterized, nullable({"type": "array", "items": {"type": "object"}})),
    ] = Field(default=(), description="per-level figures of the placements characterized")
    observations: Annotated[tuple[ObservationEntry, ...] | None, BeforeValidator(_a_list)] = Field(
        default=None, description="what built the profile, oldest first"
    )

    @model_validator(mode="before")
    @classmethod
    def _prepare(cls, data: Any) -> Any:
        return _present(data, ("version", "application", "expected_class", "confidence"), ())

    @field_validator("model")
    @classmethod
    def _fits(cls, model: ModelEntry | None, info: ValidationInfo) -> ModelEntry | None:
        """A profile of a node count has a model of that size (checked when both are good)."""
        nodes = info.data.get("nodes")
        if model is not None and nodes is not None:
            if not describes(nodes, model.halo_dims, model.matrix):
                message = f"does not describe a job of nodes: {nodes}"
                raise PydanticCustomError(PROBLEM, "{message}", {"message": message})
        return model


# -- validation ----------------------------------------------------------------------------


def validate_profile(doc: object, source: str) -> ProfileEntry:
    """Validate a loaded profile document.

    Raises:
        ProfileError: ``<source>: <key path>: <what is wrong>``, one line per problem.
    """
    try:
        return ProfileEntry.model_validate(doc)
    except ValidationError as err:
        lines = [_line(error, source) for error in err.errors(include_url=False)]
        raise ProfileError("\n".join(lines)) from None


def _line(error: ErrorDetails, source: str) -> str:
    """One of pydantic's errors as a line of the message."""
    loc, kind = tuple(error["loc"]), error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    where = key_path(loc) or "top level"
    if kind == PROBLEM:
        message = ctx["message"]
    elif kind == "model_type":
        message = f"expected a mapping, got {type(error['input']).__name__}"
    elif kind in ("extra_forbidden", "invalid_key"):
        # the last part is a key of a mapping, whatever its type, not an index
        where = ".".join(part for part in (key_path(loc[:-1]), str(loc[-1])) if part)
        message = f"unknown key (expected one of {', '.join(_keys(loc[:-1]))})"
    else:
        message = error["msg"]
    return f"{source}: {where}: {message}"


def _keys(section: tuple[int | str, ...]) -> list[str]:
    """The keys of the mapping at *section* (a key path), in the format's order."""
    model: type[BaseModel] = ProfileEntry
    if section[:1] == ("model",):
        model = ModelEntry
    elif section[:1] == ("observations",):
        model = ObservationEntry
    return [field.alias or name for name, field in model.model_fields.items()]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of job profiles, as shipped in ``schemas/profile.schema.json``."""
    schema = ProfileEntry.model_json_schema()
    return {"$schema": JSON_SCHEMA_DIALECT, "title": "ibqos job profile"} | schema
