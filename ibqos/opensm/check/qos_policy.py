"""The checks of qos-policy.conf (docs/design.md §6.1; osm_qos_parser_l.l, osm_qos_parser_y.y,
osm_qos_policy.c).

The parse of :func:`ibqos.opensm.policy.parse_policy` (syntax errors, reserved keywords
inside names, a last comment without newline, CRLF, a byte order mark, the grammar's own
checks), then what ``osm_qos_policy_validate`` rejects (no DEFAULT: AC10; an undefined
qos-level: AC11, source group: AC12, destination group: AC13), then silent misreadings: SL >
15, unquoted blanks, octal numbers, wide GUID ranges, duplicate names, rules that shadow all
later ones, ``qos-setup`` (ignored).

What OpenSM 3.3.23 does with the traps that depend on partitions or sizes (each run on an
ibsim lab by ``tests/integration/test_policy_traps_lab.py``; docs/agent.md has the table):

- ``ipoib, pkey P : SL`` or ``ipoib : SL`` (P = 0x7fff) whose partition is missing or has
  fewer than two full members (with a partitions.conf, Default's only full member is the
  SM port unless the file says more): ERR AC05, AC03, the whole policy dropped -> error
  (a warning when the partitions are not known);
- ``pkey: P`` in a match rule, or ``any, pkey P : SL``, no partition with P: ERR AC14 after
  the parse, rule and policy kept -> warning;
- a port-group's ``pkey:`` or ``partition:`` no partition has: silently no port -> warning;
- one string value of 10 KiB or more (unbounded strcat into the parser's buffer): OpenSM
  died -> error;
- a byte order mark: AC05 at line 1, AC03 -> error.

The partitions come from the partition file opensm.conf names (OpenSM's default path
without one; :mod:`ibqos.opensm.partitions`).  ERR AC14 is logged but not fatal: a reload
check that treats every ``ERR AC..`` line as a rejection would roll back a file OpenSM took.
"""

from __future__ import annotations

from collections.abc import Iterable

from ibqos.config.lanes import NUM_SLS
from ibqos.opensm.check.findings import Finding, Findings, check_markers
from ibqos.opensm.partitions import DEFAULT_PKEY, Partitions
from ibqos.opensm.policy.model import Policy, Range, fold
from ibqos.opensm.policy.parser import parse_policy
from ibqos.opensm.policy.render import BEGIN_MARK, END_MARK

__all__ = [
    "check_policy",
]


def check_policy(text: str, source: str, *, partitions: Partitions | None = None) -> list[Finding]:
    """Check qos-policy.conf text as OpenSM reads it; findings in line order.

    Args:
        text: the file.
        source: its name, for messages.
        partitions: the subnet's partitions (:func:`ibqos.opensm.partitions.read_partitions`);
            None: unknown, and what depends on them is at most a warning.
    """
    policy = parse_policy(text, source)
    out = Findings(source)
    for note in policy.notes:
        out.add(note.line, note.message, note.severity)
    if policy.error is not None:
        out.add(
            policy.error.line,
            f"{policy.error.message}; OpenSM stops here and drops the whole policy"
            " (ERR AC05, AC03)",
        )
        return out.sorted()
    check_markers(text, BEGIN_MARK, END_MARK, out)
    # ipoib partitions are checked while parsing (a syntax error): before validation
    if not _check_ipoib(policy, partitions, out):
        _check_validation(policy, out)
        _check_meaning(policy, partitions, out)
    return out.sorted()


def _check_validation(policy: Policy, out: Findings) -> None:
    """What ``osm_qos_policy_validate`` rejects: each makes OpenSM drop the whole policy."""
    if policy.default_sl is None:
        out.add(
            1,
            "no qos-level named DEFAULT (nor a qos-ulps 'default:' line) in the file: OpenSM"
            " drops the whole policy (ERR AC10)",
        )
    for n, rule in enumerate(policy.match_rules, start=1):
        if policy.level(rule.level) is None:
            out.add(
                rule.line,
                f"match rule {n}: qos-level {rule.level!r} is not defined; OpenSM"
                " drops the whole policy (ERR AC11)",
            )
        for kind, names, code in (
            ("source", rule.sources, "AC12"),
            ("destination", rule.destinations, "AC13"),
        ):
            for name in names:
                if policy.group(name) is None:
                    out.add(
                        rule.line,
                        f"match rule {n}: {kind} port-group {name!r} is not defined;"
                        f" OpenSM drops the whole policy (ERR {code})",
                    )


