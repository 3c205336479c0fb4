"""The footing of the qos-policy.conf parser: a cursor over the lexer's tokens, the syntax
errors OpenSM stops at, and the values its grammar rules share (strings, numbers, ranges,
lists).

The value rules follow osm_qos_parser_y.y: a string value is every text token up to the
next keyword, joined and trimmed (``__parser_strip_white``), lists are comma-separated, a
range ``a-b`` is swapped when reversed, and numbers go through ``strtoull(..., 0)``, so a
leading 0 means octal.  Where OpenSM silently reads something other than what the admin
likely meant (blanks dropped from a name, text joined across lines, a name that runs into a
keyword, a port-guid range it walks one GUID at a time), the reader notes it.

Reference: docs/design.md §6.1, "qos-policy.conf",
"Lexer and parser details" and "Error reporting".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import TypeVar

from ibqos.opensm.conf import strtoul
from ibqos.opensm.policy.lexer import BARE_KEYWORDS, Token
from ibqos.opensm.policy.model import Issue, Range, Severity

__all__ = ["HUGE_RANGE", "MAX_STRING", "WIDE_RANGE", "Reader", "Stop"]

#: port-guid ranges are walked GUID by GUID at every parse (docs/design.md §6.1): measured with
#: OpenSM 3.3.23 in a lab, 2^24 GUIDs took 0.2 s per heavy sweep and 2^64 hung it
WIDE_RANGE, HUGE_RANGE = 1 << 20, 1 << 28
#: OSM_QOS_POLICY_MAX_LINE_LEN: the parser's buffer for one string value, in bytes
MAX_STRING = 10 * 1024
_DESCRIBE = {"TEXT": "text", "NUMBER": "number", "EOF": "end of file"}
_T = TypeVar("_T")


class Stop(Exception):
    """The parse stops here, as OpenSM's does (yyerror, then AC05 and AC03).

    It never leaves :func:`ibqos.opensm.policy.parse_policy`, which turns it into
    :attr:`Policy.error <ibqos.opensm.policy.model.Policy.error>`.
    """

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class Reader:
    """A cursor over the token list, with the value rules of the grammar.

    Attributes:
        toks: the tokens, ending with ``EOF``.
        i: the index of the next token.
        notes: what OpenSM silently misreads, found so far.
    """

    def __init__(self, tokens: list[Token]) -> None:
        self.toks = tokens
        self.i = 0
        self.notes: list[Issue] = []

    # -- tokens ---------------------------------------------------------------------------
    def peek(self) -> Token:
        """The next token (the lookahead)."""
        return self.toks[self.i]

    def take(self) -> Token:
        """The next token, consumed (``EOF`` stays)."""
        tok = self.toks[self.i]
        if tok.kind != "EOF":
            self.i += 1
        return tok

    def last(self) -> Token:
        """The token taken last (an error in a grammar action is reported there, or at
        the lookahead after a value of several tokens, as bison reads one)."""
        return self.toks[self.i - 1]

    def expect(self, kind: str, expected: str | None = None) -> Token:
        """The next token, consumed, when it is of *kind*; else a syntax error saying what
        was *expected*."""
        if self.peek().kind != kind:
            raise self.fail(expected or repr(kind))
        return self.take()

    def blocks(self, item: str, end: str, read: Callable[[Token], None]) -> None:
        """Each *item* block, read by *read* from its first token, then the *end* keyword;
        any other token is a syntax error."""
        while self.peek().kind == item:
            read(self.take())
        self.expect(end, f"'{item}' or '{end}'")

    def entries(self, end: str, keys: Collection[str], expected: str) -> Iterator[Token]:
        """The entry keywords of a block, each consumed, up to its *end* keyword (consumed
        too); any other token is a syntax error saying what was *expected*."""
        while True:
            key = self.peek()
            if key.kind == end:
                self.take()
                return
            if key.kind not in keys:
                raise self.fail(expected)
            yield self.take()

    def note(self, line: int, message: str, severity: Severity = "warning") -> None:
        """Record something OpenSM reads silently, but not as meant."""
        self.notes.append(Issue(line, message, severity))

    def fail(self, expected: str) -> Stop:
        """The syntax error at the lookahead (bison's "unexpected X, expecting Y"), with a
        hint at the likely cause."""
        tok = self.peek()
        what = _DESCRIBE.get(tok.kind, f"keyword {tok.kind!r}")
        if tok.kind in ("TEXT", "NUMBER"):
            what += f" {tok.text!r}"
        msg = f"syntax error: unexpected {what}, expected {expected}"
        hint = self._hint(tok)
        if hint:  # the hint says it all: drop the note single_string made of it
            said = f"runs into the keyword {tok.kind!r}"
            self.notes = [n for n in self.notes if not (n.line == tok.line and said in n.message)]
        return Stop(tok.line, msg + hint)

    def _hint(self, tok: Token) -> str:
        prev = self.toks[self.i - 1] if self.i else None
        nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
        glued = (prev is not None and not tok.gap and not tok.newline) or (
            nxt is not None and nxt.kind == "TEXT" and not nxt.gap and not nxt.newline
        )
        if tok.kind not in _DESCRIBE and not tok.kind.isupper() and glued:
            return (
                f" (a name containing the keyword {tok.text.strip()!r}: OpenSM's lexer reads it"
                " as the keyword; use [A-Za-z][A-Za-z0-9_]* names or quote them)"
            )
        if tok.kind == "TEXT" and tok.text == "\r":
            return " (a carriage return: the file has CRLF line ends; OpenSM reads '\\r' as text)"
        if tok.kind == "TEXT" and tok.text == "\ufeff":
            return " (a byte order mark: save the file without one)"
        if tok.kind == "TEXT" and tok.text == "#":
            return " (a comment on the last line needs a newline after it)"
        if tok.kind == "TEXT" and tok.text.isdigit():
            return (
                " (after name:, use:, source: and the like, the rest of the line is text:"
                " one entry per line)"
            )
        return ""

    # -- values ---------------------------------------------------------------------------
    def listed(self, read: Callable[[], _T]) -> list[_T]:
        """One value or more, as *read* reads each, separated by commas."""
        out = [read()]
        while self.peek().kind == "COMMA":
            self.take()
            out.append(read())
        return out

    def single_string(self, key: Token) -> str:
        """TEXT+ joined, blanks at the ends trimmed (``__parser_strip_white``)."""
        if self.peek().kind != "TEXT":
            raise self.fail(f"a value after {key.kind!r}")
        first = self.take()
        parts, shown = [first.text], [first.text]
        while self.peek().kind == "TEXT":
            tok = self.take()
            if tok.newline:
                self.note(
                    tok.line,
                    f"text {tok.text!r} is read as part of the {key.kind[:-1]} value on line"
                    f" {key.line} (OpenSM joins it)",
                    "error",
                )
            elif tok.gap:
                shown.append(" ")
            parts.append(tok.text)
            shown.append(tok.text)
        joined = "".join(parts)
        size = len(joined.encode("utf-8", "surrogateescape"))
        if size >= MAX_STRING:
            self.note(
                key.line,
                f"a {key.kind[:-1]} value of {size} bytes: OpenSM appends it to a"
                f" {MAX_STRING}-byte buffer without a bound (strcat in osm_qos_parser_y.y),"
                " which overruns it and corrupts or crashes OpenSM; keep values shorter",
                "error",
            )
        value = joined.strip(" \t\n\v\f\r")
        nxt = self.peek()
        if nxt.kind in BARE_KEYWORDS and not (nxt.gap or nxt.newline) and key.kind != "use:":
            self.note(
                nxt.line,
                f"{key.kind[:-1]} {value!r} runs into the keyword {nxt.kind!r}: OpenSM's lexer"
                " reads it as the keyword, not as part of the name; use"
                " [A-Za-z][A-Za-z0-9_]* names or quote them",
                "error",
            )
        if "".join(shown).strip() != value and key.kind != "use:":
            severity: Severity = "error" if key.kind == "port-name:" else "warning"
            self.note(
                key.line,
                f"unquoted blanks are dropped: OpenSM reads {''.join(shown).strip()!r} as"
                f" {value!r}; quote it",
                severity,
            )
        return value

    def string_list(self, key: Token) -> list[str]:
        """Comma-separated string values of *key*."""
        return self.listed(lambda: self.single_string(key))

    def number(self) -> int:
        """A number as ``strtoull(..., 0)`` reads it."""
        tok = self.expect("NUMBER", "a number")
        value, _ = strtoul(tok.text)
        if tok.text.isdigit() and int(tok.text) != value:
            self.note(
                tok.line, f"{tok.text} has a leading 0: OpenSM reads it as octal ({value})", "error"
            )
        return value

    def numbers(self) -> list[int]:
        """Comma-separated numbers."""
        return self.listed(self.number)

    def ranges(self, key: Token) -> list[Range]:
        """Comma-separated numbers and ``a-b`` ranges of *key*, as (low, high)."""
        return self.listed(lambda: self._range(key))

    def _range(self, key: Token) -> Range:
        lo = self.number()
        hi = lo
        if self.peek().kind == "DASH":
            self.take()
            hi = self.number()
        lo, hi = min(lo, hi), max(lo, hi)  # the parser swaps a reversed range
        if key.kind == "port-guid:" and hi - lo >= WIDE_RANGE:
            self.note(
                key.line,
                f"port-guid range 0x{lo:x}-0x{hi:x} spans {hi - lo + 1} GUIDs: OpenSM walks"
                " it one GUID at a time at every heavy sweep"
                + (", which stalls it for minutes or for good" if hi - lo >= HUGE_RANGE else "")
                + "; list exact GUIDs",
                "error" if hi - lo >= HUGE_RANGE else "warning",
            )
        return lo, hi

    def pairs(self) -> list[Range]:
        """Comma-separated ``a:b`` pairs (VLArb entries of qos-setup)."""
        return self.listed(self._pair)

    def _pair(self) -> Range:
        a = self.number()
        self.expect("DOTDOT", "':'")
        return a, self.number()
