"""ibqos's checker for OpenSM's files: what OpenSM would reject, drop or misread.

Both files pass it before ibqos writes anything, and ``ibqos check-opensm FILE...`` runs it
for admins.  A finding is an **error** when OpenSM would drop or misread the file (the whole
policy, a line, a value), a **warning** when OpenSM accepts it but it is likely not what
was meant (OpenSM keeps the policy, and perhaps drops or never matches one rule).  Every
finding is one line, ``FILE:LINE: message`` (a whole-file finding names line 1).  Each
check cites the reference section or the OpenSM source it mirrors.

qos-policy.conf (docs/design.md §6.1; osm_qos_parser_l.l, osm_qos_parser_y.y, osm_qos_policy.c):
the parse of :func:`ibqos.opensm.policy.parse_policy` (syntax errors, reserved keywords
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

ibqos's own block must be delimited by exactly one begin and one end marker; anything else
(a marker deleted or edited by hand, two blocks) is a warning here (OpenSM ignores comments)
and a :class:`~ibqos.errors.RenderError` when ibqos renders (:func:`ibqos.opensm.conf.find_block`).

opensm.conf (docs/design.md §6.2; ``osm_subn_parse_conf_file``, ``subn_verify_*`` in
osm_subnet.c, ``qos_build_config`` in osm_qos.c): lines past fgets' buffer, ``qos`` not
exactly ``TRUE``, SL2VL tables that are not 16 VLs or use VLs beyond the data VLs (OpenSM
masks them), VLArb entries with VL 15 (read as VL 0), beyond the data VLs, weights above
255, more than 64 entries or than the ports' cap, values OpenSM's ``strtoul`` reads
differently (a leading 0 is octal; a blank before ``:`` or ``,`` shifts every later entry),
and SL2VL keys under routing engines that own SLs.
The options of both upstream OpenSM 3.3.23 and NVIDIA's OpenSM 5.x are known
(:mod:`ibqos.opensm.flavour`; ``(null)`` and ``-1`` mean unset in both).  An unknown
``qos*`` key, a ``key=value`` line, or an NVIDIA-only key read by upstream OpenSM is a
warning: OpenSM never rejects opensm.conf for a key, it logs ``Unrecognized token``, skips
that line and applies the rest, so ibqos's own block still takes effect.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ibqos.config.lanes import MAX_VLARB_ENTRIES, NUM_SLS, SL_OWNING_ENGINES, VL15
from ibqos.opensm.conf import (
    BEGIN_MARK,
    END_MARK,
    ConfLine,
    conf_lines,
    marker_problem,
    parse_conf,
    split_lines,
    strtoul,
)
from ibqos.opensm.flavour import NVIDIA_QOS_KEYS, UPSTREAM_QOS_KEYS, Flavour
from ibqos.opensm.partitions import DEFAULT_PARTITIONS_FILE, DEFAULT_PKEY, Partitions
from ibqos.opensm.policy.model import Policy, Range, Severity, fold
from ibqos.opensm.policy.parser import parse_policy
from ibqos.opensm.policy.render import BEGIN_MARK as POLICY_BEGIN
from ibqos.opensm.policy.render import END_MARK as POLICY_END

__all__ = [
    "Finding",
    "Kind",
    "check_conf",
    "check_file",
    "check_policy",
    "detect_kind",
    "partitions_file",
]

Kind = Literal["conf", "policy"]
#: fgets(line, 1023) in osm_subn_parse_conf_file: longer lines are read in pieces
MAX_CONF_LINE = 1022
_NUM = r"(0[xX][0-9a-fA-F]+|[0-9]+)"
_VLARB_ENTRY = re.compile(rf"\s*{_NUM}\s*:\s*{_NUM}\s*")
_SECTION_LINE = re.compile(
    r"^\s*(port-groups|qos-levels|qos-match-rules|qos-ulps|qos-setup)\b", re.M
)


@dataclass(frozen=True)
class Finding:
    """One thing the checker found.

    Attributes:
        source: the file (as the caller named it).
        line: line number from 1; None for the file as a whole.
        message: what OpenSM would do, and what to write instead.
        severity: "error" (OpenSM drops or misreads it) or "warning" (accepted, suspicious).
    """

    source: str
    line: int | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class _Findings:
    """Findings of one file, as they are found."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Finding] = []

    def add(self, line: int | None, message: str, severity: Severity = "error") -> None:
        # one line each, whatever a file's text put into the message
        text = message.replace("\r", "\\r").replace("\n", "\\n")
        self.items.append(Finding(self.source, line, text, severity))

    def sorted(self) -> list[Finding]:
        """In line order (whole-file findings first), errors before warnings."""
        return sorted(self.items, key=lambda f: (f.line or 0, f.severity != "error"))


