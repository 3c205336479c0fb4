"""The fabric model: the fat tree ibqos measures, with a level and a role for every port.

A :class:`Fabric` is built from a :class:`~ibqos.fabric.topology.Topology` (ibnetdiscover text).
It gives every switch its fat-tree level (leaf = 1, upward), every linked port a role
("host", "down" or "up") and a capacity in bytes per second, the per-level uplink capacity
the method needs (``avail[j, l]`` in docs/design.md §3), and the PMA targets the collectors read.

Where the topology comes from (one function each):

- :func:`fabric_from_file`: a saved ``ibnetdiscover`` output (or ibsim net file).
- :func:`fabric_from_ibnetdiscover`: live, by running infiniband-diags' ``ibnetdiscover``,
  which discovers the subnet with directed-route SMPs from the local port.  It works on a
  real host and under ibsim's umad2sim (pass the lab's environment).
- :func:`fabric_from_lab`: a lab's own topology, without any MAD.

The SA (``saquery``) is *not* used.  It would save the SMP walk on a real fabric, but the
node, port and link records come back as multi-packet (RMPP) replies, and under ibsim's
umad2sim those are cut to their first segment (``saquery LFTR`` returns only 2 records),
so the lab could not test that path.

What is an error and what is a warning.  An admin with a slightly irregular fat tree must
still get a usable model, so only what makes levels meaningless raises
:class:`~ibqos.errors.TopologyError` (naming the source and the nodes):

- no switch at all;
- a switch connected to no leaf (or, with ``root_guids``, to no root switch);
- a link between two switches of the same level: traffic could then leave a subtree
  without crossing its uplinks, and per-level attribution would be wrong;
- ``root_guids`` of which none is a switch of the fabric.

Warnings (logged on ``ibqos.fabric.model`` and kept in ``Fabric.warnings``; the model is built):

- a CA with no linked port: left out (it has nothing to measure);
- a switch below the top level with no up link (all its uplinks are down: degraded, but
  routing goes around it);
- a node with no GUID, or a port with no LID (or LID 0, not yet assigned by the SM): kept
  for levels and capacities, but not a PMA target (a query needs both); without a GUID it
  is not in ``Fabric.ports`` nor in diffs either, as those are keyed by GUID;
- a root GUID that is not a switch of the fabric;
- CAs whose NodeDescription is a vendor default (``MT4129 ConnectX7 Mellanox Technologies``):
  one warning with their number and an example; they stay in the model, but name no host,
  so no job gets their ports (:func:`~ibqos.fabric.hostnames.is_vendor_default`).

SHARP aggregation nodes (the CA inside each NVIDIA Quantum switch; see
:mod:`ibqos.fabric.topology` for how they are recognised) are left out: they make no switch
a leaf, and neither their port nor the switch port cabled to it is in ``Fabric.ports`` or
among the PMA targets.  Their traffic stays inside the switch: it is neither a host's
injection nor uplink traffic.  ``Fabric.aggregation_nodes`` lists them.

Leaves are the switches with CA ports.  When CAs hang off higher switches (a storage node
on a spine), that switch would look like a leaf linked to other leaves; as with OpenSM's
ftree ``root_guid_file``, give the top switches' GUIDs as ``root_guids`` and levels are then
counted down from them (the lowest switches being leaves, with or without CAs).  A leaf
whose CAs are all down looks, without ``root_guids``, like a switch one level up.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import TopologyError
from ibqos.fabric.hostnames import is_vendor_default
from ibqos.fabric.portlist import parse_topology_text
from ibqos.fabric.targets import Role, Target
from ibqos.fabric.topology import Port, Topology
from ibqos.tools import run_tool

log = logging.getLogger(__name__)

#: Seconds ibnetdiscover may run before it is killed (``fabric.discover_timeout_s``).
DISCOVER_TIMEOUT_S = 60.0

#: A port by (node GUID, port number), as the PMA sees it; stable across sweeps.
PortKey = tuple[int, int]
_MAX_LOGGED = 10  # warnings logged one by one; the rest are counted


@dataclass(frozen=True)
class FabricPort:
    """One linked port of a switch or CA, with its place in the fat tree.

    Attributes:
        node_id: the ibnetdiscover node id (``S-<guid>``, ``H-<guid>``).
        node_guid: node GUID, None if the input gave none.
        node_desc: NodeDescription.
        num: port number.
        is_switch: the node is a switch.
        level: fat-tree level of the node: 0 for a CA, 1 for a leaf switch, then upward.
        role: "host" (a CA port), "down" (a switch port towards a CA or a lower level) or
            "up" (a switch port towards a higher level).
        lid: where PMA queries go: the CA port's LID or the switch's port-0 LID; None if
            unknown or 0 (not assigned yet).
        peer: the port at the other end of the cable.
        peer_guid: node GUID of the other end, None if unknown.
        width: lanes (1, 2, 4, 8 or 12).
        speed: lane speed name ("SDR" ... "NDR", "FDR10", "XDR").
        capacity_bytes_per_s: data capacity of each direction, bytes per second.
        port_guid: the port GUID (a CA or router port's own GUID, a switch's node GUID),
            as qos-policy.conf's ``port-guid:`` matches it; None if the input gave none.
    """

    node_id: str
    node_guid: int | None
    node_desc: str
    num: int
    is_switch: bool
    level: int
    role: Role
    lid: int | None
    peer: Port
    peer_guid: int | None
    width: int
    speed: str
    capacity_bytes_per_s: float
    port_guid: int | None = None

    @property
    def key(self) -> PortKey | None:
        """(node GUID, port), or None without a node GUID."""
        return None if self.node_guid is None else (self.node_guid, self.num)

    @property
    def link_type(self) -> str:
        """Width and speed as ibnetdiscover prints them, e.g. ``4xNDR``."""
        return f"{self.width}x{self.speed}"


class Fabric:
    """A fat tree: levels, port roles, capacities and PMA targets of one topology.

    Build it, then treat it as read-only.  See the module docstring for what raises and
    what only warns.

    Args:
        topo: the parsed topology (kept, not copied).
        source: name of the input, for messages.
        root_guids: node GUIDs of the top-level switches; when given, levels are counted
            down from them instead of up from the switches with CA ports.

    Attributes:
        topo: the topology.
        source: name of the input.
        levels: fat-tree level of every switch, by node id (leaf = 1).
        height: the top level (1 for a single switch).
        ports: every linked port of a switch or CA that has a node GUID, by (GUID, port),
            in topology order (aggregation nodes and the switch ports cabled to them left
            out).
        aggregation_nodes: node ids of the SHARP aggregation nodes, left out of the model.
        warnings: one line for each thing that was left out or looks degraded.
    """

    def __init__(
        self,
        topo: Topology,
        *,
        source: str = "topology",
        root_guids: Collection[int] | None = None,
    ) -> None:
        self.topo = topo
        self.source = source
        self.warnings: list[str] = []
        self.aggregation_nodes = [n.id for n in topo.aggregation_nodes()]
        self._internal = set(self.aggregation_nodes)
        if not topo.switches():
            raise TopologyError(f"{source}: not a fat tree: no switches")
        if root_guids is None:
            self.levels = self._levels_from_leaves()
        else:
            self.levels = self._levels_from_roots(root_guids)
        self.height = max(self.levels.values())
        self._check_same_level_links(hint=root_guids is None)
        self._all: list[FabricPort] = [
            fp for n in topo.nodes.values() for fp in self._ports_of(n.id)
        ]
        self.ports: dict[PortKey, FabricPort] = {
            fp.key: fp for fp in self._all if fp.key is not None
        }
        self._components: dict[int, dict[str, int]] = {}
        self._check_up_links()
        self._check_descriptions()
        self._targets = [t for fp in self._all if (t := self._target(fp)) is not None]
        self._log_warnings()

    # -- levels ---------------------------------------------------------------------
    def _levels_from_leaves(self) -> dict[str, int]:
        try:
            return self.topo.switch_levels()
        except TopologyError as err:
            raise TopologyError(
                f"{self.source}: not a fat tree: {err} (a leaf is a switch with CA ports)"
            ) from None

    def _levels_from_roots(self, root_guids: Collection[int]) -> dict[str, int]:
        """Levels counted down from the root switches: roots are the top level, and the
        switches farthest from every root are leaves (level 1)."""
        by_guid = {n.guid: n.id for n in self.topo.switches() if n.guid is not None}
        for guid in sorted(set(root_guids) - set(by_guid)):
            self._warn(f"root GUID 0x{guid:016x} is not a switch of this fabric")
        rank = {by_guid[g]: 0 for g in root_guids if g in by_guid}
        if not rank:
            raise TopologyError(f"{self.source}: none of the root GUIDs is a switch of the fabric")
        queue = deque(rank)
        while queue:
            sid = queue.popleft()
            for q in self._switch_peers(sid):
                if q not in rank:
                    rank[q] = rank[sid] + 1
                    queue.append(q)
        lost = [s.id for s in self.topo.switches() if s.id not in rank]
        if lost:
            raise TopologyError(
                f"{self.source}: not a fat tree: switch {self._name(lost[0])} "
                f"is connected to no root switch"
            )
        deepest = max(rank.values())
        return {sid: deepest - r + 1 for sid, r in rank.items()}

    def _check_same_level_links(self, hint: bool) -> None:
        same = [
            link
            for link in self.topo.links
            if link.a.node in self.levels
            and link.b.node in self.levels
            and self.levels[link.a.node] == self.levels[link.b.node]
        ]
        if not same:
            return
        a, b = same[0].a, same[0].b
        msg = (
            f"{self.source}: not a fat tree: switches {self._name(a.node)} port {a.num} and "
            f"{self._name(b.node)} port {b.num} are linked but both at level {self.levels[a.node]}"
        )
        if len(same) > 1:
            msg += f" (and {len(same) - 1} more such links)"
        if hint:
            msg += (
                "; leaves are the switches with CA ports: if CAs hang off higher switches,"
                " give the top switches' GUIDs as root GUIDs"
            )
        raise TopologyError(msg)

    def _check_up_links(self) -> None:
        with_up = {fp.node_id for fp in self._all if fp.role == "up"}
        for sid, level in self.levels.items():
            if level < self.height and sid not in with_up:
                self._warn(
                    f"switch {self._name(sid)} at level {level} has no up link "
                    f"(the top level is {self.height})"
                )

    def _check_descriptions(self) -> None:
        unnamed = [n for n in self.topo.cas() if is_vendor_default(n.desc)]
        if unnamed:
            self._warn(
                f"{len(unnamed)} CA(s) have a vendor-default NodeDescription, e.g. "
                f"{self._name(unnamed[0].id)}: they name no host, so no job gets their ports "
                f"(set the descriptions on the hosts, e.g. with rdma-ndd)"
            )

    # -- ports ----------------------------------------------------------------------
    def _ports_of(self, node_id: str) -> Iterable[FabricPort]:
        node = self.topo.nodes[node_id]
        if node_id in self._internal:
            return  # a switch's aggregation node: neither host nor fabric link
        linked = [
            p
            for p in self.topo.ports(node_id)
            if (peer := self.topo.peer(p)) is None or peer.node not in self._internal
        ]
        if not linked and node.kind != "switch":
            kind = "CA" if node.kind == "ca" else "router"
            self._warn(f"{kind} {self._name(node_id)} has no link: left out")
        for port in linked:
            yield self._port(port)

    def _port(self, port: Port) -> FabricPort:
        topo = self.topo
        node = topo.nodes[port.node]
        peer = topo.peer(port)
        link = topo.link_at(port)
        assert peer is not None and link is not None  # Topology.ports() yields linked ports
        is_switch = node.kind == "switch"
        lid = topo.lids.get(Port(node.id, 0) if is_switch else port)
        return FabricPort(
            node_id=node.id,
            node_guid=node.guid,
            node_desc=node.desc,
            num=port.num,
            is_switch=is_switch,
            level=self.levels.get(node.id, 0),
            role=self._role(port.node, peer.node),
            lid=lid or None,  # LID 0 is "not assigned yet"
            peer=peer,
            peer_guid=topo.nodes[peer.node].guid,
            width=link.width,
            speed=link.speed,
            capacity_bytes_per_s=link.rate_bytes_per_s,
            port_guid=topo.port_guid(port),
        )

    def _role(self, node_id: str, peer_id: str) -> Role:
        if node_id not in self.levels:
            return "host"  # a CA (or router) port
        if peer_id not in self.levels or self.levels[peer_id] < self.levels[node_id]:
            return "down"
        return "up"  # same-level links were refused above

    def _target(self, fp: FabricPort) -> Target | None:
        if fp.node_guid is None or fp.lid is None:
            missing = "GUID" if fp.node_guid is None else "LID"
            self._warn(f"{self._name(fp.node_id)} port {fp.num} has no {missing}: not a target")
            return None
        return Target(
            node_guid=fp.node_guid,
            node_desc=fp.node_desc,
            port=fp.num,
            lid=fp.lid,
            level=fp.level,
            role=fp.role,
            is_switch=fp.is_switch,
            capacity_bytes_per_s=fp.capacity_bytes_per_s,
        )

    # -- queries --------------------------------------------------------------------
    def port(self, node_guid: int, num: int) -> FabricPort:
        """The linked port *num* of the node with GUID *node_guid*.

        Raises:
            KeyError: no such linked port.
        """
        try:
            return self.ports[(node_guid, num)]
        except KeyError:
            raise KeyError(f"no linked port 0x{node_guid:016x}[{num}] in {self.source}") from None

    def level_of(self, node_id: str) -> int:
        """Fat-tree level of a node: 0 for a CA, the switch level otherwise."""
        return self.levels.get(node_id, 0)

    def targets(self) -> list[Target]:
        """One PMA target per linked port of every switch and CA, in topology order
        (ports without a known LID or node GUID are left out, with a warning)."""
        return list(self._targets)

    def uplinks(self, level: int) -> list[FabricPort]:
        """The ports that carry traffic up out of *level*: the CA ports for level 0, the
        up ports of the level-*level* switches for level >= 1 (none at the top level).

        Raises:
            ValueError: *level* is not 0..height.
        """
        self._check_level(level)
        if level == 0:
            return [fp for fp in self._all if fp.role == "host"]
        return [fp for fp in self._all if fp.role == "up" and fp.level == level]

    def uplink_capacity_bytes_per_s(self, level: int) -> float:
        """Total capacity of :meth:`uplinks` of *level*, bytes per second (one direction)."""
        return sum((fp.capacity_bytes_per_s for fp in self.uplinks(level)), 0.0)

    def components(self, level: int) -> dict[str, int]:
        """Level-*level* subtree id of every node at or below *level* (node id -> id, as
        ``Topology.components``), walked once per level and kept: the walk is the costly
        part of per-level tables (about 0.3 s per level for 80k ports)."""
        comp = self._components.get(level)
        if comp is None:
            comp = self._components[level] = self.topo.components(level, self.levels)
        return comp

    def subtree_uplink_capacity_bytes_per_s(self, level: int) -> dict[int, float]:
        """Uplink capacity of each level-*level* subtree, bytes per second.

        Keys are the subtree ids ``Topology.subtrees(level, fabric.levels)`` gives the
        CAs; level 0 subtrees are single CAs.  A subtree whose uplinks are all down has 0.
        """
        comp = self.components(level)
        totals = dict.fromkeys(comp.values(), 0.0)
        for fp in self.uplinks(level):
            totals[comp[fp.node_id]] += fp.capacity_bytes_per_s
        return totals

    def summary(self) -> str:
        """One line: levels, switches, CAs and ports, for logs."""
        roles = [fp.role for fp in self._all]
        internal = len(self.aggregation_nodes)
        return (
            f"{self.source}: {self.height} levels, {len(self.levels)} switches, "
            f"{len(self.topo.cas())} CAs, {roles.count('host')} host, "
            f"{roles.count('down')} down and {roles.count('up')} up ports"
            + (f", {internal} aggregation nodes left out" if internal else "")
        )

    # -- helpers --------------------------------------------------------------------
    def _check_level(self, level: int) -> None:
        if not 0 <= level <= self.height:
            raise ValueError(f"level {level}: {self.source} has levels 0..{self.height}")

    def _switch_peers(self, node_id: str) -> Iterable[str]:
        for port in self.topo.ports(node_id):
            peer = self.topo.peer(port)
            if peer is not None and self.topo.nodes[peer.node].kind == "switch":
                yield peer.node

    def _name(self, node_id: str) -> str:
        return f"{node_id} ({self.topo.nodes[node_id].desc!r})"

    def _warn(self, msg: str) -> None:
        self.warnings.append(f"{self.source}: {msg}")

    def _log_warnings(self) -> None:
        # Logged once, when the fabric is built, and capped: a fabric where OpenSM has
        # not assigned LIDs yet would otherwise log one line per port.
        for msg in self.warnings[:_MAX_LOGGED]:
            log.warning("%s", msg)
        if len(self.warnings) > _MAX_LOGGED:
            log.warning(
                "%s: %d more fabric warnings", self.source, len(self.warnings) - _MAX_LOGGED
            )


# -- sources ------------------------------------------------------------------------


def fabric_from_text(
    text: str, source: str, *, root_guids: Collection[int] | None = None
) -> Fabric:
    """Build a fabric from ibnetdiscover text (or ``ibnetdiscover -p``, a ports list).

    Lines that cannot be read are skipped with a warning (``strict=False`` of
    :func:`~ibqos.fabric.topology.parse_ibnetdiscover`): a saved discovery with an ``ibwarn``
    line in it still gives a model.

    Raises:
        TopologyError: the text cannot be parsed or is not a fat tree (names *source*).
    """
    topo = parse_topology_text(text, source, strict=False)
    return Fabric(topo, source=source, root_guids=root_guids)


def fabric_from_file(path: Path | str, *, root_guids: Collection[int] | None = None) -> Fabric:
    """(a) Build a fabric from a saved ``ibnetdiscover`` output (or an ibsim net file).

    Raises:
        TopologyError: the file cannot be read or parsed, or is not a fat tree.
    """
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise TopologyError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise TopologyError(f"{path}: not text: {err}") from None
    return fabric_from_text(text, str(path), root_guids=root_guids)


def fabric_from_ibnetdiscover(
    *,
    command: Sequence[str] = ("ibnetdiscover",),
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float = DISCOVER_TIMEOUT_S,
    root_guids: Collection[int] | None = None,
) -> Fabric:
    """(b) Discover the fabric live by running ``ibnetdiscover`` (infiniband-diags).

    ibnetdiscover walks the subnet with directed-route SMPs from the local port, so it
    needs access to a umad device: on a real host, read/write on ``/dev/infiniband/umad*``;
    in a lab, the lab's environment (``lab.env()``: LD_PRELOAD of umad2sim, IBSIM_SOCKNAME,
    SIM_HOST) and a writable *cwd* (umad2sim creates ``sys-<pid>/`` there).

    Args:
        command: the command line; add e.g. ``-C mlx5_0 -P 1`` to pick the port.
        env: the whole environment of the command (default: this process's).
        cwd: working directory of the command.
        timeout: seconds before the command is killed (by its pid); a large fabric needs
            tens.  While it runs, the tool runner's waiter is called every half second
            (:mod:`ibqos.tools`), so a daemon stays responsive and can stop it.
        root_guids: see :class:`Fabric`.

    Raises:
        TopologyError: the command cannot run, times out or fails (naming the command and
            its last stderr line), or its output is not a usable fat tree.
    """
    argv = list(command)
    name = " ".join(argv)
    # a NodeDescription is not always valid UTF-8
    result = run_tool(argv, timeout_s=timeout, env=env, cwd=cwd, errors="replace", name=name)
    if not result.ok:
        raise TopologyError(result.message("infiniband-diags installs it"))
    if result.stderr.strip():
        # ibnetdiscover warns about nodes that did not answer and still exits 0
        log.warning("%s: %s", name, result.last_stderr())
    return fabric_from_text(result.stdout, name, root_guids=root_guids)
