"""ibqos configuration: YAML validated all at once into frozen dataclasses.

Search order: an explicit ``--config``, then ``$IBQOS_CONFIG``, then
``/etc/ibqos/ibqos.yaml``.  Every error names the file and the key path.  Sections other
stages will need are added as those stages land; unknown keys are errors so that typos
do not pass silently.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ibqos.config.classes import (
    CLASSES,
    Thresholds,
)
from ibqos.config.lanes import (
    WEIGHT_LAWS,
    LaneConfig,
)
from ibqos.errors import ConfigError
from ibqos.fabric.hostnames import DEFAULT_HOST_PATTERN, LAB_SM_HOSTNAME, HostMatcher

DEFAULT_PATH = Path("/etc/ibqos/ibqos.yaml")
JOB_SOURCES = ("file", "slurm")
SQUEUE_FORMATS = ("auto", "json", "text")
FABRIC_SOURCES = ("ibnetdiscover", "file", "lab")
BACKENDS = ("native", "perfquery", "replay")
#: ``mode``: observe computes, exports and shows diffs but never touches OpenSM; enforce
#: writes OpenSM's files.  Observe is the default, so that a fresh install changes nothing
#: on a production fabric before an admin has read what it would do (docs/deploy.md).
MODES = ("observe", "enforce")
DEFAULT_MODE = "observe"


#: OpenSM port types whose ``qos_<type>_*`` keys ibqos may manage (reference A.2)
PORT_TYPES = ("ca", "swe", "sw0", "rtr")
#: where a lab keeps its ibnetdiscover output, in its directory
LAB_DISCOVERED_FILE = "ibnetdiscover.txt"


@dataclass(frozen=True)
class OpenSMConfig:
    """Where the site's OpenSM keeps what ibqos reads and writes, and how to reach it.

    Attributes:
        conf: opensm.conf (must exist when OpenSM starts, or SIGHUP re-reads nothing).
        policy_file: the ``qos_policy_file`` OpenSM was started with.
        log: OpenSM's log, read after every reload for errors and the sweep's end.
        pid_file: SIGHUP goes to the pid in it; or
        unit: a systemd unit whose main process gets SIGHUP; or
        reload_command: a command that makes OpenSM re-read its files.  At most one of
            the three; none: the files are written and OpenSM is not signalled.
        port_types: the port types whose ``qos_<type>_*`` keys ibqos manages.
        sweep_timeout_s: seconds to wait for OpenSM's heavy sweep after a signal.
        verify: after a reload, check through SA that OpenSM serves the new tables and SLs.
    """

    conf: Path = Path("/etc/opensm/opensm.conf")
    policy_file: Path = Path("/etc/opensm/qos-policy.conf")
    log: Path = Path("/var/log/opensm.log")
    pid_file: Path | None = None
    unit: str | None = None
    reload_command: tuple[str, ...] = ()
    port_types: tuple[str, ...] = ("ca", "swe")
    sweep_timeout_s: float = 30.0
    verify: bool = True


@dataclass(frozen=True)
class AgentConfig:
    """The daemon (``ibqos run``); its cycle interval is ``collect.interval_s``.

    Attributes:
        state_dir: job -> SL bindings, the plan, backups of OpenSM's files, the apply lock.
        job_poll_s: seconds between two looks at the job source between cycles, so a job
            that starts or ends is acted on at once.
        socket: the local (UNIX) socket where ``ibqos job-sl`` asks for a job's SL; None:
            not served.
        sl_listen: (host, port) where the same questions are answered over TCP, for
            TaskProlog scripts on compute nodes (``docs/slurm.md``); None: not served.
    """

    state_dir: Path = Path("/var/lib/ibqos")
    job_poll_s: float = 0.5
    socket: Path | None = Path("/run/ibqos/ibqos.sock")
    sl_listen: tuple[str, int] | None = None


@dataclass(frozen=True)
class JobsConfig:
    """Where running jobs come from, and how their hosts are found on the fabric.

    Attributes:
        source: "file" (a job file or a directory of them, ``docs/jobs.md``).
        path: the file or directory.
        host_pattern: regular expression with one group that finds the host name in a
            CA's NodeDescription (default: its first word).  CAs it finds no name in are
            not compute hosts.
        exclude_hosts: hosts on the fabric that run no jobs (the subnet manager's host,
            storage and login nodes): not counted as leaf-switch capacity by the sharing
            report, never used to place a characterized job.  Default: the lab's OpenSM
            host.
    """

    source: str = "file"
    path: Path = Path("/etc/ibqos/jobs.yaml")
    host_pattern: str = DEFAULT_HOST_PATTERN
    exclude_hosts: tuple[str, ...] = (LAB_SM_HOSTNAME,)


@dataclass(frozen=True)
class SlurmConfig:
    """The Slurm job source (``jobs.source: slurm``, ``docs/slurm.md``).

    Attributes:
        squeue: the squeue command (argv prefix; e.g. ``[squeue, -M, cluster2]``).
        conf: slurm.conf for squeue (``SLURM_CONF``); None: squeue's own default.
        format: "json" (``squeue --json``, Slurm >= 21.08), "text" (a fixed ``--format``,
            any release) or "auto" (json if ``squeue --version`` says 21.08 or later).
        poll_s: seconds between two squeue polls; a Prolog/Epilog notification or a
            question for an unknown job's SL polls at once.
        grace_s: seconds the last known jobs are kept while squeue fails (slurmctld
            unreachable); after that cycles fail and OpenSM's files stay as they are.
        timeout_s: seconds one squeue may take before it is killed.
        notify_dir: directory where the shipped PrologSlurmctld/EpilogSlurmctld script
            drops a file per job start or end; None: no notifications, polling only.
    """

    squeue: tuple[str, ...] = ("squeue",)
    conf: Path | None = None
    format: str = "auto"
    poll_s: float = 10.0
    grace_s: float = 300.0
    timeout_s: float = 10.0
    notify_dir: Path | None = Path("/run/ibqos/notify")


#: SLs jobs never get unless ``lanes.reserved_sls`` says otherwise
DEFAULT_RESERVED_SLS = (0,)

#: ``lanes`` keys that may be ``auto``: read from the fabric (PortInfo) or OpenSM's config
AUTO_LANE_KEYS = ("data_vls", "vlarb_low_cap", "vlarb_high_cap", "mtu", "routing_engine")


@dataclass(frozen=True)
class LanesConfig:
    """The ``lanes`` section: what the planner may use (``ibqos.plan.planner.LaneConfig``).

    Attributes:
        base: the values given, defaults for the rest.
        auto: keys of :data:`AUTO_LANE_KEYS` to read at run time: data VLs, arbitration
            caps and MTU from the ports' PortInfo, the routing engine from opensm.conf;
            their values in *base* are only fallbacks.
    """

    base: LaneConfig = field(default_factory=lambda: LaneConfig(reserved_sls=DEFAULT_RESERVED_SLS))
    auto: tuple[str, ...] = AUTO_LANE_KEYS


@dataclass(frozen=True)
class FabricConfig:
    """Where the topology comes from.

    Attributes:
        source: "ibnetdiscover" (run it: SMP discovery from this host), "file" (an
            ibnetdiscover output at *path*), or "lab" (the lab's recorded discovery).
        path: the file for source "file".
        root_guids: GUIDs of the top-level switches, for fabrics where levels cannot be
            inferred from the leaves (like OpenSM's ftree root_guid_file); empty: infer.
        refresh_s: seconds between two reads of the topology while collecting, to notice
            ports that vanish or appear (0: never read it again).
    """

    source: str = "ibnetdiscover"
    path: Path | None = None
    root_guids: tuple[int, ...] = ()
    refresh_s: float = 300.0


@dataclass(frozen=True)
class CollectConfig:
    """How port counters are read (``ibqos.collect``).

    Attributes:
        backend: "native" (libibumad MADs), "perfquery" (infiniband-diags processes) or
            "replay" (a recorded sweep series at *replay_path*).
        interval_s: seconds between sweeps.
        xmit_wait: also read PortXmitWait (PortCounters) where PCE does not carry it.
        vl_xmit_wait: also read PortVLXmitWaitCounters (per-VL transmit wait, one more MAD
            per port) from the nodes (switches and CAs) that answer it, for per-lane
            congestion.  Off by default: the counters are 16 bits wide and saturate after
            65,535 ticks, so they need short intervals, and many switches do not implement
            them.
        ca: CA to send MADs from (native); None: the first.
        port: CA port (native); 0: the first active one.
        window: MADs in flight at most (native).
        timeout_s: seconds to wait for one reply (native) or one perfquery process.
        retries: extra tries per MAD after a timeout (native).
        workers: perfquery processes at once.
        per_switch: one perfquery process per switch rather than per port.
        replay_path: recording directory for the replay backend.
        replay_loop: start the recording over when it ends.
    """

    backend: str = "native"
    interval_s: float = 10.0
    xmit_wait: bool = True
    vl_xmit_wait: bool = False
    ca: str | None = None
    port: int = 0
    window: int = 32
    timeout_s: float = 0.5
    retries: int = 2
    workers: int = 4
    per_switch: bool = True
    replay_path: Path | None = None
    replay_loop: bool = False


@dataclass(frozen=True)
class TlsConfig:
    """HTTPS for the exporter (``metrics.tls``).

    Attributes:
        cert_file: the server's certificate chain (PEM).
        key_file: its private key (PEM).
        client_ca_file: CA certificates clients must present a certificate from; None:
            no client certificates asked for.
    """

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None


@dataclass(frozen=True)
class BasicAuthConfig:
    """HTTP basic authentication for the exporter (``metrics.basic_auth``).

    Attributes:
        username: the user Prometheus sends.
        password: read from ``password_file`` (its first line) when the config is loaded,
            so the YAML holds no secret.
        password_file: where it came from (for messages).
    """

    username: str
    password: str = field(repr=False)
    password_file: Path


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus exporter of ``ibqos run`` (``docs/metrics.md``).

    Attributes:
        listen: (host, port) to serve ``/metrics`` on; None: no exporter.  Loopback by
            default: the metrics name jobs and users.
        fabric: the fabric's name in ``ibqos_fabric_info`` (the dashboards' variable).
        per_port: also export per-port traffic (3 series per swept port).
        tls: serve HTTPS; None: plain HTTP.
        basic_auth: require this user and password; None: no authentication.
    """

    listen: tuple[str, int] | None = ("127.0.0.1", 9683)
    fabric: str = "default"
    per_port: bool = False
    tls: TlsConfig | None = None
    basic_auth: BasicAuthConfig | None = None


@dataclass(frozen=True)
class ProfilesConfig:
    """Job profiles: priors for new jobs (``docs/characterize.md``).

    Attributes:
        dir: the profile directory; None: no profiles.
        min_confidence: profiles less confident than this (0..1) are not used.
        learn: the agent adds every finished job's measured class to its application's
            profile (creating it); needs ``dir`` writable.
    """

    dir: Path | None = None
    min_confidence: float = 0.5
    learn: bool = False


@dataclass(frozen=True)
class LabConfig:
    """Set when the config belongs to a simulated lab fabric."""

    name: str
    dir: Path

    @property
    def discovered(self) -> Path:
        """The lab's fabric as discovered once OpenSM came up (ibnetdiscover output)."""
        return self.dir / LAB_DISCOVERED_FILE


@dataclass(frozen=True)
class Config:
    source: str
    mode: str = DEFAULT_MODE
    opensm: OpenSMConfig = field(default_factory=OpenSMConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    classify: Thresholds = field(default_factory=Thresholds)
    lanes: LanesConfig = field(default_factory=LanesConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    profiles: ProfilesConfig = field(default_factory=ProfilesConfig)
    lab: LabConfig | None = None


def find_config(explicit: Path | None) -> Path:
    """The config file to use, by the search order above."""
    if explicit is not None:
        return explicit
    env = os.environ.get("IBQOS_CONFIG")
    return Path(env) if env else DEFAULT_PATH


def load_config(path: Path) -> Config:
    """Read and validate a config file.

    Raises:
        ConfigError: ``<file>: <key.path>: <problem>``.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML") from err
    return parse_config(data if data is not None else {}, str(path))


def parse_config(data: object, source: str) -> Config:
    """Validate a loaded document (see :func:`load_config`)."""
    top = check_mapping(
        data,
        source,
        "",
        (
            "mode",
            "opensm",
            "jobs",
            "slurm",
            "fabric",
            "collect",
            "classify",
            "lanes",
            "agent",
            "metrics",
            "profiles",
            "lab",
        ),
    )
    osm = check_mapping(
        top.get("opensm", {}), source, "opensm", tuple(OpenSMConfig.__dataclass_fields__)
    )
    jobs = check_mapping(
        top.get("jobs", {}), source, "jobs", ("source", "path", "host_pattern", "exclude_hosts")
    )
    d_jobs = JobsConfig()
    job_source = _str(jobs.get("source", d_jobs.source), source, "jobs.source")
    if job_source not in JOB_SOURCES:
        raise ConfigError(
            f"{source}: jobs.source: expected one of {JOB_SOURCES}, got {job_source!r}"
        )
    lab = None
    if "lab" in top:
        raw = check_mapping(top["lab"], source, "lab", ("name", "dir"))
        lab = LabConfig(
            _str(raw.get("name"), source, "lab.name"), _path(raw.get("dir"), source, "lab.dir")
        )
    return Config(
        source=source,
        mode=_choice(top.get("mode", DEFAULT_MODE), source, "mode", MODES),
        opensm=_opensm(osm, source),
        jobs=JobsConfig(
            job_source,
            _path(jobs.get("path", d_jobs.path), source, "jobs.path"),
            _host_pattern(jobs.get("host_pattern", d_jobs.host_pattern), source),
            _host_list(jobs.get("exclude_hosts", d_jobs.exclude_hosts), source),
        ),
        slurm=_slurm(top.get("slurm", {}), source),
        fabric=_fabric(top.get("fabric", {}), source, lab),
        collect=_collect(top.get("collect", {}), source),
        classify=_classify(top.get("classify", {}), source),
        lanes=_lanes(top.get("lanes", {}), source),
        agent=_agent(top.get("agent", {}), source),
        metrics=_metrics(top.get("metrics", {}), source),
        profiles=_profiles(top.get("profiles", {}), source),
        lab=lab,
    )


def _fabric(value: object, source: str, lab: LabConfig | None) -> FabricConfig:
    raw = check_mapping(value, source, "fabric", ("source", "path", "root_guids", "refresh_s"))
    # a lab's config reads the lab's own discovery unless told otherwise
    kind = _choice(
        raw.get("source", "lab" if lab else "ibnetdiscover"),
        source,
        "fabric.source",
        FABRIC_SOURCES,
    )
    path = None if raw.get("path") is None else _path(raw["path"], source, "fabric.path")
    if kind == "file" and path is None:
        raise ConfigError(f"{source}: fabric.path: required when fabric.source is file")
    if kind == "lab" and lab is None:
        raise ConfigError(f"{source}: fabric.source: 'lab' needs a lab section")
    guids = raw.get("root_guids", [])
    if not isinstance(guids, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and 0 < g < 2**64 for g in guids
    ):
        raise ConfigError(f"{source}: fabric.root_guids: expected a list of GUIDs (integers)")
    refresh = _number(raw.get("refresh_s", FabricConfig.refresh_s), source, "fabric.refresh_s", 0)
    return FabricConfig(kind, path, tuple(guids), refresh)


def _collect(value: object, source: str) -> CollectConfig:
    d = CollectConfig()
    raw = check_mapping(value, source, "collect", tuple(CollectConfig.__dataclass_fields__))
    ca = raw.get("ca")
    replay = raw.get("replay_path")
    cfg = CollectConfig(
        backend=_choice(raw.get("backend", d.backend), source, "collect.backend", BACKENDS),
        interval_s=_number(raw.get("interval_s", d.interval_s), source, "collect.interval_s", 0.01),
        xmit_wait=_bool(raw.get("xmit_wait", d.xmit_wait), source, "collect.xmit_wait"),
        vl_xmit_wait=_bool(raw.get("vl_xmit_wait", d.vl_xmit_wait), source, "collect.vl_xmit_wait"),
        ca=None if ca is None else _str(ca, source, "collect.ca"),
        port=int(
            _number(raw.get("port", d.port), source, "collect.port", 0, integer=True, maximum=254)
        ),
        window=int(_number(raw.get("window", d.window), source, "collect.window", 1, integer=True)),
        timeout_s=_number(raw.get("timeout_s", d.timeout_s), source, "collect.timeout_s", 0.001),
        retries=int(
            _number(raw.get("retries", d.retries), source, "collect.retries", 0, integer=True)
        ),
        workers=int(
            _number(raw.get("workers", d.workers), source, "collect.workers", 1, integer=True)
        ),
        per_switch=_bool(raw.get("per_switch", d.per_switch), source, "collect.per_switch"),
        replay_path=None if replay is None else _path(replay, source, "collect.replay_path"),
        replay_loop=_bool(raw.get("replay_loop", d.replay_loop), source, "collect.replay_loop"),
    )
    if cfg.backend == "replay" and cfg.replay_path is None:
        raise ConfigError(f"{source}: collect.replay_path: required when collect.backend is replay")
    return cfg


def _opensm(osm: Mapping[str, Any], source: str) -> OpenSMConfig:
    d = OpenSMConfig()
    pid, unit, command = osm.get("pid_file"), osm.get("unit"), osm.get("reload_command")
    if sum(x is not None for x in (pid, unit, command)) > 1:
        raise ConfigError(f"{source}: opensm: give at most one of pid_file, unit, reload_command")
    argv: tuple[str, ...] = ()
    if command is not None:
        if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
            raise ConfigError(
                f"{source}: opensm.reload_command: expected a list of strings (argv), got"
                f" {command!r}"
            )
        argv = tuple(command)
    types = osm.get("port_types", list(d.port_types))
    if not (isinstance(types, list) and types and all(t in PORT_TYPES for t in types)):
        raise ConfigError(
            f"{source}: opensm.port_types: expected a list of {', '.join(PORT_TYPES)},"
            f" got {types!r}"
        )
    return OpenSMConfig(
        conf=_path(osm.get("conf", d.conf), source, "opensm.conf"),
        policy_file=_path(osm.get("policy_file", d.policy_file), source, "opensm.policy_file"),
        log=_path(osm.get("log", d.log), source, "opensm.log"),
        pid_file=None if pid is None else _path(pid, source, "opensm.pid_file"),
        unit=None if unit is None else _str(unit, source, "opensm.unit"),
        reload_command=argv,
        port_types=tuple(dict.fromkeys(types)),
        sweep_timeout_s=_number(
            osm.get("sweep_timeout_s", d.sweep_timeout_s), source, "opensm.sweep_timeout_s", 1
        ),
        verify=_bool(osm.get("verify", d.verify), source, "opensm.verify"),
    )


def _profiles(value: object, source: str) -> ProfilesConfig:
    d = ProfilesConfig()
    raw = check_mapping(value, source, "profiles", tuple(ProfilesConfig.__dataclass_fields__))
    directory = raw.get("dir")
    confidence = _number(
        raw.get("min_confidence", d.min_confidence), source, "profiles.min_confidence", 0
    )
    if confidence > 1:
        raise ConfigError(f"{source}: profiles.min_confidence: expected 0-1, got {confidence}")
    cfg = ProfilesConfig(
        dir=None if directory in ("", None) else _path(directory, source, "profiles.dir"),
        min_confidence=confidence,
        learn=_bool(raw.get("learn", d.learn), source, "profiles.learn"),
    )
    if cfg.learn and cfg.dir is None:
        raise ConfigError(f"{source}: profiles.learn: needs profiles.dir to write to")
    return cfg


def _agent(value: object, source: str) -> AgentConfig:
    d = AgentConfig()
    raw = check_mapping(value, source, "agent", tuple(AgentConfig.__dataclass_fields__))
    sock = raw.get("socket", d.socket)
    listen = raw.get("sl_listen")
    return AgentConfig(
        state_dir=_path(raw.get("state_dir", d.state_dir), source, "agent.state_dir"),
        job_poll_s=_number(raw.get("job_poll_s", d.job_poll_s), source, "agent.job_poll_s", 0.05),
        # "" or null switch the socket off
        socket=None if sock in ("", None) else _path(sock, source, "agent.socket"),
        sl_listen=None if listen in ("", None) else _listen(listen, source, "agent.sl_listen"),
    )


def _slurm(value: object, source: str) -> SlurmConfig:
    d = SlurmConfig()
    raw = check_mapping(value, source, "slurm", tuple(SlurmConfig.__dataclass_fields__))
    argv = raw.get("squeue", list(d.squeue))
    if isinstance(argv, str):
        argv = [argv]
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv)):
        raise ConfigError(
            f"{source}: slurm.squeue: expected a command (string or list of strings), got {argv!r}"
        )
    conf, notify = raw.get("conf"), raw.get("notify_dir", d.notify_dir)
    return SlurmConfig(
        squeue=tuple(argv),
        conf=None if conf is None else _path(conf, source, "slurm.conf"),
        format=_choice(raw.get("format", d.format), source, "slurm.format", SQUEUE_FORMATS),
        poll_s=_number(raw.get("poll_s", d.poll_s), source, "slurm.poll_s", 0.1),
        grace_s=_number(raw.get("grace_s", d.grace_s), source, "slurm.grace_s", 0),
        timeout_s=_number(raw.get("timeout_s", d.timeout_s), source, "slurm.timeout_s", 0.1),
        notify_dir=None if notify in ("", None) else _path(notify, source, "slurm.notify_dir"),
    )


def _metrics(value: object, source: str) -> MetricsConfig:
    d = MetricsConfig()
    raw = check_mapping(
        value, source, "metrics", ("listen", "fabric", "per_port", "tls", "basic_auth")
    )
    listen = d.listen
    if "listen" in raw:
        listen = (
            None
            if raw["listen"] in ("", None)
            else _listen(raw["listen"], source, "metrics.listen")
        )
    fabric = _str(raw.get("fabric", d.fabric), source, "metrics.fabric")
    tls = None
    if raw.get("tls") is not None:
        t = check_mapping(
            raw["tls"], source, "metrics.tls", ("cert_file", "key_file", "client_ca_file")
        )
        ca = t.get("client_ca_file")
        tls = TlsConfig(
            _readable(t.get("cert_file"), source, "metrics.tls.cert_file"),
            _readable(t.get("key_file"), source, "metrics.tls.key_file"),
            None if ca is None else _readable(ca, source, "metrics.tls.client_ca_file"),
        )
    auth = None
    if raw.get("basic_auth") is not None:
        a = check_mapping(
            raw["basic_auth"], source, "metrics.basic_auth", ("username", "password_file")
        )
        key = "metrics.basic_auth.password_file"
        pw_file = _readable(a.get("password_file"), source, key)
        # trimmed, as Prometheus trims its own password_file
        password = (pw_file.read_text().strip().splitlines() or [""])[0].strip()
        if not password:
            raise ConfigError(f"{source}: {key}: {pw_file} has no password on its first line")
        user = _str(a.get("username"), source, "metrics.basic_auth.username")
        if ":" in user:
            raise ConfigError(f"{source}: metrics.basic_auth.username: must not contain ':'")
        auth = BasicAuthConfig(user, password, pw_file)
    return MetricsConfig(
        listen=listen,
        fabric=fabric,
        per_port=_bool(raw.get("per_port", d.per_port), source, "metrics.per_port"),
        tls=tls,
        basic_auth=auth,
    )


def _listen(value: object, source: str, key: str) -> tuple[str, int]:
    """``host:port`` or ``[v6 address]:port``."""
    text = _str(value, source, key)
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"{source}: {key}: expected host:port (e.g. 127.0.0.1:9683), got {text!r}"
        )
    return host, int(port)


def _readable(value: object, source: str, key: str) -> Path:
    path = _path(value, source, key)
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise ConfigError(f"{source}: {key}: cannot read {path}: {err.strerror}") from err
    return path


def _host_pattern(value: object, source: str) -> str:
    pattern = _str(value, source, "jobs.host_pattern")
    try:
        HostMatcher(pattern)
    except ConfigError as err:
        raise ConfigError(f"{source}: jobs.host_pattern: {err}") from err
    return pattern


def _classify(value: object, source: str) -> Thresholds:
    d = Thresholds()
    raw = check_mapping(value, source, "classify", ("moderate", "high", "hysteresis", "tau_s"))
    values = {
        key: _number(raw.get(key, getattr(d, key)), source, f"classify.{key}", 0)
        for key in ("moderate", "high", "hysteresis", "tau_s")
    }
    try:
        return Thresholds(**values)
    except ValueError as err:  # its message starts with the key name(s)
        raise ConfigError(f"{source}: classify.{err}") from err


def _lanes(value: object, source: str) -> LanesConfig:
    d = LaneConfig()
    keys = tuple(f for f in LaneConfig.__dataclass_fields__)
    raw = check_mapping(value, source, "lanes", keys)
    got: dict[str, Any] = {}
    auto: list[str] = []
    for key in AUTO_LANE_KEYS:
        if raw.get(key, "auto") == "auto":
            auto.append(key)
    where = f"{source}: lanes"

    def integer(key: str, low: int, high: int) -> int:
        return int(_number(raw[key], source, f"lanes.{key}", low, integer=True, maximum=high))

    def sl_list(key: str, high: int) -> tuple[int, ...]:
        items = raw[key]
        if not isinstance(items, list) or not all(type(x) is int and 0 <= x <= high for x in items):
            raise ConfigError(f"{where}.{key}: expected a list of integers 0-{high}, got {items!r}")
        return tuple(sorted(set(items)))

    for key in raw:
        if key in auto:
            continue
        if key in ("data_vls",):
            got[key] = integer(key, 1, 15)
        elif key in ("vlarb_low_cap", "vlarb_high_cap"):
            got[key] = integer(key, 1, 64)
        elif key in ("default_vl",):
            got[key] = integer(key, 0, 14)
        elif key in ("other_vl_packets",):
            got[key] = integer(key, 1, 255)
        elif key == "high_limit":
            got[key] = integer(key, 0, 255)
        elif key == "mtu":
            got[key] = _choice(raw[key], source, "lanes.mtu", (256, 512, 1024, 2048, 4096))
        elif key in ("reserved_sls", "reserved_vls"):
            got[key] = sl_list(key, 15 if key == "reserved_sls" else 14)
        elif key == "reserved_sl2vl":
            got[key] = _pairs(raw[key], source, "lanes.reserved_sl2vl", (15, 14))
        elif key == "vlarb_high":
            got[key] = _pairs(raw[key], source, "lanes.vlarb_high", (14, 255))
        elif key == "weight_law":
            got[key] = _choice(raw[key], source, "lanes.weight_law", WEIGHT_LAWS)
        elif key == "weight_ratio":
            got[key] = _number(raw[key], source, "lanes.weight_ratio", 1)
        elif key in ("min_hold_s", "min_interval_s"):
            got[key] = _number(raw[key], source, f"lanes.{key}", 0)
        elif key == "routing_engine":
            got[key] = _str(raw[key], source, "lanes.routing_engine")
        elif key == "default_class":
            got[key] = _choice(raw[key], source, "lanes.default_class", CLASSES)
        elif key == "class_intensity":
            got[key] = _class_intensity(raw[key], source, d.class_intensity)
    if "mtu" in got:
        got["mtu"] = int(got["mtu"])
    # SL 0 is the policy's DEFAULT level: unmanaged traffic (storage, IPoIB, management)
    # takes it, so jobs stay off it unless the admin says otherwise
    got.setdefault("reserved_sls", DEFAULT_RESERVED_SLS)
    return LanesConfig(base=LaneConfig(**got), auto=tuple(auto))


def _pairs(
    value: object, source: str, key: str, highs: tuple[int, int]
) -> tuple[tuple[int, int], ...]:
    """``{a: b, ...}`` or ``["a:b", ...]`` -> ((a, b), ...), both parts within 0..highs."""
    items: list[tuple[object, object]]
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list) and all(isinstance(x, str) and x.count(":") == 1 for x in value):
        items = [tuple(x.split(":")) for x in value]
    else:
        raise ConfigError(f"{source}: {key}: expected a mapping or a list of 'a:b', got {value!r}")
    out: list[tuple[int, int]] = []
    for a, b in items:
        try:
            pair = (int(str(a).strip()), int(str(b).strip()))
        except ValueError:
            pair = (-1, -1)
        if not (0 <= pair[0] <= highs[0] and 0 <= pair[1] <= highs[1]):
            raise ConfigError(
                f"{source}: {key}: {a}:{b}: expected integers 0-{highs[0]} and 0-{highs[1]}"
            )
        out.append(pair)
    return tuple(out)


def _class_intensity(
    value: object, source: str, default: tuple[float, float, float]
) -> tuple[float, float, float]:
    raw = check_mapping(value, source, "lanes.class_intensity", CLASSES)
    low, moderate, high = (
        _number(raw.get(c, default[i]), source, f"lanes.class_intensity.{c}", 0)
        for i, c in enumerate(CLASSES)
    )
    return (low, moderate, high)


def _choice(value: object, source: str, key: str, allowed: tuple[Any, ...]) -> Any:
    if value not in allowed:
        choices = ", ".join(str(a) for a in allowed)
        raise ConfigError(f"{source}: {key}: expected one of {choices}, got {value!r}")
    return value


def _number(
    value: object,
    source: str,
    key: str,
    minimum: float,
    *,
    integer: bool = False,
    maximum: float = math.inf,
) -> float:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if integer and not isinstance(number, int):
        number = None
    # NaN and infinity are numbers to YAML (.nan, .inf), never sensible here
    if number is None or not math.isfinite(number) or not minimum <= number <= maximum:
        kind = "an integer" if integer else "a number"
        upper = f" and <= {maximum:g}" if maximum != math.inf else ""
        raise ConfigError(f"{source}: {key}: expected {kind} >= {minimum:g}{upper}, got {value!r}")
    return float(number)


def _bool(value: object, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{source}: {key}: expected true or false, got {value!r}")
    return value


def check_mapping(
    value: object, source: str, key: str, allowed: tuple[str, ...]
) -> Mapping[str, Any]:
    """*value* if it is a mapping with only *allowed* keys, else ConfigError naming the key
    (``source: key.k: unknown key ...``); other files in YAML (profiles) check theirs so too."""
    where = f"{source}: {key or 'top level'}"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if k not in allowed:
            prefix = f"{key}." if key else ""
            raise ConfigError(
                f"{source}: {prefix}{k}: unknown key (expected one of {', '.join(allowed)})"
            )
    return value


def _host_list(value: object, source: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(h, str) and h for h in value):
        raise ConfigError(
            f"{source}: jobs.exclude_hosts: expected a list of host names, got {value!r}"
        )
    return tuple(value)


def _str(value: object, source: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {key}: expected a non-empty string, got {value!r}")
    return value


def _path(value: object, source: str, key: str) -> Path:
    if isinstance(value, Path):
        return value
    return Path(_str(value, source, key))