# -- qos-policy.conf ------------------------------------------------------------------------


def check_policy(text: str, source: str, *, partitions: Partitions | None = None) -> list[Finding]:
    """Check qos-policy.conf text as OpenSM reads it; findings in line order.

    Args:
        text: the file.
        source: its name, for messages.
        partitions: the subnet's partitions (:func:`ibqos.opensm.partitions.read_partitions`);
            None: unknown, and what depends on them is at most a warning.
    """
    policy = parse_policy(text, source)
    out = _Findings(source)
    add = out.add
    for note in policy.notes:
        add(note.line, note.message, note.severity)
    if policy.error is not None:
        add(
            policy.error.line,
            f"{policy.error.message}; OpenSM stops here and drops the whole policy"
            " (ERR AC05, AC03)",
        )
        return out.sorted()
    _check_markers(text, source, POLICY_BEGIN, POLICY_END, out)
    # ipoib partitions are checked while parsing (a syntax error): before validation
    if _check_ipoib(policy, partitions, out):
        return out.sorted()

    # osm_qos_policy_validate: each of these makes OpenSM drop the whole policy
    if policy.default_sl is None:
        add(
            1,
            "no qos-level named DEFAULT (nor a qos-ulps 'default:' line) in the file: OpenSM"
            " drops the whole policy (ERR AC10)",
        )
    for n, rule in enumerate(policy.match_rules, start=1):
        if policy.level(rule.level) is None:
            add(rule.line, f"match rule {n}: qos-level {rule.level!r} is not defined; OpenSM"
                " drops the whole policy (ERR AC11)")  # fmt: skip
        for kind, names, code in (
            ("source", rule.sources, "AC12"),
            ("destination", rule.destinations, "AC13"),
        ):
            for name in names:
                if policy.group(name) is None:
                    add(rule.line, f"match rule {n}: {kind} port-group {name!r} is not defined;"
                        f" OpenSM drops the whole policy (ERR {code})")  # fmt: skip

    # accepted, but not what was meant
    for level in policy.qos_levels:
        if level.sl >= NUM_SLS:
            add(
                level.line,
                f"qos-level {level.name!r}: sl {level.sl} is not 0-15; OpenSM accepts it"
                " silently, but a PathRecord's SL has 4 bits",
            )
        if level.path_bits:
            add(level.line, f"qos-level {level.name!r}: path-bits is parsed but never used",
                "warning")  # fmt: skip
    _duplicates([(g.name, g.line) for g in policy.port_groups], "port-group", out)
    _duplicates([(q.name, q.line) for q in policy.qos_levels], "qos-level", out)
    default = policy.level("default")
    ulp_default = next((u for u in policy.ulp_rules if u.kind == "default"), None)
    if default is not None and ulp_default is not None:
        add(ulp_default.line, f"qos-ulps 'default:' is not used: the qos-level DEFAULT (line"
            f" {default.line}) comes first", "warning")  # fmt: skip
    for group in policy.port_groups:
        if not (group.guids or group.port_names or group.partitions or group.pkeys
                or group.node_types):  # fmt: skip
            add(group.line, f"port-group {group.name!r} has no members: it matches no port",
                "warning")  # fmt: skip
    _check_pkeys(policy, partitions, out)
    rules = policy.match_rules
    later_ulps = [u for u in policy.ulp_rules if u.kind != "default"]
    for n, rule in enumerate(rules, start=1):
        if rule.matches_all and (n < len(rules) or later_ulps):
            add(
                rule.line,
                f"match rule {n} has no criterion: it matches every path, so no rule after it"
                " (nor any qos-ulps rule) ever matches",
                "warning",
            )
            break
    if policy.setup_line is not None:
        add(policy.setup_line, "qos-setup is parsed and then ignored by OpenSM: set SL2VL and"
            " VLArb with the qos_*_sl2vl/vlarb keys of opensm.conf", "warning")  # fmt: skip
    return out.sorted()


def _pkeys(ranges: Iterable[Range]) -> list[int]:
    """The P_Keys of *ranges* as OpenSM walks them: bit 15 cleared at both ends, then a
    reversed range swapped (``__pkey_rangelist2rangearr``)."""
    out: set[int] = set()
    for lo, hi in ranges:
        a, b = sorted((lo & 0x7FFF, hi & 0x7FFF))
        out.update(range(a, b + 1))
    return sorted(out)


