"""The partitions OpenSM builds from partitions.conf, as far as the file tells.

qos-policy.conf refers to partitions in four places, and OpenSM treats each differently
(``osm_qos_parser_y.y`` and ``osm_qos_policy.c`` of OpenSM 3.3.23; verified in an ibsim lab
by ``tests/integration/test_policy_traps_lab.py``):

- ``ipoib : SL`` and ``ipoib, pkey P : SL`` (qos-ulps): the partition must exist and have
  two full members at least, checked *while parsing*; otherwise a syntax error (ERR AC05,
  AC03) and OpenSM drops the whole policy;
- ``pkey:`` in a qos-match-rule, and ``any, pkey P : SL``: a P_Key no partition has is
  logged (ERR AC14) and the rule is kept;
- ``pkey:`` and ``partition:`` in a port-group: an unknown one silently adds no port.

What OpenSM has (``osm_prtn_make_partitions``, ``osm_prtn_config.c``): the ``Default``
partition (P_Key 0x7fff) always; without a partitions.conf every port is a full member of
it, with one only the SM port is, plus what the file lists for ``Default``.  A partition
without a P_Key gets the next free one from 1; a partition without members is removed; a
file OpenSM cannot parse is thrown away whole (it falls back to "no file").  P_Keys are
compared without the membership bit (bit 15).

This reader follows that closely enough to tell which P_Keys and partition names exist
and, where the file lists ports one by one, how many full members a partition has.  Group
members (``ALL``, ``ALL_CAS``, ...) make the count unknown; so do ports that may be absent
from the fabric (OpenSM counts only ports it found), which is why the count is an upper
bound when it is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ibqos.opensm.conf import strtoul

__all__ = [
    "DEFAULT_PARTITIONS_FILE",
    "DEFAULT_PKEY",
    "Partitions",
    "parse_partitions",
    "read_partitions",
]

#: OpenSM's default partition file (OSM_DEFAULT_PARTITION_CONFIG_FILE)
DEFAULT_PARTITIONS_FILE = Path("/etc/opensm/partitions.conf")
#: the Default partition's P_Key without the membership bit
DEFAULT_PKEY = 0x7FFF
_PKEY_MASK = 0x7FFF
_GROUP_MEMBERS = ("ALL", "ALL_CAS", "ALL_SWITCHES", "ALL_ROUTERS")


@dataclass(frozen=True)
class Partitions:
    """The partitions OpenSM has, by P_Key (bit 15 clear).

    Attributes:
        source: where they come from, for messages (a file, or "no partitions.conf").
        full: P_Key -> full members: a set of port names (``SELF`` or a GUID), or None
            when the file adds a group (``ALL=full``, ...) and the count depends on the
            fabric.
        names: partition names (OpenSM matches ``partition:`` with ``strncmp``: case
            counts).
    """

    source: str
    full: Mapping[int, frozenset[str] | None] = field(default_factory=dict)
    names: frozenset[str] = frozenset()

    @classmethod
    def without_file(cls, source: str = "no partitions.conf") -> Partitions:
        """OpenSM without a partition file: only Default, every port a full member."""
        return cls(source, {DEFAULT_PKEY: None}, frozenset({"Default"}))

    def has(self, pkey: int) -> bool:
        """Whether a partition has *pkey* (bit 15 ignored)."""
        return (pkey & _PKEY_MASK) in self.full

    def full_members(self, pkey: int) -> int | None:
        """How many full members the file gives *pkey* at most; None when it depends on
        the fabric (or the partition does not exist)."""
        members = self.full.get(pkey & _PKEY_MASK)
        return None if members is None else len(members)


def read_partitions(path: Path | str) -> Partitions | None:
    """The partitions OpenSM builds from the file at *path*: :meth:`Partitions.without_file`
    when there is none (as OpenSM), None when it cannot be read or parsed here (unknown)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Partitions.without_file(f"no {path}")
    except OSError:
        return None
    return parse_partitions(text, str(path))


def parse_partitions(text: str, source: str) -> Partitions | None:
    """The partitions of partitions.conf *text* (see the module docstring); None when a
    statement is beyond this reader (OpenSM may read it, or throw the file away)."""
    full: dict[int, set[str] | None] = {DEFAULT_PKEY: {"SELF"}}
    members: dict[int, bool] = {DEFAULT_PKEY: True}  # Default has the SM port at least
    names = {"Default": DEFAULT_PKEY}
    counter = 0
    body = "".join(line.split("#", 1)[0] + "\n" for line in text.split("\n"))
    for statement in body.split(";"):
        if not statement.strip():
            continue
        head, colon, tail = statement.partition(":")
        if not colon:
            return None  # "no partition definition found": OpenSM drops the file
        name, _, pkey_text = head.split(",")[0].partition("=")
        name, pkey_text = name.strip(), pkey_text.strip()
        if not pkey_text and name[:1].isdigit():
            name, pkey_text = "", name
        defmember = "limited"
        for flag in head.split(",")[1:]:
            key, _, value = flag.partition("=")
            if key.strip() == "defmember":
                defmember = value.strip()
        if pkey_text:
            number, end = strtoul(pkey_text)
            if end != len(pkey_text) or not number & _PKEY_MASK:
                return None
            pkey = number & _PKEY_MASK
        elif name in names:
            pkey = names[name]
        else:  # generate_pkey: the next free P_Key from 1
            counter += 1
            while counter in full:
                counter += 1
            pkey = counter
        names.setdefault(name, pkey)
        full.setdefault(pkey, set())
        members.setdefault(pkey, False)
        for item in tail.split(","):
            member, _, flag = item.strip().partition("=")
            member, flag = member.strip(), flag.strip() or defmember
            if member == "mgid":
                break  # a multicast group definition: the rest of the statement is its
            if not member or "NONE".startswith(member):
                continue
            members[pkey] = True
            if not ("full".startswith(flag) or "both".startswith(flag)):
                continue
            got = full[pkey]
            if any(group.startswith(member) for group in _GROUP_MEMBERS):
                full[pkey] = None
            elif got is not None:
                got.add("SELF" if "SELF".startswith(member) else member.lower())
    kept = {pkey: f for pkey, f in full.items() if members[pkey]}  # empty ones are removed
    return Partitions(
        source,
        {pkey: None if f is None else frozenset(f) for pkey, f in kept.items()},
        frozenset(n for n, pkey in names.items() if pkey in kept and n),
    )
