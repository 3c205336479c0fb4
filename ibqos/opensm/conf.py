"""opensm.conf: the QoS keys ibqos owns, rendered into the admin's own file.

ibqos owns only the keys it manages (docs/design.md §6.2): ``qos`` and, for each port type it
manages, ``qos_<type>_sl2vl``, ``qos_<type>_vlarb_high``, ``qos_<type>_vlarb_low`` and
``qos_<type>_high_limit`` (on NVIDIA's OpenSM ``sw2sw`` joins ``swe``:
:func:`ibqos.opensm.flavour.managed_types`).  :func:`render_conf` removes the
admin's lines for those keys and writes them once, in a block between two marker comments,
so an admin sees who owns them.  Every other line of the admin's file (comments, order,
other options such as ``qos_max_vls``, ``qos_policy_file`` or ``routing_engine``) stays byte
for byte, trailing blanks and CRLF line ends included.

The block goes where the previous ibqos block was, else where the first managed key was,
else at the end; rendering the result again with the same values gives the same bytes.
A managed key's line is removed whole, with any comment on it.

Fallback (``qos_build_config`` in osm_qos.c): OpenSM reads each field from
``qos_<type>_X``, then from the generic ``qos_X``, then its built-in default.  An admin's
generic line such as ``qos_sl2vl`` is not ibqos's and is kept: it still applies to the port
types ibqos does not manage (e.g. routers), and to none of those it does.

When the routing engine owns SLs (lash, dfsssp, torus-2QoS, nue; docs/design.md §6.4) the plan has
no tables: ibqos then owns only ``qos TRUE``, the block says why, and the admin's (or
OpenSM's default) SL2VL and VLArb stay in force.

:func:`strip_conf` is the reverse, for ``ibqos restore``: it takes ibqos's block out of
the file as it is now and puts back, where the block was, the admin's lines for the keys
ibqos took over (from the copy ibqos first found); every other line stays.

This module also reads opensm.conf the way OpenSM does (``osm_subn_parse_conf_file`` and
``clean_val`` in osm_subnet.c), for values read back and for :mod:`ibqos.opensm.check`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ibqos.config.lanes import MAX_VLARB_ENTRIES, NUM_SLS, VL15, Entry
from ibqos.errors import RenderError
from ibqos.plan.planner import Tables

__all__ = [
    "BEGIN_MARK",
    "EMPTY_VLARB",
    "END_MARK",
    "FIELDS",
    "PORT_TYPES",
    "ConfLine",
    "conf_lines",
    "find_block",
    "format_sl2vl",
    "format_vlarb",
    "managed_keys",
    "managed_values",
    "marker_problem",
    "parse_conf",
    "render_conf",
    "routing_engine",
    "split_lines",
    "strip_conf",
    "strtoul",
]

#: OpenSM's QoS port types: CA ports, switch external ports, switch-to-switch ports (NVIDIA's
#: OpenSM only, :mod:`ibqos.opensm.flavour`), enhanced switch port 0, routers.
PORT_TYPES = ("ca", "swe", "sw2sw", "sw0", "rtr")
#: The per-type fields ibqos manages, in the order the block lists them.
FIELDS = ("sl2vl", "vlarb_high", "vlarb_low", "high_limit")
#: An explicitly empty VLArb table: one entry of weight 0, which arbitration skips.  An
#: absent key would fall back to OpenSM's default high table ``0:4,1:0,...`` (docs/design.md
#: §6.2), which gives VL 0 high priority.
EMPTY_VLARB = "0:0"
BEGIN_MARK = "# BEGIN ibqos managed keys"
END_MARK = "# END ibqos managed keys"
_BEGIN_LINE = f"{BEGIN_MARK}: ibqos rewrites them on every plan change; edit outside the block\n"
_END_LINE = f"{END_MARK}\n"
_NO_TABLES_NOTE = (
    "# no qos_<type>_sl2vl/vlarb/high_limit keys: the routing engine owns SLs"
    " (docs/design.md §6.4)\n"
    "# or no port type is managed; OpenSM uses the admin's or its default tables\n"
)
_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_KEY_DELIMS = " \t\n"  # strtok_r delimiters of osm_subn_parse_conf_file
_HIGH_LIMIT_MAX = 255  # VLHighLimit is one byte (4 KiB units; 255 = unlimited)
_MAX_WEIGHT = 255


# -- rendering ------------------------------------------------------------------------------


def managed_keys(port_types: Iterable[str]) -> tuple[str, ...]:
    """Every key ibqos owns for *port_types*: ``qos`` and the per-type fields.

    Raises:
        RenderError: a port type is not one of :data:`PORT_TYPES`.
    """
    types = set(port_types)
    unknown = sorted(types - set(PORT_TYPES))
    if unknown:
        raise RenderError(f"port types {unknown}: expected some of {', '.join(PORT_TYPES)}")
    return ("qos", *(f"qos_{t}_{f}" for t in PORT_TYPES if t in types for f in FIELDS))


def format_sl2vl(sl_to_vl: Sequence[int]) -> str:
    """``qos_*_sl2vl`` text: the VL of SL 0..15, comma-separated, decimal.

    Raises:
        RenderError: not 16 values, or a VL outside 0-15.
    """
    if len(sl_to_vl) != NUM_SLS or not all(0 <= vl <= VL15 for vl in sl_to_vl):
        raise RenderError(f"sl2vl: expected 16 VLs 0-15, got {list(sl_to_vl)}")
    return ",".join(str(vl) for vl in sl_to_vl)


def format_vlarb(entries: Sequence[Entry]) -> str:
    """``qos_*_vlarb_*`` text: ``vl:weight`` entries (weights in 64-byte credits), or
    :data:`EMPTY_VLARB` for no entry.

    Raises:
        RenderError: more than 64 entries, a VL outside 0-14 (OpenSM turns 15 into 0) or a
            weight outside 0-255.
    """
    if len(entries) > MAX_VLARB_ENTRIES:
        raise RenderError(f"vlarb: {len(entries)} entries, OpenSM reads {MAX_VLARB_ENTRIES}")
    for vl, weight in entries:
        if not (0 <= vl < VL15 and 0 <= weight <= _MAX_WEIGHT):
            raise RenderError(f"vlarb: entry {vl}:{weight} needs a VL 0-14 and a weight 0-255")
    return ",".join(f"{vl}:{weight}" for vl, weight in entries) or EMPTY_VLARB


def managed_values(tables: Tables | None, port_types: Sequence[str]) -> dict[str, str]:
    """The value of every key ibqos manages, in block order.

    Args:
        tables: the plan's SL2VL and VLArb; None when the routing engine owns SLs, and then
            only ``qos TRUE`` is managed.
        port_types: the port types whose ``qos_<type>_*`` keys ibqos manages (some of
            :data:`PORT_TYPES`); every one gets the same tables.

    Raises:
        RenderError: an unknown port type, or tables OpenSM would misread.
    """
    keys = managed_keys(port_types)
    values = {"qos": "TRUE"}
    if tables is None:
        return values
    if not 0 <= tables.high_limit <= _HIGH_LIMIT_MAX:
        raise RenderError(f"high_limit: expected 0-255, got {tables.high_limit}")
    field_values = {
        "sl2vl": format_sl2vl(tables.sl_to_vl),
        "vlarb_high": format_vlarb(tables.vlarb_high),
        "vlarb_low": format_vlarb(tables.vlarb_low),
        "high_limit": str(tables.high_limit),
    }
    for key in keys[1:]:
        values[key] = field_values[key.split("_", 2)[2]]
    return values


def render_conf(admin_text: str, values: Mapping[str, str], *, source: str = "opensm.conf") -> str:
    """The admin's opensm.conf with ibqos's block of *values* (see the module docstring).

    Args:
        admin_text: the file as it is now ("" when there is none).
        values: key -> value of every managed key (:func:`managed_values`).
        source: the file's name, for messages.

    Returns:
        The new text (its last line keeps a missing newline unless the block follows it).

    Raises:
        RenderError: the file's ibqos markers do not delimit one block (:func:`find_block`),
            or a value holds a line break or ``#``.
    """
    for key, value in values.items():
        if any(c in key + value for c in "\n\r#") or not key or any(c in key for c in " \t"):
            raise RenderError(f"{source}: cannot write {key!r} {value!r} on one line")
    lines = split_lines(admin_text)
    block = find_block(lines, BEGIN_MARK, END_MARK, source)
    out: list[str] = []
    at_block = at_key = None
    inside = set() if block is None else set(range(block[0], block[1] + 1))
    for i, line in enumerate(lines):
        if block is not None and i == block[0]:
            at_block = len(out)
        if i in inside:
            continue
        entry = _key_value(line)
        if entry is not None and entry[0] in values:
            if at_key is None:
                at_key = len(out)
            continue
        out.append(line)
    where = at_block if at_block is not None else at_key if at_key is not None else len(out)
    if where > 0 and not out[where - 1].endswith("\n"):
        out[where - 1] += "\n"  # only the file's last line can lack one
    new = [_BEGIN_LINE, *(f"{key} {value}\n" for key, value in values.items())]
    if not any(key.startswith("qos_") for key in values):
        new.insert(1, _NO_TABLES_NOTE)
    out[where:where] = [*new, _END_LINE]
    return "".join(out)


def strip_conf(text: str, original: str | None = None, *, source: str = "opensm.conf") -> str:
    """opensm.conf *text* without ibqos's block: the admin's file as ibqos found it, with
    every change made since outside the block kept.

    Args:
        text: the file as it is now.
        original: the file as ibqos first found it (its ``.orig`` copy; None: unknown or
            there was none).  Its lines for the keys ibqos manages (``qos`` and every
            ``qos_<type>_*`` field of :data:`PORT_TYPES`), which :func:`render_conf` took
            out, go back where the block was, in their order, unless the admin has a line
            for that key outside the block now.
        source: the file's name, for messages.

    Returns:
        The text without the block (*text* itself when it has none: ibqos's lines are
        not there to take out).

    Raises:
        RenderError: the file's ibqos markers do not delimit one block (:func:`find_block`).
    """
    lines = split_lines(text)
    block = find_block(lines, BEGIN_MARK, END_MARK, source)
    if block is None:
        return text
    kept = lines[: block[0]] + lines[block[1] + 1 :]
    owned = set(managed_keys(PORT_TYPES))
    present = {entry[0] for entry in map(_key_value, kept) if entry is not None}
    # where each kept line is: (its text, which occurrence of that text) -> index
    at: dict[tuple[str, int], int] = {}
    counts: dict[str, int] = {}
    for i, line in enumerate(kept):
        counts[line] = counts.get(line, 0) + 1
        at[(line, counts[line])] = i
    # an original line goes back after the admin's line it followed in the original
    # (before kept line *i*), or where the block was when that line is gone or there was
    # none (render_conf put the block where the first of them was)
    back: dict[int, list[str]] = {}
    counts, after = {}, block[0]
    for line in split_lines(original or ""):
        entry = _key_value(line)
        if entry is not None and entry[0] in owned and entry[0] not in present:
            back.setdefault(after, []).append(line if line.endswith("\n") else line + "\n")
        else:
            counts[line] = counts.get(line, 0) + 1
            found = at.get((line, counts[line]))
            after = block[0] if found is None else found + 1
    out: list[str] = []
    for i, line in enumerate(kept):
        out += back.pop(i, [])
        out.append(line)
    for rest in back.values():  # after the last kept line
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out += rest
    return "".join(out)


def find_block(lines: Sequence[str], begin: str, end: str, what: str) -> tuple[int, int] | None:
    """Indices (first, last) of ibqos's marked block in *lines*, None without one.

    The markers are lines starting with *begin* and *end* (blanks before them allowed).
    The reader is strict because a block it cannot delimit exactly would leave ibqos's
    old lines in the file as if they were the admin's (an old job SL served beside the
    new one), or take the admin's lines for ibqos's and drop them.

    Raises:
        RenderError: an end marker without a begin marker before it, a begin marker
            without an end marker, a second block, a begin marker inside the block, or a
            comment that looks like a damaged marker; the message names *what* (the
            file), the line and what to fix.
    """
    block, problem = marker_problem(lines, begin, end)
    if problem is not None:
        raise RenderError(f"{what}:{problem[0]}: {problem[1]}")
    return block


def marker_problem(
    lines: Sequence[str], begin: str, end: str
) -> tuple[tuple[int, int] | None, tuple[int, str] | None]:
    """The block :func:`find_block` finds, and the first problem with the markers as
    (line number from 1, what is wrong and what to fix), None without one."""
    found: tuple[int, int] | None = None
    start: int | None = None
    for i, line in enumerate(lines):
        text = line.lstrip(" \t")
        if text.startswith(begin):
            if start is not None:
                return found, (i + 1, f"a second begin marker inside ibqos's block (begun on"
                               f" line {start + 1}); delete one of them")  # fmt: skip
            if found is not None:
                return found, (i + 1, f"a second ibqos block (the first is on lines"
                               f" {found[0] + 1}-{found[1] + 1}); delete one of them with its"
                               " markers")  # fmt: skip
            start = i
        elif text.startswith(end):
            if start is None:
                return found, (i + 1, f"ibqos's end marker ({end!r}) without its begin marker"
                               " before it, so the block cannot be told from the admin's"
                               f" lines; put {begin!r} back on the block's first line, or"
                               " delete the block's lines and this marker")  # fmt: skip
            found, start = (start, i), None
        elif _DAMAGED_MARK.match(text):
            return found, (i + 1, f"{line.strip()!r} looks like a damaged ibqos marker; write"
                           f" it as {begin!r} or {end!r}, or delete it")  # fmt: skip
    if start is not None:
        return found, (start + 1, f"ibqos's block has no end marker ({end!r}); put it back"
                       " after the block's last line, or delete the begin marker and the"
                       " block's lines")  # fmt: skip
    return found, None


#: a comment naming ibqos's markers that is not one of them (a marker edited by hand)
_DAMAGED_MARK = re.compile(r"#\s*(BEGIN|END)\W*ibqos\b", re.IGNORECASE)


def split_lines(text: str) -> list[str]:
    """*text* cut after each ``\\n`` (as ``fgets`` reads it), line ends kept; a last line
    without ``\\n`` is kept too.  ``\\r`` and other separators stay inside lines."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