def _check_ipoib(policy: Policy, partitions: Partitions | None, out: _Findings) -> bool:
    """``ipoib`` lines of qos-ulps: OpenSM wants each P_Key's partition to exist with two
    full members at least, and stops parsing at the first that fails.  True when one
    fails for sure (an error is added)."""
    for ulp in policy.ulp_rules:
        if ulp.kind not in ("ipoib", "ipoib,pkey"):
            continue
        what = f"qos-ulps '{ulp.kind.replace(',', ', ')}'"
        for pkey in _pkeys(ulp.ranges) if ulp.ranges else [DEFAULT_PKEY]:
            if partitions is None:
                out.add(ulp.line, f"{what}: OpenSM drops the whole policy (ERR AC05, AC03)"
                        f" unless a partition has P_Key {pkey:#06x} with 2 full members at"
                        " least; the partitions are not known here", "warning")  # fmt: skip
                continue
            full = partitions.full_members(pkey)
            if not partitions.has(pkey):
                why = "partition doesn't exist"
            elif full is not None and full < 2:
                why = "partition has less than two full members"
            else:
                continue
            out.add(ulp.line, f"{what}: 'IPoIB partition, pkey 0x{pkey:04X} - {why}'"
                    f" ({partitions.source}): OpenSM stops parsing here and drops the whole"
                    " policy (ERR AC05, AC03)")  # fmt: skip
            return True
    return False


def _check_pkeys(policy: Policy, partitions: Partitions | None, out: _Findings) -> None:
    """P_Keys and partition names OpenSM looks up after the parse: in match rules (and
    ``any, pkey`` lines) a missing one is ERR AC14 and the rule stays; in port-groups it
    adds no port, silently."""
    known = partitions.has if partitions is not None else (lambda pkey: pkey == DEFAULT_PKEY)
    where = f" ({partitions.source})" if partitions is not None else " (unless partitions.conf" \
        " defines it; the partitions are not known here)"  # fmt: skip
    rules = [(f"match rule {n}", r.line, r.pkeys) for n, r in enumerate(policy.match_rules, 1)]
    rules += [("qos-ulps 'any, pkey'", u.line, u.ranges) for u in policy.ulp_rules
              if u.kind == "any,pkey"]  # fmt: skip
    for what, line, ranges in rules:
        missing = [p for p in _pkeys(ranges) if not known(p)]
        if missing:
            out.add(line, f"{what}: no partition has P_Key {_some(missing)}{where}: OpenSM"
                    " logs ERR AC14 for each and keeps the rule and the policy; no path carries"
                    " such a P_Key, so the rule never matches by it", "warning")  # fmt: skip
    if partitions is None:
        return
    for group in policy.port_groups:
        missing = [p for p in _pkeys(group.pkeys) if not partitions.has(p)]
        names = [n for n in group.partitions if n not in partitions.names]
        if missing:
            out.add(group.line, f"port-group {group.name!r}: no partition has P_Key"
                    f" {_some(missing)} ({partitions.source}): OpenSM adds no port for it,"
                    " silently", "warning")  # fmt: skip
        if names:
            out.add(group.line, f"port-group {group.name!r}: no partition named"
                    f" {', '.join(map(repr, names))} ({partitions.source}; names are"
                    " case-sensitive): OpenSM adds no port for it, silently",
                    "warning")  # fmt: skip


def _some(pkeys: list[int]) -> str:
    """A few P_Keys for a message: the first three, and how many more."""
    text = ", ".join(f"{p:#06x}" for p in pkeys[:3])
    return text + (f" and {len(pkeys) - 3} more" if len(pkeys) > 3 else "")


def _duplicates(names: Iterable[tuple[str, int]], what: str, out: _Findings) -> None:
    first: dict[str, int] = {}
    for name, line in names:
        key = fold(name)
        if key in first:
            out.add(line, f"{what} {name!r} is defined again (first on line {first[key]}):"
                    " OpenSM uses the first one only", "warning")  # fmt: skip
        else:
            first[key] = line


# -- opensm.conf ----------------------------------------------------------------------------


