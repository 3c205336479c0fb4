"""Finding, reading and validating ``ibqos.yaml``.

Search order: an explicit ``--config``, then ``$IBQOS_CONFIG``, then
``/etc/ibqos/ibqos.yaml``.  The document is validated all at once against
:class:`~ibqos.config.models.Config`, and every problem is reported, one line each, naming
the file and the key path::

    ibqos.yaml: lanes.weight_ratio: expected a number >= 0.1, got 0.05
    ibqos.yaml: collect.windw: unknown key (expected one of backend, interval_s, ...)

The config is built whole or not at all: a failed load changes nothing (the agent keeps the
config in force on SIGHUP).  :func:`json_schema` is the same schema for editors
(``schemas/ibqos.schema.json``).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import TypeAdapter, ValidationError

from ibqos.config.fields import PROBLEM
from ibqos.config.models import Config
from ibqos.errors import ConfigError

DEFAULT_PATH = Path("/etc/ibqos/ibqos.yaml")
#: the JSON Schema dialect pydantic writes
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_CONFIG = TypeAdapter(Config)
#: pydantic's error types for a key the section does not have
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden", "invalid_key")
#: ... and for a section that is not a mapping
_NOT_MAPPING = ("dataclass_type", "dataclass_exact_type", "model_type", "dict_type")

#: (key path, message, the exception behind it)
Problem = tuple[str, str, BaseException | None]


def find_config(explicit: Path | None) -> Path:
    """The config file to use, by the search order above."""
    if explicit is not None:
        return explicit
    env = os.environ.get("IBQOS_CONFIG")
    return Path(env) if env else DEFAULT_PATH


def load_config(path: Path) -> Config:
    """Read and validate a config file.

    Raises:
        ConfigError: ``<file>: <key.path>: <problem>``, one line per problem.
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
    """Validate a loaded document (see :func:`load_config`); *source* names it in errors."""
    problems: list[Problem] = []
    document = data
    if isinstance(data, Mapping):
        document = dict(data)
        # the one field of Config that is no key of the YAML: it is the file's name
        if "source" in document:
            problems.append(("source", _unknown_key(()), None))
        # `ibqos lab up` writes the lab section whole: an empty one is a damaged file
        if "lab" in document and document["lab"] is None:
            problems.append(("lab", "expected a mapping, got NoneType", None))
            del document["lab"]
        document["source"] = source
    try:
        config = _CONFIG.validate_python(document)
    except ValidationError as err:
        _raise(_problems(err) + problems, source)
    if problems:
        _raise(problems, source)
    return config


def _raise(problems: list[Problem], source: str) -> NoReturn:
    error = ConfigError(
        "\n".join(f"{source}: {where or 'top level'}: {message}" for where, message, _ in problems)
    )
    cause = next((cause for _, _, cause in problems if cause is not None), None)
    if cause is not None:
        raise error from cause
    raise error


def _problems(err: ValidationError) -> list[Problem]:
    """pydantic's errors as ibqos states them."""
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(str(part) for part in e["loc"])
        ctx: dict[str, Any] = e.get("ctx") or {}
        cause = None
        if e["type"] == PROBLEM:
            message, cause = ctx["message"], ctx.get("cause")
            loc += (ctx["key"],) if "key" in ctx else ()
        elif e["type"] in _UNKNOWN:
            message = _unknown_key(loc[:-1])
        elif e["type"] in _NOT_MAPPING:
            message = f"expected a mapping, got {type(e['input']).__name__}"
        elif e["type"] == "missing":
            # the keys a section needs are names and file names: said as a null would be
            message = "expected a non-empty string, got None"
        else:
            message = e["msg"]
        out.append((".".join(loc), message, cause))
    return out


def _unknown_key(section: tuple[str, ...]) -> str:
    return f"unknown key (expected one of {', '.join(_keys(section))})"


def _keys(section: tuple[str, ...]) -> list[str]:
    """The keys a section of the YAML has (``()``: the top level), from the JSON Schema."""
    root = _schema()
    node = _object(root, root)
    for key in section:
        node = _object(node["properties"][key], root)
    return list(node.get("properties", ()))


def _object(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The object schema *node* stands for, through ``$ref`` and ``anyOf`` (a null)."""
    if "$ref" in node:
        return _object(root["$defs"][node["$ref"].rsplit("/", 1)[1]], root)
    for option in node.get("anyOf", ()):
        found = _object(option, root)
        if "properties" in found:
            return found
    return node


@functools.cache
def _schema() -> dict[str, Any]:
    return _CONFIG.json_schema()


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``ibqos.yaml``, as shipped in ``schemas/ibqos.schema.json``."""
    return {"$schema": JSON_SCHEMA_DIALECT, "title": "ibqos.yaml"} | copy.deepcopy(_schema())
