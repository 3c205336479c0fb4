"""The checks of opensm.conf (docs/design.md §6.2; ``osm_subn_parse_conf_file``,
``subn_verify_*`` in osm_subnet.c, ``qos_build_config`` in osm_qos.c).

Lines past fgets' buffer, ``qos`` not exactly ``TRUE``, SL2VL tables that are not 16 VLs or
use VLs beyond the data VLs (OpenSM masks them), VLArb entries with VL 15 (read as VL 0),
beyond the data VLs, weights above 255, more than 64 entries or than the ports' cap, values
OpenSM's ``strtoul`` reads differently (a leading 0 is octal; a blank before ``:`` or ``,``
shifts every later entry), and SL2VL keys under routing engines that own SLs.

The options of both upstream OpenSM 3.3.23 and NVIDIA's OpenSM 5.x are known
(:mod:`ibqos.opensm.flavour`; ``(null)`` and ``-1`` mean unset in both).  An unknown
``qos*`` key, a ``key=value`` line, or an NVIDIA-only key read by upstream OpenSM is a
warning: OpenSM never rejects opensm.conf for a key, it logs ``Unrecognized token``, skips
that line and applies the rest, so ibqos's own block still takes effect.
"""

from __future__ import annotations

import re

from ibqos.config.lanes import MAX_VLARB_ENTRIES, NUM_SLS, SL_OWNING_ENGINES, VL15
from ibqos.opensm.check.findings import Finding, Findings, check_markers
from ibqos.opensm.conf import BEGIN_MARK, END_MARK, ConfLine, conf_lines, split_lines, strtoul
from ibqos.opensm.flavour import NVIDIA_QOS_KEYS, UPSTREAM_QOS_KEYS, Flavour

__all__ = [
    "MAX_CONF_LINE",
    "check_conf",
]

#: fgets(line, 1023) in osm_subn_parse_conf_file: longer lines are read in pieces
MAX_CONF_LINE = 1022
_NUM = r"(0[xX][0-9a-fA-F]+|[0-9]+)"
_VLARB_ENTRY = re.compile(rf"\s*{_NUM}\s*:\s*{_NUM}\s*")


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
    out = Findings(source)
    for n, line in enumerate(split_lines(text), start=1):
        if len(line.rstrip("\n")) > MAX_CONF_LINE:
            out.add(
                n,
                f"line longer than {MAX_CONF_LINE} characters: OpenSM reads the rest as"
                " a line of its own",
            )
    check_markers(text, BEGIN_MARK, END_MARK, out)
    last = _options(text, flavour, out)
    _check_qos(last.get("qos"), out)
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
    _check_engine(last, out)
    return out.sorted()


def _options(text: str, flavour: Flavour | None, out: Findings) -> dict[str, ConfLine]:
    """The options OpenSM takes from *text*: the last line of each key it knows."""
    known = UPSTREAM_QOS_KEYS | NVIDIA_QOS_KEYS
    last: dict[str, ConfLine] = {}
    for entry in conf_lines(text):
        # OpenSM never rejects opensm.conf for an unknown key: it logs 'Unrecognized token',
        # skips the line and reads the rest (osm_subn_parse_conf_file), so these are warnings
        if "=" in entry.key:
            out.add(
                entry.line,
                f"{entry.key!r}: 'key=value' is not opensm.conf syntax; OpenSM"
                " logs 'Unrecognized token' and ignores the line (write 'key value')",
                "warning",
            )
            continue
        if entry.key in NVIDIA_QOS_KEYS and flavour == "upstream":
            out.add(
                entry.line,
                f"{entry.key} is an option of NVIDIA's OpenSM only: this upstream"
                " OpenSM logs 'Unrecognized token' and ignores the line",
                "warning",
            )
            continue
        if entry.key.startswith("qos") and entry.key not in known:
            out.add(
                entry.line,
                f"unknown option {entry.key!r}: OpenSM logs 'Unrecognized token'"
                " and ignores the line",
                "warning",
            )
            continue
        if entry.key in last:
            out.add(
                entry.line,
                f"{entry.key} is set again (first on line {last[entry.key].line}):"
                " OpenSM uses this last one",
                "warning",
            )
        last[entry.key] = entry
    return last


def _check_qos(qos: ConfLine | None, out: Findings) -> None:
    """The ``qos`` option: QoS is on only when it says exactly TRUE (or OpenSM runs with -Q)."""
    if qos is None:
        out.add(
            1,
            "no 'qos' line in the file: QoS is off unless OpenSM runs with -Q (the policy"
            " and the qos_* keys are then ignored)",
            "warning",
        )
    elif qos.value != "TRUE":
        if qos.value.upper() in ("TRUE", "YES", "ON", "1", "ENABLE", "ENABLED"):
            out.add(qos.line, f"qos {qos.value}: OpenSM reads anything but exactly TRUE as FALSE")
        else:
            out.add(
                qos.line,
                f"qos {qos.value}: QoS is off; OpenSM ignores the policy and every qos_* key",
                "warning",
            )


def _check_engine(last: dict[str, ConfLine], out: Findings) -> None:
    """SL2VL keys under a routing engine that owns SLs (docs/design.md §6.4)."""
    engine = last.get("routing_engine")
    if engine is None:
        return
    owners = [e for e in re.split(r"[,\s]+", engine.value.lower()) if e in SL_OWNING_ENGINES]
    sl2vl = [e for k, e in last.items() if k.endswith("sl2vl") and e.value != "(null)"]
    if owners and sl2vl:
        out.add(
            sl2vl[0].line,
            f"routing engine {owners[0]} owns SLs and SL2VL (docs/design.md"
            " §6.4): it ignores qos_*_sl2vl or loses its deadlock freedom under it",
            "warning",
        )


