"""``ibqos check-config``: is the host ready for the agent this config describes?

A config can be valid and still unusable: OpenSM's files missing, a directory the agent may
not write, a job source that does not answer, a metrics port another process holds.  Any of
these fails the agent's first cycle, and ``systemctl enable --now ibqos`` then waits for
READY until ``TimeoutStartSec`` runs out.  :func:`preflight` looks at everything the config
points at and returns every problem at once, each a :class:`Finding`.

Permissions are judged as the service runs: ``ibqos.service`` runs as root with an empty
capability bounding set, so root has no CAP_DAC_OVERRIDE and the files' mode bits bind it
as they bind any owner (:func:`allowed`).  A read-only file system counts too.

Severities: an **error** makes the agent fail (or, in enforce mode, fail to apply); a
**warning** degrades it (OpenSM not running: nothing is applied until it runs; its log
unreadable: errors after a reload are seen only through verification); a **note** says
what was not probed and why.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ibqos.agent.handoff import SOCKET_PATH_MAX
from ibqos.agent.lock import holder
from ibqos.attribute.jobmap import FileJobSource
from ibqos.config.models import Config
from ibqos.errors import JobsError, SlurmError
from ibqos.opensm.conf import parse_conf
from ibqos.opensm.signallers import Liveness, PidFileSignaller, UnitSignaller
from ibqos.slurm.source import Runner, SlurmJobSource
from ibqos.tools import find_tool

log = logging.getLogger(__name__)

__all__ = ["Finding", "allowed", "preflight"]

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Finding:
    """One problem with what the config points at.

    Attributes:
        severity: "error", "warning" or "note".
        key: the config key whose target is at fault (``opensm.conf``, ``metrics.listen``).
        message: what is wrong, naming the path or address.
    """

    severity: Severity
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.key}: {self.message}"


def allowed(path: Path, access: int) -> bool:
    """Whether this process, run as ibqos.service runs, may access *path*.

    Args:
        path: an existing file or directory.
        access: ``os.R_OK``, ``os.W_OK``, ``os.X_OK`` or an or of them.

    Returns:
        ``os.access``'s answer (which knows of read-only mounts), and for root also the
        mode bits' answer: the unit drops every capability, so root is bound by them
        like any other owner.
    """
    if not os.access(path, access):
        return False
    if os.geteuid() != 0:
        return True
    st = path.stat()
    if st.st_uid == 0:
        shift = 6
    elif st.st_gid in (os.getegid(), *os.getgroups()):
        shift = 3
    else:
        shift = 0
    need = (4 if access & os.R_OK else 0) | (2 if access & os.W_OK else 0)
    need |= 1 if access & os.X_OK else 0
    return (st.st_mode >> shift) & need == need


def preflight(config: Config, *, squeue: Runner | None = None) -> list[Finding]:
    """Everything wrong with what *config* points at, errors first in config order.

    Args:
        config: a loaded (valid) configuration.
        squeue: runs squeue for the Slurm job source (default: the real one).
    """
    running = holder(config.agent.state_dir)
    found = [
        *_opensm_files(config),
        *_opensm_process(config),
        *_jobs(config, squeue),
        *_state_dir(config),
        *_listeners(config, running),
        *_routes(config),
    ]
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(found, key=lambda f: order[f.severity])  # stable: config order within


# -- OpenSM's files ----------------------------------------------------------------------------


def _opensm_files(config: Config) -> Iterator[Finding]:
    osm = config.opensm
    # observe mode writes nothing of OpenSM's; switching to enforce (a reload) will
    enforce = config.mode == "enforce"
    severity: Severity = "error" if enforce else "warning"
    later = "" if enforce else " (enforce mode needs to)"
    conf = osm.conf
    if not conf.exists():
        yield Finding(
            "error",
            "opensm.conf",
            f"{conf}: no such file (OpenSM reads it at start and at every SIGHUP; ibqos"
            " adds its QoS keys to the admin's file)",
        )
    elif not conf.is_file():
        yield Finding("error", "opensm.conf", f"{conf}: not a regular file")
    else:
        if not allowed(conf, os.R_OK):
            yield Finding("error", "opensm.conf", f"{conf}: ibqos may not read it")
        else:
            yield from _policy_named(conf, osm.policy_file)
        if not allowed(conf, os.W_OK):
            yield Finding(severity, "opensm.conf", f"{conf}: ibqos may not write it{later}")
    policy = osm.policy_file
    if policy.exists() and not policy.is_file():
        yield Finding("error", "opensm.policy_file", f"{policy}: not a regular file")
    elif policy.exists() and not allowed(policy, os.W_OK):
        yield Finding(severity, "opensm.policy_file", f"{policy}: ibqos may not write it{later}")
    # atomic writes make their temp file beside the target, and the agent locks the
    # directory; a missing policy file is fine (ibqos creates it), its directory is not
    for key, directory in (("opensm.conf", conf.parent), ("opensm.policy_file", policy.parent)):
        if key == "opensm.policy_file" and directory == conf.parent:
            continue
        if not directory.is_dir():
            yield Finding("error", key, f"{directory}: no such directory")
        elif not allowed(directory, os.W_OK | os.X_OK):
            what = "its temp files when it replaces OpenSM's files"
            yield Finding(severity, key, f"{directory}: ibqos may not create {what} there{later}")
    log_file = osm.log
    if not log_file.is_file() or not allowed(log_file, os.R_OK):
        why = "no such file" if not log_file.exists() else "ibqos may not read it"
        yield Finding(
            "warning",
            "opensm.log",
            f"{log_file}: {why} (OpenSM's errors after a reload are then seen only by"
            " verification, after a fixed wait)",
        )


def _policy_named(conf: Path, policy: Path) -> Iterator[Finding]:
    """A qos_policy_file in opensm.conf other than the one ibqos writes."""
    try:
        named = parse_conf(conf.read_text(errors="replace")).get("qos_policy_file", "(null)")
    except OSError as err:
        yield Finding("error", "opensm.conf", f"{conf}: cannot read: {err.strerror}")
        return
    if named not in ("", "(null)") and Path(named).resolve() != policy.resolve():
        yield Finding(
            "warning",
            "opensm.policy_file",
            f"{policy}: {conf} names qos_policy_file {named}: OpenSM reads the file ibqos"
            " writes only if started with --qos_policy_file pointing at it",
        )


def _opensm_process(config: Config) -> Iterator[Finding]:
    osm = config.opensm
    state: Liveness | None = None
    key = "opensm"
    if osm.pid_file is not None:
        state = PidFileSignaller(osm.pid_file).alive()
        key = "opensm.pid_file"
    elif osm.unit is not None:
        state = UnitSignaller(osm.unit).alive()
        key = "opensm.unit"
    elif osm.reload_command:
        program = osm.reload_command[0]
        if find_tool(program) is None:
            yield Finding(
                "error",
                "opensm.reload_command",
                f"{program}: no such command (not on PATH, or not executable)",
            )
    if state is not None and not state.up:
        detail = state.detail if state.up is False else f"cannot tell: {state.detail}"
        yield Finding(
            "warning",
            key,
            f"{detail} (the agent runs, but applies nothing until OpenSM runs)",
        )


# -- the job source ----------------------------------------------------------------------------


def _jobs(config: Config, squeue: Runner | None) -> Iterator[Finding]:
    if config.jobs.source == "slurm":
        try:
            SlurmJobSource(config.slurm, run=squeue).jobs()
        except SlurmError as err:
            yield Finding("error", "slurm.squeue", str(err))
        return
    source = FileJobSource(config.jobs.path)
    try:
        source.jobs()
    except JobsError as err:
        yield Finding("error", "jobs.path", str(err))
        return
    for problem in sorted(source.problems):  # a job directory's bad jobs, left out
        yield Finding("warning", "jobs.path", problem)


# -- the agent's own places ------------------------------------------------------------------------


def _state_dir(config: Config) -> Iterator[Finding]:
    problem = _can_make_dir(config.agent.state_dir)
    if problem:
        yield Finding("error", "agent.state_dir", problem)


def _routes(config: Config) -> Iterator[Finding]:
    """The routes attribution and tuning use: OpenSM's dump, readable (else what stands in)."""
    fc = config.fabric
    dump = fc.lft_dump
    if fc.routes not in ("auto", "dump") or dump is None:
        return
    if not dump.is_file() or not allowed(dump, os.R_OK):
        meanwhile = (
            "the agent reads the switches' tables with ibroute meanwhile"
            if fc.routes == "auto"
            else "no routes until it is: attribution splits by subtree, tuning predicts over"
            " D-mod-K routes"
        )
        yield Finding(
            "warning",
            "fabric.lft_dump",
            f"{dump}: not a readable file (OpenSM writes it after a heavy sweep while the"
            f" ROUTING log flag is on); {meanwhile}",
        )