def _check_meaning(policy: Policy, partitions: Partitions | None, out: Findings) -> None:
    """What OpenSM accepts, but was likely not meant."""
    for level in policy.qos_levels:
        if level.sl >= NUM_SLS:
            out.add(
                level.line,
                f"qos-level {level.name!r}: sl {level.sl} is not 0-15; OpenSM accepts it"
                " silently, but a PathRecord's SL has 4 bits",
            )
        if level.path_bits:
            out.add(
                level.line,
                f"qos-level {level.name!r}: path-bits is parsed but never used",
                "warning",
            )
    _duplicates([(g.name, g.line) for g in policy.port_groups], "port-group", out)
    _duplicates([(q.name, q.line) for q in policy.qos_levels], "qos-level", out)
    default = policy.level("default")
    ulp_default = next((u for u in policy.ulp_rules if u.kind == "default"), None)
    if default is not None and ulp_default is not None:
        out.add(
            ulp_default.line,
            f"qos-ulps 'default:' is not used: the qos-level DEFAULT (line"
            f" {default.line}) comes first",
            "warning",
        )
    for group in policy.port_groups:
        members = (group.guids, group.port_names, group.partitions, group.pkeys, group.node_types)
        if not any(members):
            out.add(
                group.line,
                f"port-group {group.name!r} has no members: it matches no port",
                "warning",
            )
    _check_pkeys(policy, partitions, out)
    rules = policy.match_rules
    later_ulps = [u for u in policy.ulp_rules if u.kind != "default"]
    for n, rule in enumerate(rules, start=1):
        if rule.matches_all and (n < len(rules) or later_ulps):
            out.add(
                rule.line,
                f"match rule {n} has no criterion: it matches every path, so no rule after it"
                " (nor any qos-ulps rule) ever matches",
                "warning",
            )
            break
    if policy.setup_line is not None:
        out.add(
            policy.setup_line,
            "qos-setup is parsed and then ignored by OpenSM: set SL2VL and"
            " VLArb with the qos_*_sl2vl/vlarb keys of opensm.conf",
            "warning",
        )


def _pkeys(ranges: Iterable[Range]) -> list[int]:
    """The P_Keys of *ranges* as OpenSM walks them: bit 15 cleared at both ends, then a
    reversed range swapped (``__pkey_rangelist2rangearr``)."""
    out: set[int] = set()
    for lo, hi in ranges:
        a, b = sorted((lo & 0x7FFF, hi & 0x7FFF))
        out.update(range(a, b + 1))
    return sorted(out)


def _check_ipoib(policy: Policy, partitions: Partitions | None, out: Findings) -> bool:
    """``ipoib`` lines of qos-ulps: OpenSM wants each P_Key's partition to exist with two
    full members at least, and stops parsing at the first that fails.  True when one
    fails for sure (an error is added)."""
    for ulp in policy.ulp_rules:
        if ulp.kind not in ("ipoib", "ipoib,pkey"):
            continue
        what = f"qos-ulps '{ulp.kind.replace(',', ', ')}'"
        for pkey in _pkeys(ulp.ranges) if ulp.ranges else [DEFAULT_PKEY]:
            if partitions is None:
                out.add(
                    ulp.line,
                    f"{what}: OpenSM drops the whole policy (ERR AC05, AC03)"
                    f" unless a partition has P_Key {pkey:#06x} with 2 full members at"
                    " least; the partitions are not known here",
                    "warning",
                )
                continue
            full = partitions.full_members(pkey)
            if not partitions.has(pkey):
                why = "partition doesn't exist"
            elif full is not None and full < 2:
                why = "partition has less than two full members"
            else:
                continue
            out.add(
                ulp.line,
                f"{what}: 'IPoIB partition, pkey 0x{pkey:04X} - {why}'"
                f" ({partitions.source}): OpenSM stops parsing here and drops the whole"
                " policy (ERR AC05, AC03)",
            )
            return True
    return False


def _check_pkeys(policy: Policy, partitions: Partitions | None, out: Findings) -> None:
    """P_Keys and partition names OpenSM looks up after the parse: in match rules (and
    ``any, pkey`` lines) a missing one is ERR AC14 and the rule stays; in port-groups it
    adds no port, silently."""
    known = partitions.has if partitions is not None else (lambda pkey: pkey == DEFAULT_PKEY)
    where = " (unless partitions.conf defines it; the partitions are not known here)"
    if partitions is not None:
        where = f" ({partitions.source})"
    rules = [(f"match rule {n}", r.line, r.pkeys) for n, r in enumerate(policy.match_rules, 1)]
    rules += [
        ("qos-ulps 'any, pkey'", u.line, u.ranges) for u in policy.ulp_rules if u.kind == "any,pkey"
    ]
    for what, line, ranges in rules:
        missing = [p for p in _pkeys(ranges) if not known(p)]
        if missing:
            out.add(
                line,
                f"{what}: no partition has P_Key {_some(missing)}{where}: OpenSM"
                " logs ERR AC14 for each and keeps the rule and the policy; no path carries"
                " such a P_Key, so the rule never matches by it",
                "warning",
            )
    if partitions is None:
        return
    for group in policy.port_groups:
        missing = [p for p in _pkeys(group.pkeys) if not partitions.has(p)]
        names = [n for n in group.partitions if n not in partitions.names]
        if missing:
            out.add(
                group.line,
                f"port-group {group.name!r}: no partition has P_Key"
                f" {_some(missing)} ({partitions.source}): OpenSM adds no port for it,"
                " silently",
                "warning",
            )
        if names:
            out.add(
                group.line,
                f"port-group {group.name!r}: no partition named"
                f" {', '.join(map(repr, names))} ({partitions.source}; names are"
                " case-sensitive): OpenSM adds no port for it, silently",
                "warning",
            )


def _some(pkeys: list[int]) -> str:
    """A few P_Keys for a message: the first three, and how many more."""
    text = ", ".join(f"{p:#06x}" for p in pkeys[:3])
    return text + (f" and {len(pkeys) - 3} more" if len(pkeys) > 3 else "")


def _duplicates(names: Iterable[tuple[str, int]], what: str, out: Findings) -> None:
    """Names defined again: OpenSM keeps the first (names compare without case)."""
    first: dict[str, int] = {}
    for name, line in names:
        key = fold(name)
        if key in first:
            out.add(
                line,
                f"{what} {name!r} is defined again (first on line {first[key]}):"
                " OpenSM uses the first one only",
                "warning",
            )
        else:
            first[key] = line