def _mask(data_vls: int) -> int:
    """OpenSM's ``vl_mask``: ``(1 << (OperVLs enum - 1)) - 1`` (osm_qos.c)."""
    return {1: 0, 2: 1, 4: 3, 8: 7, 15: 15}.get(data_vls, (1 << (data_vls.bit_length() - 1)) - 1)


def _one(text: str, pos: int) -> tuple[int, int]:
    """parse_one_unsigned of osm_qos.c: strtoul, then skip one character whatever it is."""
    value, end = strtoul(text, pos)
    return value & 0xFFFFFFFF, end + 1 if end < len(text) else end


def _as_written(token: str) -> int:
    """A number as written (decimal, or hex after 0x), as the admin meant it."""
    token = token.strip()
    return int(token, 16) if token[:2] in ("0x", "0X") else int(token)


def _check_sl2vl(entry: ConfLine, data_vls: int | None, out: Findings) -> None:
    """A ``qos_*_sl2vl`` value: 16 VLs, each a data VL, read by OpenSM as written."""
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
        add(
            line,
            f"{key}: VLs are 0-15, OpenSM keeps the low 4 bits of "
            + ", ".join(f"SL {sl}'s VL {vl}" for sl, vl in too_big),
        )
    dropped = [sl for sl, vl in enumerate(vls[:NUM_SLS]) if vl == VL15]
    if dropped:
        add(
            line,
            f"{key}: SL {', '.join(map(str, dropped))} to VL 15: their packets are dropped"
            " and paths that use them disappear",
            "warning",
        )
    if len(vls) == NUM_SLS and not too_big:
        # what OpenSM reads (parse_sl2vl_entry: two VLs per byte, one separator skipped)
        pos, read = 0, []
        for _ in range(NUM_SLS):
            vl, pos = _one(value, pos)
            read.append(vl & 0xF)
        for sl, (want, got) in enumerate(zip(vls, read, strict=True)):
            if want != got:
                add(
                    line,
                    f"{key}: OpenSM reads VL {got} for SL {sl} where"
                    f" {tokens[sl].strip()!r} is written (a leading 0 means octal; no blank may"
                    " come before a comma)",
                )
                break
        vls = read
    if data_vls is not None:
        beyond = [(sl, vl) for sl, vl in enumerate(vls[:NUM_SLS]) if data_vls <= vl < VL15]
        if beyond:
            mask = _mask(data_vls)
            add(
                line,
                f"{key}: VLs beyond the {data_vls} data VLs, which OpenSM masks: "
                + ", ".join(f"SL {sl} VL {vl} -> {vl & mask}" for sl, vl in beyond),
            )


def _check_vlarb(
    entry: ConfLine, data_vls: int | None, cap: int | None, cap_name: str, out: Findings
) -> None:
    """A ``qos_*_vlarb_low/high`` value: ``vl:weight`` entries OpenSM sends as written,
    data VLs, weights 0-255, at most 64 entries and the ports' *cap*."""
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
            add(
                line,
                f"{key}: entry {n} ({vl}:{weight}): VL {vl} is not a data VL; OpenSM"
                f" programs VL {vl % VL15} instead",
            )
            bad = True
        elif data_vls is not None and vl >= data_vls:
            add(
                line,
                f"{key}: entry {n} ({vl}:{weight}): VL {vl} is beyond the {data_vls} data"
                f" VLs; OpenSM masks it to VL {vl & _mask(data_vls)}",
            )
        if weight > 255:
            add(
                line,
                f"{key}: entry {n} ({vl}:{weight}): weights are 0-255 (64-byte credits);"
                f" OpenSM keeps {weight & 0xFF}",
            )
            bad = True
    if len(pairs) > MAX_VLARB_ENTRIES:
        add(line, f"{key}: {len(pairs)} entries; OpenSM reads the first {MAX_VLARB_ENTRIES}")
    if cap is not None and any(w > 0 for _, w in pairs[cap:]):
        add(
            line,
            f"{key}: {len(pairs)} entries, but the ports' {cap_name} is {cap}: OpenSM"
            f" sends only the first {cap}",
        )
    if key.endswith("_vlarb_low") and all(w == 0 for _, w in pairs):
        add(line, f"{key}: every weight is 0: no VL gets low-priority bandwidth", "warning")
    if not bad:
        pos = 0
        for n, (vl, weight) in enumerate(pairs[:MAX_VLARB_ENTRIES], start=1):
            got_vl, pos = _one(value, pos)
            got_weight, pos = _one(value, pos)
            if (got_vl % VL15, got_weight & 0xFF) != (vl, weight):
                add(
                    line,
                    f"{key}: OpenSM reads entry {n} as {got_vl % VL15}:{got_weight & 0xFF}"
                    f" where {vl}:{weight} is written (a leading 0 means octal; no blank may"
                    " come before ':' or ',')",
                )
                break


def _check_number(entry: ConfLine, top: int, beyond: str, out: Findings) -> None:
    """A numeric value 0..*top* (-1: unset); *beyond* says what OpenSM does above it."""
    key, value, line = entry.key, entry.value, entry.line
    add = out.add
    if not re.fullmatch(rf"-?{_NUM}", value):
        add(line, f"{key} {value!r} is not a number: OpenSM reads {strtoul(value)[0]}")
    elif _as_written(value.lstrip("-")) > top:
        add(line, f"{key} {value}: expected 0-{top}; {beyond}")
    elif value.startswith("-") and value != "-1":
        add(line, f"{key} {value}: a negative value means unset", "warning")
