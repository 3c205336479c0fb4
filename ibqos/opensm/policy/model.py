"""qos-policy.conf as OpenSM holds it after the parse: port-groups, qos-levels, match rules,
qos-ulps lines, and what the parse noticed on the way.

The objects keep what the file says, as written (group and level names in their own case,
numbers before OpenSM masks them); lookups by name follow OpenSM, which compares names with
``strcasecmp`` and takes the first match in file order (``osm_qos_policy.c``).  Reference:
docs/design.md §6.1, "qos-policy.conf" (its parts
"Sections", "Port-group members", "qos-levels", "qos-match-rules" and "qos-ulps").
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Issue",
    "MatchRule",
    "Policy",
    "PortGroup",
    "QosLevel",
    "Range",
    "Section",
    "Severity",
    "UlpRule",
    "fold",
]

Severity = Literal["error", "warning"]
#: an inclusive (low, high) range of numbers, as a GUID or pkey range is written
Range = tuple[int, int]
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(name: str) -> str:
    """*name* as OpenSM compares names (``strcasecmp``: ASCII letters only)."""
    return name.translate(_ASCII_LOWER)


@dataclass(frozen=True)
class Issue:
    """Something the parser found, at a line (from 1) of the file."""

    line: int
    message: str
    severity: Severity = "error"


@dataclass(frozen=True)
class Section:
    """One top-level section (``port-groups``, ``qos-levels``, ...) and its first line."""

    kind: str
    line: int


@dataclass(frozen=True)
class PortGroup:
    """A ``port-group``: its members as written (GUID and pkey ranges are (low, high))."""

    name: str
    line: int
    use: str = ""
    guids: tuple[Range, ...] = ()
    port_names: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    pkeys: tuple[Range, ...] = ()
    node_types: tuple[str, ...] = ()

    @property
    def exact_guids(self) -> tuple[int, ...]:
        """The GUIDs listed one by one (ranges of one GUID)."""
        return tuple(lo for lo, hi in self.guids if lo == hi)


@dataclass(frozen=True)
class QosLevel:
    """A ``qos-level``.  *sl* is the number as written; OpenSM keeps its low 8 bits."""

    name: str
    line: int
    sl: int
    use: str = ""
    mtu_limit: int | None = None
    rate_limit: int | None = None
    packet_life: int | None = None
    path_bits: tuple[Range, ...] = ()
    pkeys: tuple[Range, ...] = ()


@dataclass(frozen=True)
class MatchRule:
    """A ``qos-match-rule``: group names as written, the qos-level it names."""

    line: int
    level: str
    use: str = ""
    sources: tuple[str, ...] = ()
    destinations: tuple[str, ...] = ()
    qos_class: tuple[Range, ...] = ()
    service_ids: tuple[Range, ...] = ()
    pkeys: tuple[Range, ...] = ()

    @property
    def matches_all(self) -> bool:
        """No criterion at all: the rule matches every path."""
        return not (
            self.sources or self.destinations or self.qos_class or self.service_ids or self.pkeys
        )


@dataclass(frozen=True)
class UlpRule:
    """A ``qos-ulps`` line: its kind (``default``, ``sdp``, ``any,service-id``, ...), SL and
    the ranges it lists (pkeys, port numbers, GUIDs or service IDs, as written)."""

    line: int
    kind: str
    sl: int
    ranges: tuple[Range, ...] = ()


@dataclass(frozen=True)
class Policy:
    """qos-policy.conf as OpenSM parses it.

    Attributes:
        source: the file's name, for messages.
        sections: top-level sections in file order.
        port_groups, qos_levels, match_rules, ulp_rules: in file order (OpenSM's lists).
        setup_line: line of the first ``qos-setup`` section (parsed, then ignored by
            OpenSM), None without one.
        error: the syntax error where OpenSM stops and drops the whole policy; the lists
            then hold what came before it.
        notes: what the lexer silently misreads (whitespace dropped from names, octal
            numbers, ...), found on the way.
    """

    source: str
    sections: tuple[Section, ...] = ()
    port_groups: tuple[PortGroup, ...] = ()
    qos_levels: tuple[QosLevel, ...] = ()
    match_rules: tuple[MatchRule, ...] = ()
    ulp_rules: tuple[UlpRule, ...] = ()
    setup_line: int | None = None
    error: Issue | None = None
    notes: tuple[Issue, ...] = ()

    def group(self, name: str) -> PortGroup | None:
        """The port-group OpenSM finds by *name*: the first, case-insensitively."""
        return next((g for g in self.port_groups if fold(g.name) == fold(name)), None)

    def level(self, name: str) -> QosLevel | None:
        """The qos-level OpenSM finds by *name*: the first, case-insensitively."""
        return next((q for q in self.qos_levels if fold(q.name) == fold(name)), None)

    @property
    def default_sl(self) -> int | None:
        """The DEFAULT level's SL (a qos-level named DEFAULT, else qos-ulps ``default:``)."""
        level = self.level("default")
        if level is not None:
            return level.sl
        return next((u.sl for u in self.ulp_rules if u.kind == "default"), None)

    def sl_of_group(self, name: str) -> int | None:
        """SL of the first match rule with *name* among its sources (what a path from the
        group gets unless an earlier rule catches it); None without one."""
        for rule in self.match_rules:
            if fold(name) in {fold(s) for s in rule.sources}:
                level = self.level(rule.level)
                return None if level is None else level.sl
        return None