# -- reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfLine:
    """One option line as OpenSM reads it.

    Attributes:
        line: line number, from 1.
        key: the first token.
        value: the rest, trimmed and with one pair of quotes removed (``clean_val``).
    """

    line: int
    key: str
    value: str


def conf_lines(text: str) -> list[ConfLine]:
    """Every option line of opensm.conf text, in file order (comments and blank lines
    dropped).  ``#`` starts a comment anywhere, even inside quotes, as in OpenSM."""
    out: list[ConfLine] = []
    for number, line in enumerate(split_lines(text), start=1):
        entry = _key_value(line)
        if entry is not None:
            out.append(ConfLine(number, *entry))
    return out


def parse_conf(text: str) -> dict[str, str]:
    """key -> value of opensm.conf text, as OpenSM reads it: the last line of a key wins,
    ``#`` comments are dropped, the value is trimmed and loses one pair of quotes.  The
    value ``(null)`` (OpenSM's "unset") is returned as it is."""
    return {entry.key: entry.value for entry in conf_lines(text)}


def routing_engine(values: Mapping[str, str]) -> str:
    """The ``routing_engine`` option of parsed opensm.conf values ("" when unset)."""
    value = values.get("routing_engine", "")
    return "" if value == "(null)" else value


def _key_value(line: str) -> tuple[str, str] | None:
    """(key, value) of one line as osm_subn_parse_conf_file reads it, None for none."""
    body = line.split("#", 1)[0]
    start = 0
    while start < len(body) and body[start] in _KEY_DELIMS:
        start += 1
    if start == len(body):
        return None
    stop = start
    while stop < len(body) and body[stop] not in _KEY_DELIMS:
        stop += 1
    # strtok_r ends the key at one delimiter; clean_val trims the rest
    return body[start:stop], _clean_val(body[stop + 1 :])


