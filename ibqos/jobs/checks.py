"""The checks of a job file's values, one function per key.

Each takes the value and pydantic's validation info (the keys checked before it, in
``info.data``: a job's nodes for its matrix), returns what :class:`~ibqos.jobs.model.Job`
holds, and raises :class:`Invalid` with every problem it finds.  The models that apply
them are in :mod:`ibqos.jobs.schema`; the traffic keys' checks (pattern, rate, duty,
period, halo dims, matrix) are also those of a job profile's model
(:mod:`ibqos.classify.profile_schema`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

from pydantic import ValidationInfo

from ibqos.jobs.hosts import host_list, shown
from ibqos.jobs.model import PATTERNS

_CHOICES = ", ".join(PATTERNS)

#: (where below the checked value: (), a list item (k,) or a matrix cell (i, j); message;
#: the exception behind it)
Problem = tuple[tuple[int, ...], str, BaseException | None]


class Invalid(Exception):
    """A check's problems with the value (every one it found)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems

    @classmethod
    def one(cls, message: str) -> Invalid:
        """The one problem *message* with the value itself."""
        return cls([((), message, None)])


def number(value: object) -> float | None:
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
    if isinstance(value, str) and number(value) is None:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if isinstance(value, datetime):
        # Job files speak UTC; a time without an offset is not local time.
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return number(value)


def job_id(value: Any, info: ValidationInfo) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
        raise Invalid.one(f"expected a non-empty string, got {shown(value)}")
    return str(value)


def nodes(value: Any, info: ValidationInfo) -> tuple[str, ...]:
    hosts, problems = host_list(value)
    if problems:
        raise Invalid(problems)
    return hosts


def pattern(value: Any, info: ValidationInfo) -> str:
    if value not in PATTERNS:
        raise Invalid.one(f"expected one of {_CHOICES}, got {shown(value)}")
    return str(value)


def positive(key: str) -> Callable[[Any, ValidationInfo], float]:
    """A number > 0, and at most 1 for duty."""
    want = "a number in (0, 1]" if key == "duty" else "a number > 0"

    def check(value: Any, info: ValidationInfo) -> float:
        got = number(value)
        if got is None or got <= 0 or (key == "duty" and got > 1):
            raise Invalid.one(f"expected {want}, got {shown(value)}")
        return got

    return check


def non_negative(value: Any, info: ValidationInfo) -> float:
    """A number >= 0 (a profile's mean rate: 0 is not known)."""
    got = number(value)
    if got is None or got < 0:
        raise Invalid.one(f"expected a number >= 0, got {shown(value)}")
    return got


def string(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str):
        raise Invalid.one(f"expected a string, got {shown(value)}")
    return value


def start_time(value: Any, info: ValidationInfo) -> float:
    got = _timestamp(value)
    if got is None:
        want = "expected seconds since epoch or an ISO 8601 time"
        raise Invalid.one(f"{want}, got {shown(value)}")
    return got


def halo_dims(value: Any, info: ValidationInfo) -> tuple[int, ...]:
    """Halo grid dimensions, their product the node count."""
    nodes = info.data.get("nodes")  # absent: the nodes are bad, their problem is told
    if not (isinstance(value, list) and value and all(type(d) is int and d > 0 for d in value)):
        raise Invalid.one(f"expected a list of integers > 0, got {shown(value)}")
    if nodes and math.prod(value) != len(nodes):
        raise Invalid.one(f"product {math.prod(value)} != node count {len(nodes)}")
    return tuple(value)


def seed(value: Any, info: ValidationInfo) -> int:
    # numpy's default_rng rejects negative seeds.
    if not (type(value) is int and value >= 0):
        raise Invalid.one(f"expected an integer >= 0, got {shown(value)}")
    return int(value)


def matrix(value: Any, info: ValidationInfo) -> tuple[tuple[float, ...], ...] | None:
    """An n x n weight matrix (n nodes) with a zero diagonal and at least one weight > 0."""
    size = len(info.data.get("nodes", ()))  # 0: the nodes are bad, their problem is told
    if not size:
        return None
    if not isinstance(value, list) or len(value) != size:
        want = f"expected a {size} x {size} list of lists (one row per node)"
        raise Invalid.one(f"{want}, got {shown(value)}")
    return _weights(value, size)


def square_matrix(value: Any, info: ValidationInfo) -> tuple[tuple[float, ...], ...]:
    """An n x n weight matrix of any n >= 1 (a profile's model is keyed to its size), with
    a zero diagonal and at least one weight > 0."""
    if not isinstance(value, list) or not value:
        want = "expected an n x n list of lists (one row per node)"
        raise Invalid.one(f"{want}, got {shown(value)}")
    return _weights(value, len(value))


def _weights(value: list[Any], size: int) -> tuple[tuple[float, ...], ...]:
    """*size* rows of *size* numbers >= 0, 0 on the diagonal, some weight > 0."""
    problems: list[Problem] = []
    rows: list[tuple[float, ...]] = []
    for i, row in enumerate(value):
        nums = [number(x) for x in row] if isinstance(row, list) else []
        bad = next((j for j, x in enumerate(nums) if x is None or x < 0), None)
        if len(nums) != size:
            problems.append(((i,), f"expected a list of {size} numbers, got {shown(row)}", None))
        elif bad is not None:
            problems.append(((i, bad), f"expected a number >= 0, got {shown(row[bad])}", None))
        elif nums[i] != 0:
            problems.append(((i, i), f"expected 0 on the diagonal, got {shown(row[i])}", None))
        else:
            rows.append(tuple(x for x in nums if x is not None))
    if len(rows) == size and not any(any(row) for row in rows):
        problems.append(((), "all weights are 0; at least one node must send", None))
    if problems:
        raise Invalid(problems)
    return tuple(rows)
