"""The lexer of qos-policy.conf, a port of OpenSM's (osm_qos_parser_l.l).

flex takes the longest match at each place and the first rule on a tie; the rules below
keep flex's order.  Field keywords (``name:``, ``use:``, ``source:``, ...) set the lexer's
value states (its ``in_*`` flags): inside ``use:`` text every keyword is text, inside names
and group lists numbers and punctuation are text, and each line end or comment resets the
states.  Unquoted blanks outside ``use:`` text are dropped, so ``name: Job A`` names
``JobA``; a double-quoted string is one token.

Reference: docs/design.md §6.1, "qos-policy.conf",
"Lexer and parser details".
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["BARE_KEYWORDS", "FIELD_KINDS", "ULP_WORDS", "Token", "tokenize"]


class Token(NamedTuple):
    """One lexer token.

    Attributes:
        kind: ``TEXT``, ``NUMBER``, ``DASH``, ``DOTDOT``, ``COMMA``, ``ASTERISK``, ``EOF``, a
            keyword as written in lower case (``port-groups``, ``name:``, ``sdp,port-num``),
            or a node type (``CA``, ``SWITCH``, ``ROUTER``, ``SELF``, ``ALL``).
        text: the characters (a quoted string without its quotes).
        line, col: where it starts (from 1).
        gap: blanks were dropped right before it (outside ``use:`` text).
        newline: a line end (or comment) came between it and the previous token.
        quoted: a double-quoted string.
    """

    kind: str
    text: str
    line: int
    col: int
    gap: bool = False
    newline: bool = False
    quoted: bool = False


BARE_KEYWORDS = (  # section and block keywords, recognised anywhere outside use: text
    "qos-ulps", "end-qos-ulps", "port-groups", "end-port-groups", "port-group",
    "end-port-group", "qos-setup", "end-qos-setup", "vlarb-tables", "end-vlarb-tables",
    "vlarb-scope", "end-vlarb-scope", "sl2vl-tables", "end-sl2vl-tables", "sl2vl-scope",
    "end-sl2vl-scope", "qos-levels", "end-qos-levels", "qos-level", "end-qos-level",
    "qos-match-rules", "end-qos-match-rules", "qos-match-rule", "end-qos-match-rule",
)  # fmt: skip
_FIELDS = (  # keywords followed by ':', in the lexer's rule order
    "port-guid", "port-name", "partition", "node-type", "name", "use", "group", "vlarb-high",
    "vlarb-low", "vl-high-limit", "to", "from", "across-to", "across-from", "across",
    "sl2vl-table", "sl", "mtu-limit", "rate-limit", "packet-life", "path-bits", "qos-class",
    "source", "destination", "service-id", "pkey", "qos-level-name",
)  # fmt: skip
_NODE_TYPES = ("router", "ca", "switch", "self", "all")
_ULPS = (  # (ulp word, what follows it), in rule order; the word is case-insensitive
    ("default", ":"), ("any", "service-id"), ("any", "pkey"), ("any", "target-port-guid"),
    ("any", "source-port-guid"), ("any", "source-target-port-guid"), ("sdp", ":"),
    ("sdp", "port-num"), ("rds", ":"), ("rds", "port-num"), ("iser", ":"), ("iser", "port-num"),
    ("srp", "target-port-guid"), ("ipoib", ":"), ("ipoib", "pkey"),
)  # fmt: skip
# the flag a field keyword sets (START_* in the lexer); only these flags change lexing
_TEXT_FLAGS = frozenset(("description", "strings", "single"))
_STATE_OF = {
    "use:": "description",
    "port-name:": "strings",
    "group:": "strings",
    "across:": "strings",
    "across-to:": "strings",
    "across-from:": "strings",
    "source:": "strings",
    "destination:": "strings",
    "partition:": "single",
    "name:": "single",
    "qos-level-name:": "single",
    "node-type:": "node_type",
}


class _Rule(NamedTuple):
    pattern: re.Pattern[str]
    action: str  # how the match becomes a token (see tokenize)
    kind: str
    first: str  # characters a match can start with; "" = any


def _rules() -> list[_Rule]:
    rules = [
        _Rule(re.compile(r"#.*\n"), "reset", "", "#"),
        _Rule(re.compile(r"[ \t]+\n"), "reset", "", " \t"),
        _Rule(re.compile(r"[ \t]+"), "white", "", " \t"),
        _Rule(re.compile(r"\n"), "reset", "", "\n"),
    ]
    rules += [_Rule(re.compile(re.escape(w)), "keyword", w, w[0]) for w in BARE_KEYWORDS]
    rules += [
        _Rule(re.compile(re.escape(w) + r"[ \t]*:[ \t]*"), "keyword", w + ":", w[0])
        for w in _FIELDS
    ]
    rules += [
        _Rule(re.compile(f"(?i:{w})"), "node_type", w.upper(), w[0] + w[0].upper())
        for w in _NODE_TYPES
    ]
    for word, rest in _ULPS:
        tail = r"[ \t]*:[ \t]*" if rest == ":" else r"[ \t]*,[ \t]*" + re.escape(rest)
        kind = f"{word}:" if rest == ":" else f"{word},{rest}"
        rules.append(
            _Rule(re.compile(f"(?i:{word})" + tail), "keyword", kind, word[0] + word[0].upper())
        )
    rules += [
        _Rule(re.compile(r"0[xX][0-9a-fA-F]+"), "number", "NUMBER", "0"),
        _Rule(re.compile(r"[0-9]+"), "number", "NUMBER", string.digits),
        _Rule(re.compile(r"-"), "punct", "DASH", "-"),
        _Rule(re.compile(r":"), "punct", "DOTDOT", ":"),
        _Rule(re.compile(r","), "comma", "COMMA", ","),
        _Rule(re.compile(r"\*"), "punct", "ASTERISK", "*"),
        _Rule(re.compile(r'"[^"]*"'), "quoted", "TEXT", '"'),
        _Rule(re.compile(r"."), "text", "TEXT", ""),
    ]
    return rules


_RULES = _rules()
#: the kinds of the field keywords (``name:``, ``sl:``, ...), as tokens carry them
FIELD_KINDS = frozenset(w + ":" for w in _FIELDS)
#: the words a qos-ulps line starts with (``default``, ``any``, ``sdp``, ...)
ULP_WORDS = frozenset(w for w, _ in _ULPS)
_BY_FIRST: dict[str, list[_Rule]] = {}
for _r in _RULES:
    for _c in _r.first:
        _BY_FIRST.setdefault(_c, []).append(_r)
_ANY_RULES = [r for r in _RULES if not r.first]


def tokenize(text: str) -> Iterator[Token]:
    """OpenSM's tokens of *text*: the longest match at each place, the first rule on a
    tie; keywords inside ``use:`` text, numbers and punctuation inside names are text; the
    value state ends at each line end or comment.  Ends with an ``EOF`` token."""
    pos, line, col = 0, 1, 1
    flags: set[str] = set()  # the lexer's in_* flags: set by field keywords, reset per line
    gap = newline = False
    while pos < len(text):
        best: re.Match[str] | None = None
        best_rule = _ANY_RULES[0]
        for rule in (*_BY_FIRST.get(text[pos], ()), *_ANY_RULES):
            m = rule.pattern.match(text, pos)
            if m is not None and (best is None or len(m.group()) > len(best.group())):
                best, best_rule = m, rule
        if best is None:  # only '.' could match, and it does not match '\n'
            raise AssertionError("unreachable: '\\n' has a rule")
        word = best.group()
        start_line, start_col = line, col
        nl = word.count("\n")
        line, col = (line + nl, len(word) - word.rfind("\n")) if nl else (line, col + len(word))
        pos = best.end()
        action = best_rule.action
        kind = best_rule.kind
        if action == "reset":
            flags.clear()
            newline, gap = True, False
            continue
        description = "description" in flags
        if action == "white":
            if not description:
                gap = True
                continue
            kind = "TEXT"
        elif action == "keyword":
            if description:
                kind = "TEXT"
            elif kind in _STATE_OF:
                flags.add(_STATE_OF[kind])
        elif (
            (action == "node_type" and "node_type" not in flags)
            or (action in ("number", "punct") and flags & _TEXT_FLAGS)
            or (action == "comma" and description)
        ):
            kind = "TEXT"
        quoted = action == "quoted"
        yield Token(kind, word[1:-1] if quoted else word, start_line, start_col, gap, newline,
                    quoted)  # fmt: skip
        gap = newline = False
    yield Token("EOF", "", line, col, gap, newline)
