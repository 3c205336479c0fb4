"""Per-level injection, available bandwidth, utilization and class of a job on a placement.

The characterization of docs/design.md §3, "Per-level utilization", computed
from a job's communication instead of from counters: given who sends how much to whom
(:class:`~ibqos.classify.traffic.NodeTraffic`) and which hosts the job runs on (:class:`Placement`),

- ``rate[l]``: bytes per second crossing level *l* -- level 0 everything the nodes send,
  level *l* >= 1 what goes to a node in another level-*l* subtree.  With minimal routing
  that does not depend on the routes, only on the placement (as attribution relies on);
- ``avail[l]``: the uplink capacity of the level-*l* subtrees holding the job
  (:meth:`ibqos.classify.classifier.Capacities.available`, the agent's own figure);
- ``util[l] = rate[l] / avail[l]``, the intensity (max over l >= 1) and the class, by the
  classifier's thresholds (:func:`ibqos.classify.classifier.class_of`, no hysteresis: one sample).

Each figure comes as a mean over the traffic's span (what the agent's smoothed counters
see, and what decides the class) and as a peak: the busiest interval of a trace, or the
communication phase of a modelled job (``rate / duty``).  Units: bytes, seconds, bytes
per second; utilizations are fractions.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from ibqos.attribute.jobmap import host_ports, natural_key  # hosts sorted as the job mapper does
from ibqos.classify.classifier import Capacities, class_of, intensity, utilization
from ibqos.classify.traffic import NodeTraffic
from ibqos.config.classes import Class, Thresholds
from ibqos.errors import TopologyError
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric, PortKey

__all__ = [
    "Characterization",
    "Characterizer",
    "LevelRow",
    "Placement",
]


@dataclass(frozen=True)
class Placement:
    """Hosts a job runs on; node i of the traffic runs on ``hosts[i]``.

    Attributes:
        name: how it was chosen: ``contiguous``, ``F<n>`` (n nodes per leaf switch),
            ``random:<seed>`` or ``job`` (a real job's hosts).
        hosts: host names, in node order.
    """

    name: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class LevelRow:
    """One level of a characterization.

    Attributes:
        level: 0 (injection) .. height.
        bytes_per_s: mean bytes per second crossing the level.
        peak_bytes_per_s: the same in the busiest interval.
        avail_bytes_per_s: uplink capacity of the level's subtrees holding the job (level 0:
            its host ports); 0.0 at the top level.
        util, peak_util: the two rates over ``avail``; None where ``avail`` is 0.
    """

    level: int
    bytes_per_s: float
    peak_bytes_per_s: float
    avail_bytes_per_s: float
    util: float | None
    peak_util: float | None


@dataclass(frozen=True)
class Characterization:
    """A job's traffic on one placement.

    Attributes:
        placement: the placement's name.
        hosts: its hosts.
        leaves: leaf switches (level-1 subtrees) it spans.
        subtrees: per level 1..height, the level's subtrees it spans.
        levels: per level 0..height.
        intensity: max mean utilization over levels >= 1 (level 0 on a one-switch fabric).
        level: the level that gave it (None when nothing crosses any level).
        cls: the class of that intensity.
        peak_intensity: the same from the peak utilizations.
    """

    placement: str
    hosts: tuple[str, ...]
    leaves: int
    subtrees: tuple[int, ...]
    levels: tuple[LevelRow, ...]
    intensity: float
    level: int | None
    cls: Class
    peak_intensity: float


_FRAGMENTED = re.compile(r"^[Ff](\d+)$")


class Characterizer:
    """Characterizes traffic on placements of one fabric (tables built once).

    Args:
        fabric: the fat tree (an XGFT built with :func:`ibqos.fabric.xgft.build_xgft`, or a
            recorded topology).
        thresholds: the classifier's class bounds.
        matcher: how host names are read from NodeDescriptions.
        exclude: hosts that run no jobs (the subnet manager's own host).

    Attributes:
        leaves: the hosts of every leaf switch, leaf switches and hosts in natural order of
            the host names (on an XGFT: cn0001.. leaf by leaf).
    """

    def __init__(
        self,
        fabric: Fabric,
        thresholds: Thresholds | None = None,
        matcher: HostMatcher | None = None,
        exclude: Collection[str] = (),
    ) -> None:
        self.fabric = fabric
        self.thresholds = thresholds or Thresholds()
        self.caps = Capacities.from_fabric(fabric)
        self.ports: dict[str, list[PortKey]] = {
            h: keys
            for h, keys in host_ports(fabric, matcher).items()
            if keys[0] in self.caps.host_capacity and h not in exclude
        }
        by_leaf: dict[int, list[str]] = {}
        for host, keys in self.ports.items():
            by_leaf.setdefault(self.caps.subtree_of[0][keys[0]], []).append(host)
        leaves = [sorted(hosts, key=natural_key) for hosts in by_leaf.values()]
        self.leaves: list[list[str]] = sorted(leaves, key=lambda hs: natural_key(hs[0]))

    @property
    def hosts(self) -> list[str]:
        """Every host, leaf switch by leaf switch."""
        return [h for leaf in self.leaves for h in leaf]

    @property
    def hosts_per_leaf(self) -> int:
        """The most hosts any leaf switch has."""
        return max((len(leaf) for leaf in self.leaves), default=0)

    def placement(self, spec: str, nodes: int, job_hosts: Sequence[str] = ()) -> Placement:
        """A placement of *nodes* nodes by name.

        Args:
            spec: ``contiguous`` (the first hosts, leaf by leaf), ``F<n>`` (the first n
                hosts of each leaf switch: regular fragmentation), ``random`` or
                ``random:<seed>`` (hosts drawn at random, seed 0 by default), ``job``
                (*job_hosts*).
            nodes: the job's node count.
            job_hosts: the hosts of a real job, for ``job``.

        Raises:
            TopologyError: an unknown spec, or the fabric cannot hold the placement.
        """
        everything = self.hosts
        if spec == "contiguous":
            hosts = everything[:nodes]
        elif (m := _FRAGMENTED.match(spec)) is not None:
            per_leaf = int(m.group(1))
            if not 1 <= per_leaf <= self.hosts_per_leaf:
                raise TopologyError(
                    f"placement {spec}: expected 1 to {self.hosts_per_leaf} nodes per leaf switch"
                )
            hosts = [h for leaf in self.leaves for h in leaf[:per_leaf]][:nodes]
        elif spec == "random" or spec.startswith("random:"):
            seed_text = spec.partition(":")[2] or "0"
            if not seed_text.isdigit():
                raise TopologyError(f"placement {spec}: the seed must be an integer >= 0")
            spec = f"random:{seed_text}"
            order = {h: i for i, h in enumerate(everything)}
            if nodes > len(everything):
                hosts = everything
            else:
                drawn = random.Random(int(seed_text)).sample(everything, nodes)
                hosts = sorted(drawn, key=order.__getitem__)  # ranks go in node order
        elif spec == "job":
            unknown = [h for h in job_hosts if h not in self.ports]
            if unknown:
                raise TopologyError(f"placement job: host {unknown[0]} is not on the fabric")
            hosts = list(job_hosts)
        else:
            raise TopologyError(
                f"placement {spec!r}: expected contiguous, F<n>, random[:seed] or job"
            )
        if len(hosts) < nodes:
            raise TopologyError(
                f"placement {spec}: {nodes} nodes do not fit ({len(hosts)} hosts available)"
            )
        return Placement(spec, tuple(hosts))

    def spreads(self, nodes: int) -> list[Placement]:
        """The job spread ever more thinly: ``F<n>`` for n = hosts per leaf down to 1,
        as long as the fabric has the leaf switches.  Every n is kept, also when two span
        the same leaves: 8 nodes as F7 (7 + 1) and F4 (4 + 4) both span 2, but the even
        split sends more across the uplinks and may be another class."""
        out: list[Placement] = []
        for per_leaf in range(self.hosts_per_leaf, 0, -1):
            if math.ceil(nodes / per_leaf) > len(self.leaves):
                break
            out.append(self.placement(f"F{per_leaf}", nodes))
        return out

    def characterize(self, traffic: NodeTraffic, placement: Placement) -> Characterization:
        """The per-level figures of *traffic* on *placement* (module docstring).

        Raises:
            TopologyError: the placement has fewer hosts than the traffic has nodes.
        """
        if len(placement.hosts) < traffic.nodes:
            raise TopologyError(
                f"placement {placement.name}: {len(placement.hosts)} hosts for"
                f" {traffic.nodes} nodes"
            )
        hosts = placement.hosts[: traffic.nodes]
        first = [self.ports[h][0] for h in hosts]
        avail = self.caps.available(k for h in hosts for k in self.ports[h])
        n_int = len(traffic.interval_s)
        rows: list[LevelRow] = []
        spans: list[int] = []
        for level in range(self.fabric.height + 1):
            if level == 0:
                cross = np.ones(len(traffic.src), dtype=np.bool_)
            else:
                sub = np.array([self.caps.subtree_of[level - 1][k] for k in first], dtype=np.int64)
                cross = sub[traffic.src] != sub[traffic.dst]
                spans.append(len(set(sub.tolist())))
            per_int = np.bincount(traffic.interval, weights=traffic.bytes * cross, minlength=n_int)
            mean = float(per_int.sum()) / traffic.span_s
            peak = float((per_int / traffic.interval_s).max(initial=0.0))
            cap = avail[level]
            rows.append(
                LevelRow(
                    level,
                    mean,
                    peak,
                    cap,
                    mean / cap if cap > 0 else None,
                    peak / cap if cap > 0 else None,
                )
            )
        value, top = intensity(utilization({r.level: r.bytes_per_s for r in rows}, avail))
        peak_value, _ = intensity(utilization({r.level: r.peak_bytes_per_s for r in rows}, avail))
        return Characterization(
            placement=placement.name,
            hosts=hosts,
            leaves=spans[0] if spans else 1,
            subtrees=tuple(spans),
            levels=tuple(rows),
            intensity=value,
            level=top,
            cls=class_of(value, self.thresholds),
            peak_intensity=peak_value,
        )
