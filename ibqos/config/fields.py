"""Checks of single ``ibqos.yaml`` values, as pydantic field annotations.

Each check is one function that takes the value as YAML gives it, or as code that builds a
section passes it (a ``Path``, a tuple), and returns what the section holds; a value it
refuses raises :func:`problem` with the message ibqos prints after the key path.  Each
check also says what the value may be in the JSON Schema (``schemas/ibqos.schema.json``).
The section models are in :mod:`ibqos.config.models`.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

#: the pydantic error type of every problem a check reports
PROBLEM = "ibqos"

#: a JSON Schema, as pydantic builds them
Schema = dict[str, Any]


def problem(
    message: str, *, key: str | None = None, cause: BaseException | None = None
) -> PydanticCustomError:
    """The error a check raises.

    Args:
        message: what is wrong, as printed after the key path.
        key: the key below the checked value it is about (a cross-field check of a
            section names the key at fault); dotted for deeper keys.
        cause: the exception behind it, chained to the ConfigError when it is the first.
    """
    ctx: dict[str, Any] = {"message": message}
    if key:
        ctx["key"] = key
    if cause is not None:
        ctx["cause"] = cause
    # the template takes the message as a value: braces in it are not format fields
    return PydanticCustomError(PROBLEM, "{message}", ctx)


class Check:
    """One value's check as field metadata: ``Annotated[float, number(0)]``.

    Attributes:
        func: takes the value, returns what the section holds, or raises :func:`problem`.
        schema: the JSON Schema of the values YAML may give.
    """

    __slots__ = ("func", "schema")

    def __init__(self, func: Callable[[Any], Any], schema: Schema) -> None:
        self.func = func
        self.schema = schema

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.func)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return copy.deepcopy(self.schema)


class FromSection:
    """Field metadata for a runtime object built from a YAML section.

    ``Annotated[Thresholds, FromSection(ClassifySection, build, Thresholds)]`` validates the YAML
    mapping with the section model, then passes it to *build*; an object of the field's
    own type (code building a Config) is taken as it is.  The JSON Schema is the section
    model's.
    """

    __slots__ = ("build", "passes", "section")

    def __init__(self, section: type, build: Callable[[Any], Any], passes: type) -> None:
        self.section = section
        self.build = build
        self.passes = passes

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def validate(value: Any, section: core_schema.ValidatorFunctionWrapHandler) -> Any:
            if isinstance(value, self.passes):
                return value
            return self.build(section(value))

        inner = handler.generate_schema(self.section)
        return core_schema.no_info_wrap_validator_function(validate, inner)


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def number(
    minimum: float, maximum: float = math.inf, *, integer: bool = False, optional: bool = False
) -> Check:
    """A finite number (not a bool) in [minimum, maximum]; *integer*: an int;
    *optional*: or null (None)."""
    kind = "an integer" if integer else "a number"
    upper = f" and <= {maximum:g}" if maximum != math.inf else ""
    want = f"expected {kind} >= {minimum:g}{upper}"

    def check(value: Any) -> float | int | None:
        if optional and value is None:
            return None
        got = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if integer and not isinstance(got, int):
            got = None
        # NaN and infinity are numbers to YAML (.nan, .inf), never sensible here
        if got is None or not math.isfinite(got) or not minimum <= got <= maximum:
            raise problem(f"{want}, got {value!r}")
        return int(got) if integer else float(got)

    schema: Schema = {"type": "integer" if integer else "number"}
    schema["minimum"] = int(minimum) if integer else minimum
    if maximum != math.inf:
        schema["maximum"] = int(maximum) if integer else maximum
    return Check(check, _nullable(schema) if optional else schema)


def flag() -> Check:
    """true or false."""

    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise problem(f"expected true or false, got {value!r}")
        return value

    return Check(check, {"type": "boolean"})


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise problem(f"expected a non-empty string, got {value!r}")
    return value


def text(*, optional: bool = False) -> Check:
    """A non-empty string; *optional*: or null (None)."""

    def check(value: Any) -> str | None:
        return None if optional and value is None else _text(value)

    schema: Schema = {"type": "string", "minLength": 1}
    return Check(check, _nullable(schema) if optional else schema)


def _path(value: Any) -> Path:
    return value if isinstance(value, Path) else Path(_text(value))


def file_name(*, optional: bool = False, off: bool = False, absolute: bool = False) -> Check:
    """A file or directory name (relative names stay relative, as given).

    Args:
        optional: null (None) means none.
        off: null or "" mean none (a feature switched off).
        absolute: only an absolute name is accepted (one that must not depend on the
            directory a process happens to start in).
    """

    def check(value: Any) -> Path | None:
        if ((optional or off) and value is None) or (off and value == ""):
            return None
        path = _path(value)
        if absolute and not path.is_absolute():
            raise problem(f"expected an absolute path, got {str(path)!r}")
        return path

    schema: Schema = {"type": "string", "minLength": 0 if off else 1}
    if absolute:
        schema["pattern"] = "^/"
    return Check(check, _nullable(schema) if optional or off else schema)


def readable(*, optional: bool = False) -> Check:
    """A file this process can open now (certificates, keys, password files)."""

    def check(value: Any) -> Path | None:
        if optional and value is None:
            return None
        file = _path(value)
        try:
            with open(file, "rb"):
                pass
        except OSError as err:
            raise problem(f"cannot read {file}: {err.strerror}", cause=err) from err
        return file

    schema: Schema = {"type": "string", "minLength": 1}
    return Check(check, _nullable(schema) if optional else schema)


def choice(
    allowed: tuple[Any, ...], *, shown: str | None = None, nonempty_text: bool = False
) -> Check:
    """One of *allowed*.

    Args:
        allowed: the values.
        shown: how the message lists them (default: comma-separated).
        nonempty_text: check first that the value is a non-empty string.
    """
    listed = ", ".join(str(a) for a in allowed) if shown is None else shown

    def check(value: Any) -> Any:
        if nonempty_text:
            _text(value)
        if value not in allowed:
            raise problem(f"expected one of {listed}, got {value!r}")
        return value

    return Check(check, {"enum": list(allowed)})


def address() -> Check:
    """``host:port`` or ``[v6 address]:port`` -> (host, port); null or "" -> None (off)."""

    def check(value: Any) -> tuple[str, int] | None:
        if value in ("", None):
            return None
        if isinstance(value, tuple):  # a section built by code
            return value
        spec = _text(value)
        host, sep, port = spec.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise problem(f"expected host:port (e.g. 127.0.0.1:9683), got {spec!r}")
        return host, int(port)

    return Check(check, _nullable({"type": "string", "pattern": r"^(.+:[0-9]{1,5})?$"}))


def strings(
    want: str,
    *,
    blank_items: bool = False,
    empty: bool = False,
    one: bool = False,
    none: bool = False,
) -> Check:
    """A list of strings (argv, host names) -> tuple.

    Args:
        want: the message's "expected ..." part.
        blank_items: the strings may be "".
        empty: the list may be empty.
        one: a single string stands for a list of one.
        none: null (None) means the empty tuple.
    """

    def check(value: Any) -> tuple[str, ...]:
        if none and value is None:
            return ()
        items = [value] if one and isinstance(value, str) else value
        if not (
            isinstance(items, list | tuple)
            and (empty or items)
            and all(isinstance(s, str) and (blank_items or s) for s in items)
        ):
            raise problem(f"expected {want}, got {items!r}")
        return tuple(items)

    item: Schema = {"type": "string", "minLength": 0 if blank_items else 1}
    schema: Schema = {"type": "array", "items": item, "minItems": 0 if empty else 1}
    if one:
        schema = {"anyOf": [item, schema]}
    return Check(check, _nullable(schema) if none else schema)


def members(allowed: tuple[str, ...]) -> Check:
    """A non-empty list of *allowed* values -> tuple in first-given order, without repeats."""

    def check(value: Any) -> tuple[str, ...]:
        if not (isinstance(value, list | tuple) and value and all(v in allowed for v in value)):
            raise problem(f"expected a list of {', '.join(allowed)}, got {value!r}")
        return tuple(dict.fromkeys(value))

    return Check(check, {"type": "array", "items": {"enum": list(allowed)}, "minItems": 1})


def _pair(a: object, b: object, highs: tuple[int, int]) -> tuple[int, int] | None:
    try:
        pair = (int(str(a).strip()), int(str(b).strip()))
    except ValueError:
        return None
    return pair if 0 <= pair[0] <= highs[0] and 0 <= pair[1] <= highs[1] else None


def pairs(highs: tuple[int, int]) -> Check:
    """``{a: b, ...}`` or ``["a:b", ...]`` -> ((a, b), ...), within 0..highs."""

    def check(value: Any) -> tuple[tuple[int, int], ...]:
        items: list[tuple[object, object]]
        if isinstance(value, Mapping):
            items = list(value.items())
        elif isinstance(value, tuple) and all(
            isinstance(x, tuple) and len(x) == 2 for x in value
        ):  # a section built by code
            items = list(value)
        elif isinstance(value, list) and all(
            isinstance(x, str) and x.count(":") == 1 for x in value
        ):
            items = [tuple(x.split(":")) for x in value]
        else:
            raise problem(f"expected a mapping or a list of 'a:b', got {value!r}")
        out = []
        for a, b in items:
            pair = _pair(a, b, highs)
            if pair is None:
                raise problem(f"{a}:{b}: expected integers 0-{highs[0]} and 0-{highs[1]}")
            out.append(pair)
        return tuple(out)

    as_text = {"type": "string", "pattern": r"^\s*[0-9]+\s*:\s*[0-9]+\s*$"}
    schema: Schema = {
        "anyOf": [
            {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            {"type": "array", "items": as_text},
        ]
    }
    return Check(check, schema)


def integers(high: int) -> Check:
    """A list of integers 0..high -> sorted tuple without repeats."""

    def check(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list | tuple) or not all(
            type(x) is int and 0 <= x <= high for x in value
        ):
            raise problem(f"expected a list of integers 0-{high}, got {value!r}")
        return tuple(sorted(set(value)))

    return Check(
        check, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": high}}
    )


def auto(inner: Check) -> Check:
    """``auto`` (read at run time), or what *inner* accepts."""

    def check(value: Any) -> Any:
        return value if value == "auto" else inner.func(value)

    return Check(check, {"anyOf": [{"const": "auto"}, inner.schema]})


def described(*also: type) -> Callable[[dict[str, Any], type], None]:
    """A ``json_schema_extra`` that describes a section by its docstring.

    The summary (the docstring before ``Attributes:``) describes the section; each
    attribute's entry describes its key.  *also*: classes whose docstring attributes
    describe keys the section's own docstring leaves out (a YAML section of a runtime
    class).
    """

    def describe(schema: dict[str, Any], cls: type) -> None:
        summary, attributes = _docstring(cls)
        for other in also:
            attributes = _docstring(other)[1] | attributes
        schema.pop("title", None)
        schema["description"] = summary
        for key, prop in schema.get("properties", {}).items():
            prop.pop("title", None)
            if key in attributes:
                prop["description"] = attributes[key]

    return describe


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _docstring(cls: type) -> tuple[str, dict[str, str]]:
    """(summary, {attribute: description}) of a Google-style class docstring."""
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    cut = lines.index("Attributes:") if "Attributes:" in lines else len(lines)
    summary = " ".join(" ".join(lines[:cut]).split())
    attributes: dict[str, list[str]] = {}
    name = ""
    for line in lines[cut + 1 :]:
        if line.startswith("    ") and not line.startswith("     ") and ":" in line:
            name, _, first = line.strip().partition(":")
            attributes[name] = [first]
        elif line.startswith("        ") and name:
            attributes[name].append(line)
        elif line.strip():
            break  # the next section (Raises:, ...)
    return _plain(summary), {
        k: _plain(" ".join(" ".join(v).split())) for k, v in attributes.items()
    }


def _plain(text: str) -> str:
    """Docstring markup as plain text: roles to their target, literals in single quotes."""
    return _ROLE.sub(r"\1", text).replace("``", "`")
