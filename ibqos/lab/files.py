"""The files of a lab: where they are, and what a new lab directory holds.

Layout of ``<root>/<name>/``::

    lab.json            what the lab is (name, sockname, SM host, tick, contention model,
                        the address its agent's metrics are served on, OpenSM's options)
    state.json          its processes (pid + start time), status, metrics endpoint,
                        whether OpenSM runs
    fabric.net          topology given to ibsim (ibnetdiscover format)
    ibnetdiscover.txt   the fabric as discovered once OpenSM is up (with LIDs)
    jobs.yaml           the job mix (re-read when it changes)
    truth.json          ground truth: bytes per job and fat-tree level, iterations,
                        the QoS setup read back (fluid contention)
    ibqos.yaml          ibqos configuration for this lab
    opensm/             opensm.conf, qos-policy.conf, opensm.log, opensm.pid, cache/
    <name>/             the same for another OpenSM on another host (Lab.add_opensm), e.g.
                        a standby one
    control/            requests to the supervisor and its replies (ibqos.lab.control)
    run/                working directory of umad2sim clients (they create sys-<pid>/),
                        and the socket of the lab's agent (ibqos.sock)

Each lab's agent has a metrics port and an SL socket of its own, so that labs side by side
each run an agent: the port is chosen free when the lab is made (and not one another lab
under the same root recorded), the socket is in the lab's run directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ibqos.agent.handoff import SOCKET_PATH_MAX
from ibqos.config.models import LAB_DISCOVERED_FILE
from ibqos.errors import LabError, TopologyError
from ibqos.fabric.routes import parse_lft_dump
from ibqos.fabric.topology import Port, Topology, format_ibnetdiscover, parse_ibnetdiscover
from ibqos.fsio import atomic_write
from ibqos.lab.opensm import MINIMAL_POLICY, PER_MODULE_LOGGING, OpenSMFiles, render_conf

__all__ = [
    "LAB_SPEEDS",
    "LabPaths",
    "agent_socket",
    "check_name",
    "check_speeds",
    "default_root",
    "hostnames",
    "load_net",
    "load_state",
    "normalize_for_ibsim",
    "pick_sm",
    "write_files",
    "write_opensm",
]

#: Lane speeds ibsim 0.10 (Debian 12) parses from a net file; NDR came in ibsim 0.11.
LAB_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR")
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def default_root() -> Path:
    """Where labs live: $IBQOS_LAB_ROOT, else $XDG_STATE_HOME/ibqos/labs."""
    env = os.environ.get("IBQOS_LAB_ROOT")
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "ibqos" / "labs"


@dataclass(frozen=True)
class LabPaths:
    """Files of one lab."""

    root: Path
    name: str

    @property
    def dir(self) -> Path:
        return self.root / self.name

    def __getattr__(self, item: str) -> Path:
        files = {
            "spec": "lab.json",
            "state": "state.json",
            "net": "fabric.net",
            "discovered": LAB_DISCOVERED_FILE,
            "jobs": "jobs.yaml",
            "truth": "truth.json",
            "config": "ibqos.yaml",
            "run": "run",
            "ibsim_log": "ibsim.log",
            "supervisor_log": "supervisor.log",
        }
        if item not in files:
            raise AttributeError(item)
        return self.dir / files[item]

    @property
    def opensm(self) -> OpenSMFiles:
        return OpenSMFiles(self.dir / "opensm")

    def other_opensm(self, name: str) -> OpenSMFiles:
        """The files of another OpenSM of the lab (:meth:`ibqos.lab.lab.Lab.add_opensm`),
        in a directory of its own: its agent locks it as the first one's locks
        ``opensm/``."""
        return OpenSMFiles(self.dir / check_name(name))


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise LabError(f"lab name {name!r}: expected [A-Za-z][A-Za-z0-9_-]*, at most 32 chars")
    return name


def load_state(paths: LabPaths) -> dict[str, Any]:
    try:
        data = json.loads(paths.state.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def hostnames(topo: Topology) -> set[str]:
    return {ca.hostname for ca in topo.cas()}


def check_speeds(topo: Topology) -> None:
    for link in topo.links:
        if link.speed not in LAB_SPEEDS:
            raise TopologyError(
                f"link {link.a} - {link.b}: ibsim here cannot simulate "
                f"{link.speed} (it knows {', '.join(LAB_SPEEDS)})"
            )


def pick_sm(topo: Topology, sm_host: str | None) -> str:
    cas = topo.cas()
    if not cas:
        raise TopologyError("the topology has no CA to run OpenSM on")
    if sm_host is None:
        named = [c for c in cas if c.hostname.startswith("opensm")]
        return (named or cas)[0].id
    for ca in cas:
        if sm_host in (ca.id, ca.hostname, ca.desc):
            return ca.id
    raise LabError(f"--sm-host {sm_host!r}: no such CA in the topology")


def load_net(path: Path) -> Topology:
    try:
        return parse_ibnetdiscover(path.read_text(), str(path))
    except OSError as err:
        raise LabError(f"{path}: cannot read: {err.strerror}") from err


def agent_socket(paths: LabPaths) -> Path | None:
    """The lab agent's SL socket, in the lab's run directory; None when that path is too
    long for a UNIX socket (a lab root deep down: the lab's agent then serves no socket)."""
    sock = paths.run.absolute() / "ibqos.sock"
    return sock if len(os.fsencode(sock)) <= SOCKET_PATH_MAX else None


def _agent_port(paths: LabPaths) -> int:
    """A loopback port free now for the lab's agent, and not the one another lab under the
    same root recorded (its agent may be down at the moment)."""
    taken = set()
    for spec in paths.root.glob("*/lab.json"):
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            address = json.loads(spec.read_text()).get("agent_metrics", "")
            taken.add(int(address.rpartition(":")[2]))
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in taken:
            return port
    raise LabError(f"no free loopback port for the agent of lab {paths.name}")


def write_files(
    paths: LabPaths,
    topo: Topology,
    sm_node: str,
    jobs_text: str,
    opensm_options: Mapping[str, str],
    tick_s: float,
    extra: Mapping[str, object],
) -> None:
    sockname = "ibqos-" + hashlib.sha1(str(paths.dir.resolve()).encode()).hexdigest()[:12]  # noqa: S324 - a name, not security
    atomic_write(paths.net, format_ibnetdiscover(topo))
    atomic_write(paths.jobs, jobs_text)
    osm = paths.opensm
    write_opensm(osm, opensm_options, f"opensm.conf of ibqos lab {paths.name}")
    sock = agent_socket(paths)
    metrics = f"127.0.0.1:{_agent_port(paths)}"
    config = {
        # a lab is a simulation: the agent changes its OpenSM at once (the default,
        # observe, is for production fabrics: docs/deploy.md)
        "mode": "enforce",
        "opensm": {
            "conf": str(osm.conf),
            "policy_file": str(osm.policy),
            "log": str(osm.log),
            "pid_file": str(osm.pid),
        },
        "jobs": {"source": "file", "path": str(paths.jobs)},
        # the agent's memory and OpenSM file backups stay inside the lab, and so do its
        # socket and port: labs side by side each run an agent
        "agent": {"state_dir": str(paths.dir / "agent"), "socket": str(sock or "")},
        "metrics": {"listen": metrics, "fabric": paths.name},
        # attribution and tuning use OpenSM's own routes: the lab's OpenSM dumps them
        "fabric": {"lft_dump": str(osm.lfts_dump)},
        "lab": {"name": paths.name, "dir": str(paths.dir)},
    }
    atomic_write(
        paths.config,
        f"# ibqos configuration of lab {paths.name} (written by "
        f"'ibqos lab up')\n" + yaml.safe_dump(config, sort_keys=False),
    )
    spec = {
        "name": paths.name,
        "sockname": sockname,
        "sm_node": sm_node,
        "tick_s": tick_s,
        "agent_metrics": metrics,
        # another OpenSM of the lab starts from these too (Lab.add_opensm)
        "opensm_options": dict(opensm_options),
        **extra,
        "created": time.time(),
    }
    atomic_write(paths.spec, json.dumps(spec, indent=1) + "\n")


def write_opensm(osm: OpenSMFiles, options: Mapping[str, str], header: str) -> None:
    """The files one OpenSM of a lab starts from, in its directory: opensm.conf (the lab's
    defaults and paths, then *options*), a minimal QoS policy, per-module logging."""
    atomic_write(osm.conf, render_conf(osm, options, header))
    atomic_write(osm.policy, MINIMAL_POLICY)
    atomic_write(osm.per_module_logging, PER_MODULE_LOGGING)


def normalize_for_ibsim(topo: Topology) -> Topology:
    """Give every node a GUID and CA ports the GUIDs ibsim will use (node GUID + port), so
    the nodes found by ibnetdiscover can be matched to the file's nodes."""
    out = Topology()
    next_guid = 0x0C42A10302000000
    for node in topo.nodes.values():
        guid = node.guid
        if guid is None:
            guid, next_guid = next_guid, next_guid + 64
        out.add_node(type(node)(node.id, node.kind, node.nports, node.desc, guid))
        if node.kind != "switch":
            for num in range(1, node.nports + 1):
                out.port_guids[Port(node.id, num)] = guid + num
    for link in topo.links:
        out.add_link(link)
    return out


def take_lids(topo: Topology, found: Topology) -> None:
    """Give *topo*'s ports the LIDs the running fabric has (*found*: its ibnetdiscover),
    matching nodes by GUID.

    Raises:
        LabError: a node of *topo* is not in *found* (or not of the same kind).
    """
    by_guid = {n.guid: n for n in found.nodes.values()}
    for node in topo.nodes.values():
        hit = by_guid.get(node.guid)
        if hit is None or hit.kind != node.kind:
            raise LabError(f"ibnetdiscover did not find {node.id} ({node.desc})")
        if node.kind == "switch":
            topo.lids[Port(node.id, 0)] = found.lids[Port(hit.id, 0)]
        for p in topo.ports(node.id):
            if node.kind != "switch":
                topo.lids[p] = found.lids[Port(hit.id, p.num)]


def wait_lft_dump(path: Path, switches: int, timeout: float) -> dict[int, dict[int, int]]:
    """OpenSM's LFT dump at *path* once it holds a table for each of *switches* switches,
    or as it is after *timeout* seconds.

    OpenSM writes it at the end of the heavy sweep, around the time it logs SUBNET UP.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            tables = parse_lft_dump(path.read_text(), str(path))
        except (OSError, LabError):
            tables = {}  # not there yet, or caught half-written
        if len(tables) >= switches or time.monotonic() > deadline:
            return tables
        time.sleep(0.2)