def _can_make_dir(directory: Path) -> str | None:
    """Why ibqos cannot use (or make) *directory* for its files; None when it can."""
    if directory.exists():
        if not directory.is_dir():
            return f"{directory}: not a directory"
        if not allowed(directory, os.W_OK | os.X_OK):
            return f"{directory}: ibqos may not write there"
        return None
    parent = directory.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{directory}: cannot be made: {parent} is not a directory"
    if not allowed(parent, os.W_OK | os.X_OK):
        return f"{directory}: no such directory, and ibqos may not make it in {parent}"
    return None


def _listeners(config: Config, running: tuple[int, str] | None) -> Iterator[Finding]:
    """The metrics port, the SL socket and the SL port: free for this agent to take."""
    wanted = [
        ("metrics.listen", config.metrics.listen),
        ("agent.sl_listen", config.agent.sl_listen),
    ]
    sock = config.agent.socket
    if running is not None:
        pid, mode = running
        # they are taken, by the agent this config belongs to: nothing to learn by probing
        yield Finding(
            "note",
            "agent.state_dir",
            f"an ibqos agent ({mode}, pid {pid}) runs on {config.agent.state_dir}: its"
            " metrics port and socket are not probed",
        )
    else:
        for key, address in wanted:
            if address is not None:
                problem = _bind_problem(address)
                if problem:
                    yield Finding("error", key, problem)
    if sock is None:
        return
    if len(os.fsencode(sock)) > SOCKET_PATH_MAX:
        yield Finding(
            "error",
            "agent.socket",
            f"{sock}: longer than the {SOCKET_PATH_MAX} bytes a UNIX socket path may have",
        )
        return
    problem = _can_make_dir(sock.parent)
    if problem:
        yield Finding("error", "agent.socket", problem)
    elif running is None and (sock.exists() or sock.is_symlink()):
        if not sock.is_socket():
            yield Finding("error", "agent.socket", f"{sock}: exists and is not a socket")
        elif _answers(sock):
            yield Finding(
                "error",
                "agent.socket",
                f"{sock}: another process answers there (an agent with another state directory?)",
            )


def _bind_problem(address: tuple[str, int]) -> str | None:
    """Why *address* cannot be listened on now; None when it can (port 0: any)."""
    host, port = address
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as err:
        return f"{host}:{port}: cannot resolve {host}: {err.strerror or err}"
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # as the servers bind: a port in TIME_WAIT is free to them
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"{host}:{port}: in use by another process (another agent, or a lab's?)"
            return f"{host}:{port}: cannot listen there: {err.strerror or err}"
    return None


def _answers(path: Path) -> bool:
    """Whether a process accepts connections on the UNIX socket *path*."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # left by an agent that died: the next one removes it
        except OSError:
            return True  # a full queue or a slow answer: somebody is there
    return True
