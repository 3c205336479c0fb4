"""Changes of a fabric between two reads of its topology: nodes and ports gone or added,
links whose peer, width, speed, LID, role or level changed.  The collection loop logs them
and sweeps the new set of ports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ibqos.fabric.model import Fabric, FabricPort, PortKey

ChangeKind = Literal["link", "peer", "lid", "role", "level"]


@dataclass(frozen=True)
class PortChange:
    """A port present in both fabrics whose link, peer, LID, role or level changed.

    ``old`` and ``new`` are printable values: ``4xNDR``, ``0x<guid>[port]``, a LID, ...
    """

    key: PortKey
    what: ChangeKind
    old: str
    new: str


@dataclass(frozen=True)
class FabricChange:
    """What changed between two fabrics, by node GUID and (node GUID, port).

    Ports are linked ports: a port whose cable was pulled (or whose far end went down) is
    "gone" even if its node stayed.  The ports of a node that is gone are gone too.
    """

    nodes_gone: tuple[int, ...] = ()
    nodes_added: tuple[int, ...] = ()
    ports_gone: tuple[PortKey, ...] = ()
    ports_added: tuple[PortKey, ...] = ()
    changed: tuple[PortChange, ...] = ()
    descs: Mapping[int, str] = field(default_factory=dict, compare=False, repr=False)

    def __bool__(self) -> bool:
        parts = (self.nodes_gone, self.nodes_added, self.ports_gone, self.ports_added)
        return any(parts) or bool(self.changed)

    def __str__(self) -> str:
        if not self:
            return "fabric unchanged"
        parts = [
            _count("node", "gone", [self._node(g) for g in self.nodes_gone]),
            _count("node", "added", [self._node(g) for g in self.nodes_added]),
            _count("port", "gone", [self._port(k) for k in self.ports_gone]),
            _count("port", "added", [self._port(k) for k in self.ports_added]),
            _count(
                "port",
                "changed",
                [f"{self._port(c.key)} {c.what} {c.old}->{c.new}" for c in self.changed],
            ),
        ]
        return "fabric changed: " + "; ".join(p for p in parts if p)

    def _node(self, guid: int) -> str:
        return self.descs.get(guid) or f"0x{guid:016x}"

    def _port(self, key: PortKey) -> str:
        return f"{self._node(key[0])}[{key[1]}]"


def _count(noun: str, verb: str, items: Sequence[str], shown: int = 3) -> str:
    if not items:
        return ""
    more = f", +{len(items) - shown} more" if len(items) > shown else ""
    plural = "s" if len(items) > 1 else ""
    return f"{len(items)} {noun}{plural} {verb} ({', '.join(items[:shown])}{more})"


def diff_fabrics(old: Fabric, new: Fabric) -> FabricChange:
    """What changed from *old* to *new*: nodes and linked ports gone or added, and link
    type (width/speed), peer, LID, role and level changes of the ports in both."""
    old_nodes = _node_guids(old)
    new_nodes = _node_guids(new)
    changed = [
        change
        for key in sorted(old.ports.keys() & new.ports.keys())
        for change in _port_changes(key, old.ports[key], new.ports[key])
    ]
    return FabricChange(
        nodes_gone=tuple(sorted(old_nodes.keys() - new_nodes.keys())),
        nodes_added=tuple(sorted(new_nodes.keys() - old_nodes.keys())),
        ports_gone=tuple(sorted(old.ports.keys() - new.ports.keys())),
        ports_added=tuple(sorted(new.ports.keys() - old.ports.keys())),
        changed=tuple(changed),
        descs={**old_nodes, **new_nodes},
    )


def _node_guids(fabric: Fabric) -> dict[int, str]:
    return {n.guid: n.desc for n in fabric.topo.nodes.values() if n.guid is not None}


def _port_changes(key: PortKey, a: FabricPort, b: FabricPort) -> Iterable[PortChange]:
    values: list[tuple[ChangeKind, str, str]] = [
        ("link", a.link_type, b.link_type),
        ("peer", _peer(a), _peer(b)),
        ("lid", str(a.lid), str(b.lid)),
        ("role", a.role, b.role),
        ("level", str(a.level), str(b.level)),
    ]
    for what, old, new in values:
        if old != new:
            yield PortChange(key, what, old, new)


def _peer(fp: FabricPort) -> str:
    node = fp.peer.node if fp.peer_guid is None else f"0x{fp.peer_guid:016x}"
    return f"{node}[{fp.peer.num}]"
