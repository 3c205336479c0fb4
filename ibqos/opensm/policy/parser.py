"""The qos-policy.conf parser: OpenSM's grammar (osm_qos_parser_y.y), section by section,
including the checks its actions make.

Sections may repeat and come in any order (``qos_policy_entries``); OpenSM gathers the
port-groups, qos-levels, match rules and qos-ulps lines of every section into one list each,
in file order.  Like OpenSM the parse stops at the first syntax error, which then drops the
whole policy; :mod:`ibqos.opensm.check` adds the validation OpenSM does afterwards
(``osm_qos_policy_validate``) and the silent misreadings.  ``qos-setup`` is parsed and
checked, then ignored, as by OpenSM.

Reference: docs/design.md §6.1, "qos-policy.conf"
("Sections", "Port-group members", "qos-levels", "qos-match-rules", "qos-ulps" and
"Error reporting").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ibqos.config.lanes import NUM_SLS
from ibqos.opensm.conf import strtoul
from ibqos.opensm.policy.lexer import FIELD_KINDS, ULP_WORDS, Token, tokenize
from ibqos.opensm.policy.model import (
    Issue,
    MatchRule,
    Policy,
    PortGroup,
    QosLevel,
    Range,
    Section,
    UlpRule,
)
from ibqos.opensm.policy.reader import Reader, Stop

__all__ = ["MTU_MAX", "MTU_MIN", "RATE_MAX", "RATE_MIN", "parse_policy"]

#: rate-limit bounds: IB_MIN_RATE..IB_MAX_RATE of ib_types.h in OpenSM 3.3.23 (22 = 600 Gb/s;
#: later versions accept 24); 3.3.23 rejects 24 and drops the whole policy [verified]
RATE_MIN, RATE_MAX = 2, 22
MTU_MIN, MTU_MAX = 1, 5
_GROUP_KEYS = frozenset(
    ("name:", "use:", "port-guid:", "port-name:", "pkey:", "partition:", "node-type:")
)
_LEVEL_KEYS = frozenset(
    ("name:", "use:", "sl:", "mtu-limit:", "rate-limit:", "packet-life:", "path-bits:", "pkey:")
)
_RULE_KEYS = frozenset(
    ("use:", "qos-level-name:", "source:", "destination:", "qos-class:", "service-id:", "pkey:")
)
_NODE_TYPES = ("CA", "SWITCH", "ROUTER", "SELF", "ALL")
_SCOPE_KEYS = {
    "vlarb": ("group:", "across:", "vlarb-high:", "vlarb-low:", "vl-high-limit:"),
    "sl2vl": ("group:", "across:", "across-from:", "across-to:", "from:", "to:", "sl2vl-table:"),
}
_SCOPE_GROUPS = ("group:", "across:", "across-from:", "across-to:")


def parse_policy(text: str, source: str = "qos-policy.conf") -> Policy:
    """Parse qos-policy.conf text as OpenSM does (see the module docstring).

    Never raises for bad input: a syntax error is :attr:`Policy.error`.
    """
    parser = _Parser(list(tokenize(text)))
    error = None
    try:
        parser.head()
    except Stop as stop:
        error = Issue(stop.line, stop.message)
    st = parser.st
    return Policy(
        source=source,
        sections=tuple(st.sections),
        port_groups=tuple(st.groups),
        qos_levels=tuple(st.levels),
        match_rules=tuple(st.rules),
        ulp_rules=tuple(st.ulps),
        setup_line=st.setup_line,
        error=error,
        notes=tuple(parser.notes),
    )


@dataclass
class _State:
    """What the parse has read so far, in file order."""

    sections: list[Section] = field(default_factory=list)
    groups: list[PortGroup] = field(default_factory=list)
    levels: list[QosLevel] = field(default_factory=list)
    rules: list[MatchRule] = field(default_factory=list)
    ulps: list[UlpRule] = field(default_factory=list)
    setup_line: int | None = None


class _Parser(Reader):
    """Recursive descent over the token list; the grammar is LL(1) in practice."""

    def __init__(self, tokens: list[Token]) -> None:
        super().__init__(tokens)
        self.st = _State()

    def head(self) -> None:
        """The whole file: top-level sections up to the end."""
        sections = {
            "qos-ulps": self.qos_ulps,
            "port-groups": self.port_groups,
            "qos-setup": self.qos_setup,
            "qos-levels": self.qos_levels,
            "qos-match-rules": self.match_rules,
        }
        while self.peek().kind != "EOF":
            tok = self.peek()
            if tok.kind not in sections:
                raise self.fail("a section (port-groups, qos-levels, qos-match-rules, ...)")
            self.take()
            self.st.sections.append(Section(tok.kind, tok.line))
            sections[tok.kind]()

    def one_string(self, key: Token, strings: dict[str, str], what: str) -> None:
        """The string value of *key* into *strings*; a second one in a *what* block stops
        the parse."""
        tag = key.kind[:-1]
        value = self.single_string(key)
        if tag in strings:
            raise Stop(self.peek().line, f"{what} has multiple '{tag}' tags")
        strings[tag] = value

    # -- port-groups ----------------------------------------------------------------------
    def port_groups(self) -> None:
        """A port-groups section after its keyword: one port-group at least (the grammar's
        ``port_groups_section``)."""
        if self.peek().kind != "port-group":
            raise self.fail("'port-group' (a port-groups section needs one at least)")
        self.blocks("port-group", "end-port-groups", self.port_group)

    def port_group(self, start: Token) -> None:
        """One port-group from *start*; it needs a name."""
        strings: dict[str, str] = {}
        guids: list[Range] = []
        pkeys: list[Range] = []
        port_names: list[str] = []
        partitions: list[str] = []
        node_types: list[str] = []
        expected = "a port-group entry (name:, port-guid:, ...) or 'end-port-group'"
        for key in self.entries("end-port-group", _GROUP_KEYS, expected):
            if key.kind in ("name:", "use:"):
                self.one_string(key, strings, "port-group")
            elif key.kind == "port-guid:":
                guids += self.ranges(key)
            elif key.kind == "pkey:":
                pkeys += self.ranges(key)
            elif key.kind == "port-name:":
                for item in self.string_list(key):
                    _check_port_name(item, self.peek().line)
                    port_names.append(item)
            elif key.kind == "partition:":
                partitions += self.string_list(key)
            else:
                node_types += self.listed(self.node_type)
        if "name" not in strings:
            raise Stop(
                self.last().line, "port-group validation failed - no port group name specified"
            )
        self.st.groups.append(
            PortGroup(
                strings["name"], start.line, strings.get("use", ""), tuple(guids),
                tuple(port_names), tuple(partitions), tuple(pkeys), tuple(node_types),
            )
        )  # fmt: skip

    def node_type(self) -> str:
        """One ``node-type:`` value."""
        if self.peek().kind not in _NODE_TYPES:
            raise self.fail("a node type (CA, SWITCH, ROUTER, SELF, ALL)")
        return self.take().kind

    # -- qos-levels -----------------------------------------------------------------------
    def qos_levels(self) -> None:
        """A qos-levels section after its keyword (it may be empty)."""
        self.blocks("qos-level", "end-qos-levels", self.qos_level)

    def qos_level(self, start: Token) -> None:
        """One qos-level from *start*; it needs a name and an SL, and OpenSM's bounds on
        the MTU and rate limits."""
        strings: dict[str, str] = {}
        nums: dict[str, int] = {}
        lists: dict[str, list[Range]] = {}
        expected = "a qos-level entry (name:, sl:, ...) or 'end-qos-level'"
        for key in self.entries("end-qos-level", _LEVEL_KEYS, expected):
            tag = key.kind[:-1]
            if key.kind in ("name:", "use:"):
                self.one_string(key, strings, "qos-level")
            elif key.kind in ("sl:", "mtu-limit:", "rate-limit:", "packet-life:"):
                value_n = self.number()
                if tag in nums:
                    raise Stop(key.line, f"'qos-level' has multiple '{tag}' tags")
                bounds = {"mtu-limit": (MTU_MIN, MTU_MAX), "rate-limit": (RATE_MIN, RATE_MAX)}
                lo, hi = bounds.get(tag, (0, 2**64))
                if not lo <= value_n <= hi:
                    raise Stop(
                        key.line, f"{tag.replace('-', ' ')} is out of range, value: {value_n}"
                    )
                nums[tag] = value_n
            else:
                lists.setdefault(tag, []).extend(self.ranges(key))
        if "sl" not in nums:
            raise Stop(self.last().line, "qos-level validation failed - no 'sl' specified")
        if "name" not in strings:
            raise Stop(self.last().line, "qos-level validation failed - no 'name' specified")
        self.st.levels.append(
            QosLevel(
                strings["name"], start.line, nums["sl"], strings.get("use", ""),
                nums.get("mtu-limit"), nums.get("rate-limit"), nums.get("packet-life"),
                tuple(lists.get("path-bits", ())), tuple(lists.get("pkey", ())),
            )
        )  # fmt: skip

    # -- qos-match-rules ------------------------------------------------------------------
    def match_rules(self) -> None:
        """A qos-match-rules section after its keyword (it may be empty)."""
        self.blocks("qos-match-rule", "end-qos-match-rules", self.match_rule)

    def match_rule(self, start: Token) -> None:
        """One qos-match-rule from *start*; it needs a qos-level-name."""
        strings: dict[str, str] = {}
        groups: dict[str, list[str]] = {}
        lists: dict[str, list[Range]] = {}
        expected = "a match rule entry (source:, qos-level-name:, ...)"
        for key in self.entries("end-qos-match-rule", _RULE_KEYS, expected):
            tag = key.kind[:-1]
            if key.kind in ("use:", "qos-level-name:"):
                self.one_string(key, strings, "qos-match-rule")
            elif key.kind in ("source:", "destination:"):
                groups.setdefault(tag, []).extend(self.string_list(key))
            else:
                lists.setdefault(tag, []).extend(self.ranges(key))
        if "qos-level-name" not in strings:
            raise Stop(
                self.last().line, "match-rule validation failed - no 'qos-level-name' specified"
            )
        self.st.rules.append(
            MatchRule(
                start.line, strings["qos-level-name"], strings.get("use", ""),
                tuple(groups.get("source", ())), tuple(groups.get("destination", ())),
                tuple(lists.get("qos-class", ())), tuple(lists.get("service-id", ())),
                tuple(lists.get("pkey", ())),
            )
        )  # fmt: skip

    # -- qos-ulps -------------------------------------------------------------------------
    def qos_ulps(self) -> None:
        """A qos-ulps section after its keyword: one line at least, each ``ULP ...: SL``."""
        first = True
        while True:
            tok = self.peek()
            if tok.kind == "end-qos-ulps" and not first:
                self.take()
                return
            word = tok.kind.split(",")[0].rstrip(":")
            if word not in ULP_WORDS or tok.kind in FIELD_KINDS:
                raise self.fail("a qos-ulps line (default:, sdp:, any, service-id ...: SL)")
            self.take()
            first = False
            ranges: list[Range] = []
            if tok.kind.endswith(":"):
                sl = self.ulp_sl(tok)
            else:
                ranges = self.ranges(tok)
                colon = self.expect("DOTDOT", "':' and the SL")
                if word in ("sdp", "rds", "iser") and any(hi > 0xFFFF for _, hi in ranges):
                    raise Stop(colon.line, "SDP port number out of range")
                sl = self.ulp_sl(tok)
            # ipoib's partitions are checked while parsing; that needs partitions.conf,
            # so ibqos.opensm.check does it
            self.st.ulps.append(UlpRule(tok.line, tok.kind.rstrip(":"), sl, tuple(ranges)))

    def ulp_sl(self, tok: Token) -> int:
        """The SL that ends the qos-ulps line *tok* starts (0-15)."""
        sl = self.number()
        if sl >= NUM_SLS:
            raise Stop(tok.line, "illegal SL value")
        return sl

    # -- qos-setup ------------------------------------------------------------------------
    def qos_setup(self) -> None:
        """A qos-setup section after its keyword: its vlarb-tables and sl2vl-tables."""
        start = self.last()
        if self.st.setup_line is None:
            self.st.setup_line = start.line
        while True:
            tok = self.peek()
            if tok.kind not in ("vlarb-tables", "sl2vl-tables", "end-qos-setup"):
                raise self.fail("'vlarb-tables', 'sl2vl-tables' or 'end-qos-setup'")
            self.take()
            if tok.kind == "end-qos-setup":
                return
            kind = tok.kind.split("-")[0]
            self.blocks(f"{kind}-scope", f"end-{kind}-tables", self.scope)

    def scope(self, start: Token) -> None:
        """A vlarb-scope or sl2vl-scope: parsed and checked, then ignored by OpenSM."""
        kind = start.kind.split("-")[0]
        seen: set[str] = set()
        expected = f"a {kind}-scope entry or 'end-{kind}-scope'"
        for key in self.entries(f"end-{kind}-scope", _SCOPE_KEYS[kind], expected):
            if key.kind in _SCOPE_GROUPS:
                self.string_list(key)
            elif key.kind in ("vlarb-high:", "vlarb-low:"):
                self.pairs()
            elif key.kind == "vl-high-limit:":
                self.number()
            elif key.kind in ("from:", "to:"):
                if self.peek().kind == "ASTERISK":
                    self.take()
                elif any(hi >= 128 for _, hi in self.ranges(key)):
                    raise Stop(self.peek().line, f"port number out of range '{key.kind[:-1]}' list")
            else:
                self.sl2vl_table(seen)
            seen.add(key.kind)
        if kind == "sl2vl" and "sl2vl-table:" not in seen:
            raise Stop(self.last().line, "sl2vl-scope validation failed - no sl2vl table specified")
        if not seen & set(_SCOPE_GROUPS):
            raise Stop(
                self.last().line, f"{kind}-scope validation failed - no port groups specified"
            )

    def sl2vl_table(self, seen: set[str]) -> None:
        """An ``sl2vl-table:`` value: one per scope, 16 VLs 0-15."""
        table = self.numbers()
        if "sl2vl-table:" in seen:
            raise Stop(self.peek().line, "sl2vl-scope has more than one sl2vl-table")
        if len(table) != NUM_SLS:
            raise Stop(self.peek().line, "wrong number of values in 'sl2vl-table' (should be 16)")
        if any(vl >= NUM_SLS for vl in table):
            raise Stop(self.peek().line, "wrong VL value in 'sl2vl-table' (should be 0 to 15)")


def _check_port_name(item: str, line: int) -> None:
    """port-name ``NodeDescription/P<num>``: split at the last '/', then 'P' or 'p' and a
    port number other than 0 (strtoul), else the parse fails."""
    slash = item.rfind("/")
    port = item[slash:] if slash >= 0 else ""
    if len(port) < 3 or port[1] not in "pP":
        raise Stop(line, f"'{item}' - illegal port name")
    if strtoul(port, 2)[0] == 0:
        raise Stop(line, f"'{item}' - illegal port number in port name")