def _clean_val(value: str) -> str:
    """OpenSM's clean_val: trim C whitespace, then remove one pair of "..." or '...'."""
    value = value.strip(_C_SPACE)
    if value and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def strtoul(text: str, pos: int = 0) -> tuple[int, int]:
    """C ``strtoul(text + pos, &end, 0)``: (value, end index).

    Leading whitespace and a sign are skipped, ``0x`` means hex and a leading ``0`` octal
    (so ``010`` reads 8, and ``08`` reads 0 and stops at ``8``).  Without digits the value
    is 0 and *end* is *pos*.  Values are clamped to 64 bits (``strtoull``'s overflow).
    """
    i, n = pos, len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    negative = False
    if i < n and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    if text[i : i + 2] in ("0x", "0X") and text[i + 2 : i + 3] in _DIGITS_16:
        base, i = 16, i + 2
    else:
        base = 8 if text[i : i + 1] == "0" else 10
    digits = _DIGITS[base]
    start = i
    while i < n and text[i] in digits:
        i += 1
    if i == start:
        return 0, pos
    value = min(int(text[start:i], base), 2**64 - 1)
    return ((-value) % 2**64 if negative else value), i


_DIGITS_16 = frozenset("0123456789abcdefABCDEF")
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: _DIGITS_16}