def check_conf(
    text: str,
    source: str,
    *,
    data_vls: int | None = None,
    vlarb_low_cap: int | None = None,
    vlarb_high_cap: int | None = None,
    flavour: Flavour | None = None,
) -> list[Finding]:
    """Check opensm.conf text as OpenSM reads it; findings in line order.

    Args:
        text: the file.
        source: its name, for messages.
        data_vls: the ports' data VLs (OperVLs as a count, 1-15); None: VLs are only
            checked against 0-14.
        vlarb_low_cap, vlarb_high_cap: the ports' VLArbLowCap / VLArbHighCap (entries
            OpenSM sends); None: only OpenSM's own limit of 64 is checked.
        flavour: the OpenSM that reads the file (:mod:`ibqos.opensm.flavour`); None:
            either, so the options of NVIDIA's OpenSM are known.
    """
    out = _Findings(source)
    add = out.add

    for n, line in enumerate(split_lines(text), start=1):
        if len(line.rstrip("\n")) > MAX_CONF_LINE:
            add(n, f"line longer than {MAX_CONF_LINE} characters: OpenSM reads the rest as"
                " a line of its own")  # fmt: skip
    _check_markers(text, source, BEGIN_MARK, END_MARK, out)
    known = UPSTREAM_QOS_KEYS | NVIDIA_QOS_KEYS
    last: dict[str, ConfLine] = {}
    for entry in conf_lines(text):
        # OpenSM never rejects opensm.conf for an unknown key: it logs 'Unrecognized token',
        # skips the line and reads the rest (osm_subn_parse_conf_file), so these are warnings
        if "=" in entry.key:
            add(entry.line, f"{entry.key!r}: 'key=value' is not opensm.conf syntax; OpenSM"
                " logs 'Unrecognized token' and ignores the line (write 'key value')",
                "warning")  # fmt: skip
            continue
        if entry.key in NVIDIA_QOS_KEYS and flavour == "upstream":
            add(entry.line, f"{entry.key} is an option of NVIDIA's OpenSM only: this upstream"
                " OpenSM logs 'Unrecognized token' and ignores the line", "warning")  # fmt: skip
            continue
        if entry.key.startswith("qos") and entry.key not in known:
            add(entry.line, f"unknown option {entry.key!r}: OpenSM logs 'Unrecognized token'"
                " and ignores the line", "warning")  # fmt: skip
            continue
        if entry.key in last:
            add(entry.line, f"{entry.key} is set again (first on line {last[entry.key].line}):"
                " OpenSM uses this last one", "warning")  # fmt: skip
        last[entry.key] = entry

    qos = last.get("qos")
    if qos is None:
        add(1, "no 'qos' line in the file: QoS is off unless OpenSM runs with -Q (the policy"
            " and the qos_* keys are then ignored)", "warning")  # fmt: skip
    elif qos.value != "TRUE":
        if qos.value.upper() in ("TRUE", "YES", "ON", "1", "ENABLE", "ENABLED"):
            add(qos.line, f"qos {qos.value}: OpenSM reads anything but exactly TRUE as FALSE")
        else:
            add(qos.line, f"qos {qos.value}: QoS is off; OpenSM ignores the policy and every"
                " qos_* key", "warning")  # fmt: skip
    for key, entry in last.items():
        if entry.value == "(null)" or not key.startswith("qos_"):
            continue
        if key.endswith("_sl2vl"):
            _check_sl2vl(entry, data_vls, out)
        elif key.endswith("_vlarb_low"):
            _check_vlarb(entry, data_vls, vlarb_low_cap, "VLArbLowCap", out)
        elif key.endswith("_vlarb_high"):
            _check_vlarb(entry, data_vls, vlarb_high_cap, "VLArbHighCap", out)
        elif key.endswith("_high_limit"):
            _check_number(entry, 255, "OpenSM then uses its default (0)", out)
        elif key.endswith("_max_vls"):
            _check_number(entry, 15, "OpenSM then ignores it", out)
    engine = last.get("routing_engine")
    if engine is not None:
        owners = [e for e in re.split(r"[,\s]+", engine.value.lower()) if e in SL_OWNING_ENGINES]
        sl2vl = [e for k, e in last.items() if k.endswith("sl2vl") and e.value != "(null)"]
        if owners and sl2vl:
            add(sl2vl[0].line, f"routing engine {owners[0]} owns SLs and SL2VL (docs/design.md"
                " §6.4): it ignores qos_*_sl2vl or loses its deadlock freedom under it",
                "warning")  # fmt: skip
    return out.sorted()


def _check_markers(text: str, source: str, begin: str, end: str, out: _Findings) -> None:
    """ibqos's block markers: OpenSM ignores them (comments), but ibqos refuses to rewrite
    a file whose markers do not delimit one block."""
    _, problem = marker_problem(split_lines(text), begin, end)
    if problem is not None:
        out.add(problem[0], f"{problem[1]} (OpenSM reads the file; ibqos will not rewrite"
                " it)", "warning")  # fmt: skip


def _mask(data_vls: int) -> int:
    """OpenSM's ``vl_mask``: ``(1 << (OperVLs enum - 1)) - 1`` (osm_qos.c)."""
    return {1: 0, 2: 1, 4: 3, 8: 7, 15: 15}.get(data_vls, (1 << (data_vls.bit_length() - 1)) - 1)


def _one(text: str, pos: int) -> tuple[int, int]:
    """parse_one_unsigned of osm_qos.c: strtoul, then skip one character whatever it is."""
    value, end = strtoul(text, pos)
    return value & 0xFFFFFFFF, end + 1 if end < len(text) else end


def _as_written(token: str) -> int:
    token = token.strip()
    return int(token, 16) if token[:2] in ("0x", "0X") else int(token)


def _check_sl2vl(entry: ConfLine, data_vls: int | None, out: _Findings) -> None:
    key, value, line = entry.key, entry.value, entry.line
    add = out.add
    if not value:
        add(line, f"{key} is empty: OpenSM maps every SL to VL 0")
        return
    tokens = value.split(",")
    if len(tokens) > 1 and not tokens[-1].strip():
        tokens.pop()  # a comma after the last VL: OpenSM skips it like any separator
    for n, token in enumerate(tokens, start=1):
        if not re.fullmatch(rf"\s*{_NUM}\s*", token):
            what = (
                f"VL {n} is empty" if not token.strip() else f"{token.strip()!r} is not a VL number"
            )
            add(line, f"{key}: {what} (16 comma-separated VLs, one per SL)")
            return
    vls = [_as_written(t) for t in tokens]
    if len(vls) != NUM_SLS:
        rest = "maps the missing SLs to VL 0" if len(vls) < NUM_SLS else "drops the rest"
        add(line, f"{key}: {len(vls)} VLs given, {NUM_SLS} needed (one per SL); OpenSM {rest}")
    too_big = [(sl, vl) for sl, vl in enumerate(vls[:NUM_SLS]) if vl > VL15]
    if too_big:
        add(line, f"{key}: VLs are 0-15, OpenSM keeps the low 4 bits of "
            + ", ".join(f"SL {sl}'s VL {vl}" for sl, vl in too_big))  # fmt: skip
    dropped = [sl for sl, vl in enumerate(vls[:NUM_SLS]) if vl == VL15]
    if dropped:
        add(line, f"{key}: SL {', '.join(map(str, dropped))} to VL 15: their packets are dropped"
            " and paths that use them disappear", "warning")  # fmt: skip
    if len(vls) == NUM_SLS and not too_big:
        # what OpenSM reads (parse_sl2vl_entry: two VLs per byte, one separator skipped)
        pos, read = 0, []
        for _ in range(NUM_SLS):
            vl, pos = _one(value, pos)
            read.append(vl & 0xF)
        for sl, (want, got) in enumerate(zip(vls, read, strict=True)):
            if want != got:
                add(line, f"{key}: OpenSM reads VL {got} for SL {sl} where"
                    f" {tokens[sl].strip()!r} is written (a leading 0 means octal; no blank may"
                    " come before a comma)")  # fmt: skip
                break
        vls = read
    if data_vls is not None:
        beyond = [(sl, vl) for sl, vl in enumerate(vls[:NUM_SLS]) if data_vls <= vl < VL15]
        if beyond:
            mask = _mask(data_vls)
            add(line, f"{key}: VLs beyond the {data_vls} data VLs, which OpenSM masks: "
                + ", ".join(f"SL {sl} VL {vl} -> {vl & mask}" for sl, vl in beyond))  # fmt: skip


def _check_vlarb(
    entry: ConfLine, data_vls: int | None, cap: int | None, cap_name: str, out: _Findings
) -> None:
    key, value, line = entry.key, entry.value, entry.line
    add = out.add
    if not value:
        add(line, f"{key} is empty: OpenSM reads no entry; write {'0:0'} to say so", "warning")
        return
    pairs: list[tuple[int, int]] = []
    for token in value.split(","):
        m = _VLARB_ENTRY.fullmatch(token)
        if m is None:
            add(line, f"{key}: entry {token.strip()!r} is not vl:weight")
            return
        pairs.append((_as_written(m.group(1)), _as_written(m.group(2))))
    bad = False
    for n, (vl, weight) in enumerate(pairs[:MAX_VLARB_ENTRIES], start=1):
        if vl >= VL15:
            add(line, f"{key}: entry {n} ({vl}:{weight}): VL {vl} is not a data VL; OpenSM"
                f" programs VL {vl % VL15} instead")  # fmt: skip
            bad = True
        elif data_vls is not None and vl >= data_vls:
            add(line, f"{key}: entry {n} ({vl}:{weight}): VL {vl} is beyond the {data_vls} data"
                f" VLs; OpenSM masks it to VL {vl & _mask(data_vls)}")  # fmt: skip
        if weight > 255:
            add(line, f"{key}: entry {n} ({vl}:{weight}): weights are 0-255 (64-byte credits);"
                f" OpenSM keeps {weight & 0xFF}")  # fmt: skip
            bad = True
    if len(pairs) > MAX_VLARB_ENTRIES:
        add(line, f"{key}: {len(pairs)} entries; OpenSM reads the first {MAX_VLARB_ENTRIES}")
    if cap is not None and any(w > 0 for _, w in pairs[cap:]):
        add(line, f"{key}: {len(pairs)} entries, but the ports' {cap_name} is {cap}: OpenSM"
            f" sends only the first {cap}")  # fmt: skip
    if key.endswith("_vlarb_low") and all(w == 0 for _, w in pairs):
        add(line, f"{key}: every weight is 0: no VL gets low-priority bandwidth", "warning")
    if not bad:
        pos = 0
        for n, (vl, weight) in enumerate(pairs[:MAX_VLARB_ENTRIES], start=1):
            got_vl, pos = _one(value, pos)
            got_weight, pos = _one(value, pos)
            if (got_vl % VL15, got_weight & 0xFF) != (vl, weight):
                add(line, f"{key}: OpenSM reads entry {n} as {got_vl % VL15}:{got_weight & 0xFF}"
                    f" where {vl}:{weight} is written (a leading 0 means octal; no blank may"
                    " come before ':' or ',')")  # fmt: skip
                break


def _check_number(entry: ConfLine, top: int, beyond: str, out: _Findings) -> None:
    key, value, line = entry.key, entry.value, entry.line
    add = out.add
    if not re.fullmatch(rf"-?{_NUM}", value):
        add(line, f"{key} {value!r} is not a number: OpenSM reads {strtoul(value)[0]}")
    elif _as_written(value.lstrip("-")) > top:
        add(line, f"{key} {value}: expected 0-{top}; {beyond}")
    elif value.startswith("-") and value != "-1":
        add(line, f"{key} {value}: a negative value means unset", "warning")


# -- files ----------------------------------------------------------------------------------


def detect_kind(path: Path | str, text: str) -> Kind:
    """ "policy" for a qos-policy.conf, "conf" for an opensm.conf: by name, else by content
    (a line starting with a policy section keyword)."""
    name = Path(path).name.lower()
    if "policy" in name:
        return "policy"
    if name.startswith("opensm"):
        return "conf"
    return "policy" if _SECTION_LINE.search(text) else "conf"


def partitions_file(paths: Iterable[Path | str]) -> Path:
    """The partition file OpenSM reads: the ``partition_config_file`` of the first
    opensm.conf among *paths* that sets it, else OpenSM's default path."""
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if detect_kind(path, text) == "conf":
            value = parse_conf(text).get("partition_config_file", "(null)")
            if value not in ("", "(null)"):
                return Path(value)
    return DEFAULT_PARTITIONS_FILE


def check_file(
    path: Path | str,
    *,
    kind: Kind | None = None,
    data_vls: int | None = None,
    vlarb_low_cap: int | None = None,
    vlarb_high_cap: int | None = None,
    partitions: Partitions | None = None,
) -> list[Finding]:
    """Check one file for ``ibqos check-opensm``; its kind from *kind* or
    :func:`detect_kind`.  An unreadable file is one error finding (no exception)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return [Finding(source, None, f"cannot read: {err.strerror or err}")]
    if (kind or detect_kind(path, text)) == "policy":
        return check_policy(text, source, partitions=partitions)
    return check_conf(
        text,
        source,
        data_vls=data_vls,
        vlarb_low_cap=vlarb_low_cap,
        vlarb_high_cap=vlarb_high_cap,
    )
