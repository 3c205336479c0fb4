"""The sections of ``ibqos.yaml`` as frozen pydantic dataclasses.

Every key is checked by its field's annotation (:mod:`ibqos.config.fields`); unknown keys
are errors (``extra="forbid"``), so that typos do not pass silently.  A section's
``__post_init__`` makes the checks that need several of its keys.  Sections are plain
(frozen) dataclasses to the code that reads them, and code may build them too: the
checks take the values a section holds (a ``Path``, a tuple) as well as YAML's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass
from pydantic.json_schema import SkipJsonSchema

from ibqos.config.classes import Thresholds
from ibqos.config.fields import (
    Check,
    address,
    choice,
    described,
    file_name,
    flag,
    members,
    number,
    problem,
    readable,
    strings,
    text,
)
from ibqos.config.planning import CLASSIFY, LANES, LanesConfig
from ibqos.config.tuning import TuningConfig
from ibqos.config.webconfig import WebConfig, load_web_config
from ibqos.errors import ConfigError
from ibqos.fabric.hostnames import DEFAULT_HOST_PATTERN, LAB_SM_HOSTNAME, HostMatcher
from ibqos.fabric.model import DISCOVER_TIMEOUT_S

JOB_SOURCES = ("file", "slurm")
SQUEUE_FORMATS = ("auto", "json", "text")
FABRIC_SOURCES = ("ibnetdiscover", "file", "lab")
#: where the forwarding tables come from (``fabric.routes``, :mod:`ibqos.collect.routes`)
ROUTE_SOURCES = ("auto", "dump", "ibroute", "off")
BACKENDS = ("native", "perfquery", "replay")
#: ``mode``: observe computes, exports and shows diffs but never touches OpenSM; enforce
#: writes OpenSM's files.  Observe is the default, so that a fresh install changes nothing
#: on a production fabric before an admin has read what it would do (docs/deploy.md).
MODES = ("observe", "enforce")
DEFAULT_MODE = "observe"
#: OpenSM port types whose ``qos_<type>_*`` keys ibqos may manage (docs/design.md §6.2; ``sw2sw``
#: exists in NVIDIA's OpenSM only)
PORT_TYPES = ("ca", "swe", "sw2sw", "sw0", "rtr")
#: ``opensm.flavour``: which OpenSM reads the files; auto tells it from its log and opensm.conf
OPENSM_FLAVOURS = ("auto", "upstream", "nvidia")
#: where a lab keeps its ibnetdiscover output, in its directory
LAB_DISCOVERED_FILE = "ibnetdiscover.txt"

#: every section: no unknown keys; the JSON Schema describes it by its docstring
_SECTION = ConfigDict(extra="forbid", json_schema_extra=described())


def _host_pattern() -> Check:
    """A regular expression with one group that finds the host name in a NodeDescription."""

    def check(value: Any) -> str:
        pattern: str = text().func(value)
        try:
            HostMatcher(pattern)
        except ConfigError as err:
            raise problem(str(err), cause=err) from err
        return pattern

    return Check(check, {"type": "string", "minLength": 1, "format": "regex"})


def _guids() -> Check:
    def check(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list | tuple) or not all(
            isinstance(g, int) and not isinstance(g, bool) and 0 < g < 2**64 for g in value
        ):
            raise problem("expected a list of GUIDs (integers)")
        return tuple(value)

    guid = {"type": "integer", "minimum": 1, "maximum": 2**64 - 1}
    return Check(check, {"type": "array", "items": guid})


def _fraction() -> Check:
    at_least_0 = number(0).func

    def check(value: Any) -> float:
        got: float = at_least_0(value)
        if got > 1:
            raise problem(f"expected 0-1, got {got}")
        return got

    return Check(check, {"type": "number", "minimum": 0, "maximum": 1})


def _username() -> Check:
    def check(value: Any) -> str:
        user: str = text().func(value)
        if ":" in user:
            raise problem("must not contain ':'")
        return user

    return Check(check, {"type": "string", "minLength": 1, "pattern": "^[^:]*$"})


def _not_null(schema: dict[str, Any]) -> None:
    """The JSON Schema of a section YAML may leave out but not set to null."""
    schema.update(next(o for o in schema.pop("anyOf") if o != {"type": "null"}))
    schema.pop("default", None)


@dataclass(frozen=True, config=_SECTION)
class ReloadBudgetConfig:
    """How often ibqos may make OpenSM re-read its files (``opensm.reload_budget``).

    A token bucket: it holds at most ``burst`` reloads and gains ``per_minute`` a minute;
    every signal takes one (an apply's, its rollback's, a repeat after a signal was cut
    short), and an apply starts only when two are left, for itself and its rollback.
    When it is spent nothing is written and the cycle reports "reload budget spent: next
    reload in N s" (``ibqos_opensm_reloads_deferred_total``).

    Attributes:
        burst: reloads the bucket holds at most, and at start (2 or more).
        per_minute: reloads it gains a minute.
    """

    burst: Annotated[int, number(2, integer=True)] = 6
    per_minute: Annotated[float, number(0.01)] = 2.0


@dataclass(frozen=True, config=_SECTION)
class OpenSMConfig:
    """Where the site's OpenSM keeps what ibqos reads and writes, and how to reach it.

    Attributes:
        conf: opensm.conf (must exist when OpenSM starts, or SIGHUP re-reads nothing).
        policy_file: the ``qos_policy_file`` OpenSM was started with.
        log: OpenSM's log, read after every reload for errors and the sweep's end; when it
            cannot be read ibqos waits 2 s after a signal and relies on ``verify``.
        pid_file: SIGHUP goes to the pid in it, once that pid is known to be OpenSM's
            (its executable, and a start before the file was written); or
        unit: a systemd unit whose main process gets SIGHUP (better when OpenSM runs under
            systemd: no pid file to go stale); or
        reload_command: a command that makes OpenSM re-read its files (then ibqos cannot
            tell whether OpenSM runs).  At most one of the three; none: the files are
            written and OpenSM is not signalled.
        port_types: the port types whose ``qos_<type>_*`` keys ibqos manages; on NVIDIA's
            OpenSM ``swe`` brings ``sw2sw`` (switch-to-switch ports) with it, and upstream
            OpenSM has no ``sw2sw``.
        flavour: the OpenSM that reads the files: "upstream" (3.3.x), "nvidia" (5.x), or
            "auto" (told from the version OpenSM logs, else from opensm.conf's keys).
        sweep_timeout_s: seconds to wait for OpenSM's heavy sweep after a signal.
        outside_quiet_s: seconds OpenSM's files must stand unchanged after another writer
            (config management) last rewrote ibqos's lines before ibqos writes them once
            more; until then it holds (docs/deploy.md).
        verify: after a reload, check through SA that OpenSM serves the new tables and SLs.
        reload_budget: how often OpenSM may be signalled (a token bucket).
    """

    conf: Annotated[Path, file_name()] = Path("/etc/opensm/opensm.conf")
    policy_file: Annotated[Path, file_name()] = Path("/etc/opensm/qos-policy.conf")
    log: Annotated[Path, file_name()] = Path("/var/log/opensm.log")
    pid_file: Annotated[Path | None, file_name(optional=True)] = None
    unit: Annotated[str | None, text(optional=True)] = None
    reload_command: Annotated[
        tuple[str, ...], strings("a list of strings (argv)", blank_items=True, none=True)
    ] = Field(default=(), json_schema_extra={"default": None})
    port_types: Annotated[tuple[str, ...], members(PORT_TYPES)] = ("ca", "swe")
    flavour: Annotated[str, choice(OPENSM_FLAVOURS)] = "auto"
    sweep_timeout_s: Annotated[float, number(1)] = 30.0
    outside_quiet_s: Annotated[float, number(1)] = 300.0
    verify: Annotated[bool, flag()] = True
    reload_budget: ReloadBudgetConfig = dataclasses.field(default_factory=ReloadBudgetConfig)

    def __post_init__(self) -> None:
        given = (self.pid_file is not None, self.unit is not None, bool(self.reload_command))
        if sum(given) > 1:
            raise problem("give at most one of pid_file, unit, reload_command")


@dataclass(frozen=True, config=_SECTION)
class AgentConfig:
    """The daemon (``ibqos run``); its cycle interval is ``collect.interval_s``.

    Attributes:
        state_dir: job -> SL bindings, the plan, backups of OpenSM's files, the apply lock
            (an absolute path: under systemd a relative one would name a directory of /,
            and two agents started from different directories would not see each other).
        job_poll_s: seconds between two looks at the job source between cycles, so a job
            that starts or ends is acted on at once.
        socket: the local (UNIX) socket where ``ibqos job-sl`` asks for a job's SL; None
            (or ""): not served.
        sl_listen: (host, port) where the same questions are answered over TCP, for
            TaskProlog scripts on compute nodes (``docs/slurm.md``); None: not served.
        sl_max_connections: connections the SL server holds at once, in all; never more
            than the soft limit of open files less 128 (kept for the cycle).
        sl_max_per_peer: connections it holds at once from one peer (a user on the
            socket, an address over TCP); more are answered ``ERROR busy`` and closed.
        sl_idle_s: seconds a connection may take to send its whole question; then it is
            closed.
    """

    state_dir: Annotated[Path, file_name(absolute=True)] = Path("/var/lib/ibqos")
    job_poll_s: Annotated[float, number(0.05)] = 0.5
    socket: Annotated[Path | None, file_name(off=True)] = Path("/run/ibqos/ibqos.sock")
    sl_listen: Annotated[tuple[str, int] | None, address()] = None
    sl_max_connections: Annotated[int, number(1, integer=True)] = 65536
    sl_max_per_peer: Annotated[int, number(1, integer=True)] = 4096
    sl_idle_s: Annotated[float, number(0.1, 600)] = 5.0


@dataclass(frozen=True, config=_SECTION)
class JobsConfig:
    """Where running jobs come from, and how their hosts are found on the fabric.

    Attributes:
        source: "file" (a job file or a directory of them, ``docs/jobs.md``) or "slurm".
        path: the file or directory.
        host_pattern: regular expression with one group that finds the host name in a
            CA's NodeDescription (default: its first word).  CAs it finds no name in are
            not compute hosts.
        exclude_hosts: hosts on the fabric that run no jobs (the subnet manager's host,
            storage and login nodes): not counted as leaf-switch capacity by the sharing
            report, never used to place a characterized job.  Default: the lab's OpenSM
            host.
    """

    source: Annotated[str, choice(JOB_SOURCES, shown=str(JOB_SOURCES), nonempty_text=True)] = "file"
    path: Annotated[Path, file_name()] = Path("/etc/ibqos/jobs.yaml")
    host_pattern: Annotated[str, _host_pattern()] = DEFAULT_HOST_PATTERN
    exclude_hosts: Annotated[tuple[str, ...], strings("a list of host names", empty=True)] = (
        LAB_SM_HOSTNAME,
    )


@dataclass(frozen=True, config=_SECTION)
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
            drops a file per job start or end; None (or ""): no notifications, polling only.
    """

    squeue: Annotated[
        tuple[str, ...], strings("a command (string or list of strings)", one=True)
    ] = ("squeue",)
    conf: Annotated[Path | None, file_name(optional=True)] = None
    format: Annotated[str, choice(SQUEUE_FORMATS)] = "auto"
    poll_s: Annotated[float, number(0.1)] = 10.0
    grace_s: Annotated[float, number(0)] = 300.0
    timeout_s: Annotated[float, number(0.1)] = 10.0
    notify_dir: Annotated[Path | None, file_name(off=True)] = Path("/run/ibqos/notify")


@dataclass(frozen=True, config=_SECTION)
class FabricConfig:
    """Where the topology comes from.

    Attributes:
        source: "ibnetdiscover" (run it: SMP discovery from this host), "file" (an
            ibnetdiscover output at *path*), or "lab" (the lab's recorded discovery; the
            default when the config has a lab section).
        path: the file for source "file".
        root_guids: GUIDs of the top-level switches, for fabrics where levels cannot be
            inferred from the leaves (like OpenSM's ftree root_guid_file); empty: infer.
        refresh_s: seconds between two reads of the topology while collecting, to notice
            ports that vanish or appear (0: never read it again).  A read that fails
            keeps the last topology; the next try is *refresh_s* after it ended.
        discover_timeout_s: seconds one ibnetdiscover run may take before it is killed
            (source "ibnetdiscover"); a fabric of thousands of nodes needs tens.
        lft_dump: OpenSM's ``opensm-lfts.dump`` (in its ``dump_files_dir``; written after
            each heavy sweep while the ROUTING log flag is on): the routes attribution and
            tuning's prediction use.  null: none.
        routes: where the forwarding tables come from: "dump" (*lft_dump*), "ibroute"
            (SMP reads of every switch's LFT, again after a fabric change and every
            *refresh_s*), "auto" (the dump while it is configured and readable, else
            ibroute) or "off" (no routes: attribution splits by subtree, tuning predicts
            over D-mod-K routes).
    """

    source: Annotated[str, choice(FABRIC_SOURCES)] = "ibnetdiscover"
    path: Annotated[Path | None, file_name(optional=True)] = None
    root_guids: Annotated[tuple[int, ...], _guids()] = ()
    refresh_s: Annotated[float, number(0)] = 300.0
    discover_timeout_s: Annotated[float, number(1)] = DISCOVER_TIMEOUT_S
    lft_dump: Annotated[Path | None, file_name(optional=True)] = None
    routes: Annotated[str, choice(ROUTE_SOURCES)] = "auto"

    def __post_init__(self) -> None:
        if self.source == "file" and self.path is None:
            raise problem("required when fabric.source is file", key="path")
        if self.routes == "dump" and self.lft_dump is None:
            raise problem("required when fabric.routes is dump", key="lft_dump")


@dataclass(frozen=True, config=_SECTION)
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
        per_sl: probe the switches for per-SL data counters (PortXmitDataSL and
            PortRcvDataSL, no capability bit announces them) and, where both answer, read
            them every sweep and clear them before they saturate (native backend only;
            ``ibqos.collect.per_sl``).  Two more MADs per port of such a switch.
        ca: CA to send MADs from (native); None: the first.
        port: CA port (native); 0: the first active one.
        window: MADs in flight at most (native).
        timeout_s: seconds to wait for one reply (native) or one perfquery process.
        retries: extra tries per MAD after a timeout (native).
        workers: perfquery processes at once.
        per_switch: one perfquery process per switch rather than per port.
        replay_path: recording directory for the replay backend.
        replay_loop: start the recording over when it ends.
        rate_margin: a port's data rate (either direction) above its link's capacity
            times (1 + *rate_margin*) is not a measurement (counters reset and rewritten,
            a PMA that lies): that sample is dropped, as if the port had not answered.
        min_coverage: the share of ports (0..1) a sweep must read with a usable sample for
            the agent to change its plan on it; below it, the plan in force is kept.
        sweep_timeout_s: seconds one sweep may take (native: MADs still unanswered then
            fail their ports; perfquery: processes not started by then are not run, and
            none runs past it); null (the default): *interval_s*, so a sweep ends before
            the next one is due.
    """

    backend: Annotated[str, choice(BACKENDS)] = "native"
    interval_s: Annotated[float, number(0.01)] = 10.0
    xmit_wait: Annotated[bool, flag()] = True
    vl_xmit_wait: Annotated[bool, flag()] = False
    per_sl: Annotated[bool, flag()] = True
    ca: Annotated[str | None, text(optional=True)] = None
    port: Annotated[int, number(0, 254, integer=True)] = 0
    window: Annotated[int, number(1, integer=True)] = 32
    timeout_s: Annotated[float, number(0.001)] = 0.5
    retries: Annotated[int, number(0, integer=True)] = 2
    workers: Annotated[int, number(1, integer=True)] = 4
    per_switch: Annotated[bool, flag()] = True
    replay_path: Annotated[Path | None, file_name(optional=True)] = None
    replay_loop: Annotated[bool, flag()] = False
    rate_margin: Annotated[float, number(0, 10)] = 0.1
    min_coverage: Annotated[float, _fraction()] = 0.9
    sweep_timeout_s: Annotated[float | None, number(0.01, optional=True)] = None

    def __post_init__(self) -> None:
        if self.backend == "replay" and self.replay_path is None:
            raise problem("required when collect.backend is replay", key="replay_path")

    @property
    def sweep_deadline_s(self) -> float:
        """Seconds one sweep may take: *sweep_timeout_s*, else *interval_s*."""
        return self.interval_s if self.sweep_timeout_s is None else self.sweep_timeout_s


@dataclass(frozen=True, config=_SECTION)
class TlsConfig:
    """HTTPS for the exporter (``metrics.tls``).

    Attributes:
        cert_file: the server's certificate chain (PEM).
        key_file: its private key (PEM).
        client_ca_file: CA certificates clients must present a certificate from; None:
            no client certificates asked for.
    """

    cert_file: Annotated[Path, readable()]
    key_file: Annotated[Path, readable()]
    client_ca_file: Annotated[Path | None, readable(optional=True)] = None


@dataclass(frozen=True, config=_SECTION)
class BasicAuthConfig:
    """HTTP basic authentication for the exporter (``metrics.basic_auth``).

    Attributes:
        username: the user Prometheus sends.
        password_file: a file whose first line is the password, read when the config is
            loaded, so the YAML holds no secret.
        password: the password read from it (not a key of the YAML).
    """

    username: Annotated[str, _username()]
    password_file: Annotated[Path, readable()]
    password: SkipJsonSchema[str] = dataclasses.field(init=False, repr=False, default="")

    def __post_init__(self) -> None:
        # trimmed, as Prometheus trims its own password_file
        lines = self.password_file.read_text().strip().splitlines()
        password = (lines or [""])[0].strip()
        if not password:
            raise problem(
                f"{self.password_file} has no password on its first line", key="password_file"
            )
        object.__setattr__(self, "password", password)  # frozen: set once, while built


@dataclass(frozen=True, config=_SECTION)
class MetricsConfig:
    """The Prometheus exporter of ``ibqos run`` (``docs/metrics.md``).

    Attributes:
        listen: (host, port) to serve ``/metrics`` on; None (or ""): no exporter.
            Loopback by default: the metrics name jobs and users.
        fabric: the fabric's name in ``ibqos_fabric_info`` (the dashboards' variable).
        per_port: also export per-port traffic (3 series per swept port).
        web_config_file: the web configuration file Prometheus exporters share
            (node_exporter's ``--web.config.file``: ``tls_server_config``, bcrypt-hashed
            ``basic_auth_users``); None: none.  Instead of *tls* and *basic_auth*.
        tls: serve HTTPS; None: plain HTTP.
        basic_auth: require this user and password (a plaintext password file); None:
            no authentication.
        web: the web configuration file as read (not a key of the YAML).
    """

    listen: Annotated[tuple[str, int] | None, address()] = Field(
        default=("127.0.0.1", 9683), json_schema_extra={"default": "127.0.0.1:9683"}
    )
    fabric: Annotated[str, text()] = "default"
    per_port: Annotated[bool, flag()] = False
    web_config_file: Annotated[Path | None, readable(optional=True)] = None
    tls: TlsConfig | None = None
    basic_auth: BasicAuthConfig | None = None
    web: SkipJsonSchema[WebConfig | None] = dataclasses.field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.web_config_file is None:
            return
        if self.tls is not None or self.basic_auth is not None:
            raise problem(
                "set HTTPS and users in the web configuration file, or in metrics.tls and"
                " metrics.basic_auth, not in both",
                key="web_config_file",
            )
        try:
            web = load_web_config(self.web_config_file)
        except ConfigError as err:
            raise problem(str(err), key="web_config_file", cause=err) from err
        object.__setattr__(self, "web", web)  # frozen: set once, while built


@dataclass(frozen=True, config=_SECTION)
class ProfilesConfig:
    """Job profiles: priors for new jobs (``docs/characterize.md``).

    Attributes:
        dir: the profile directory; None (or ""): no profiles.
        min_confidence: profiles less confident than this (0..1) are not used.
        learn: the agent adds every finished job's measured class to its application's
            profile (creating it); needs ``dir`` writable.
    """

    dir: Annotated[Path | None, file_name(off=True)] = None
    min_confidence: Annotated[float, _fraction()] = 0.5
    learn: Annotated[bool, flag()] = False

    def __post_init__(self) -> None:
        if self.learn and self.dir is None:
            raise problem("needs profiles.dir to write to", key="learn")


@dataclass(frozen=True, config=_SECTION)
class LabConfig:
    """Set when the config belongs to a simulated lab fabric (written by ``ibqos lab up``).

    Attributes:
        name: the lab's name.
        dir: the lab's directory.
    """

    name: Annotated[str, text()]
    dir: Annotated[Path, file_name()]

    @property
    def discovered(self) -> Path:
        """The lab's fabric as discovered once OpenSM came up (ibnetdiscover output)."""
        return self.dir / LAB_DISCOVERED_FILE


@dataclass(frozen=True, config=_SECTION)
class Config:
    """The ibqos configuration (``ibqos.yaml``): every section, defaults for those not
    given.

    Attributes:
        source: the file it was read from (not a key of the YAML).
        mode: "observe" (compute, export and show the diffs, never touch OpenSM) or
            "enforce" (write OpenSM's files, reload and verify it); docs/deploy.md.
        opensm: OpenSM's files and how to make it re-read them.
        jobs: where running jobs come from.
        slurm: the Slurm job source.
        fabric: where the topology comes from.
        collect: how port counters are read.
        classify: how intensities become classes.
        lanes: what the planner may use.
        tuning: how the agent tries setups beside its favour-light law.
        agent: the daemon.
        metrics: the Prometheus exporter.
        profiles: job profiles, priors for new jobs.
        lab: the simulated lab fabric the config belongs to.
    """

    source: SkipJsonSchema[str]
    mode: Annotated[str, choice(MODES)] = DEFAULT_MODE
    opensm: OpenSMConfig = dataclasses.field(default_factory=OpenSMConfig)
    jobs: JobsConfig = dataclasses.field(default_factory=JobsConfig)
    slurm: SlurmConfig = dataclasses.field(default_factory=SlurmConfig)
    fabric: FabricConfig = dataclasses.field(default_factory=FabricConfig)
    collect: CollectConfig = dataclasses.field(default_factory=CollectConfig)
    classify: Annotated[Thresholds, CLASSIFY] = dataclasses.field(default_factory=Thresholds)
    lanes: Annotated[LanesConfig, LANES] = dataclasses.field(default_factory=LanesConfig)
    tuning: TuningConfig = dataclasses.field(default_factory=TuningConfig)
    agent: AgentConfig = dataclasses.field(default_factory=AgentConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    profiles: ProfilesConfig = dataclasses.field(default_factory=ProfilesConfig)
    lab: LabConfig | None = Field(default=None, json_schema_extra=_not_null)

    @model_validator(mode="before")
    @classmethod
    def _lab_reads_its_fabric(cls, data: Any) -> Any:
        """A lab's config reads the lab's own discovery unless told otherwise."""
        if not isinstance(data, dict) or data.get("lab") is None:
            return data  # code building a Config passes ArgsKwargs: it says what it means
        fabric = data.get("fabric", {})
        if isinstance(fabric, dict) and "source" not in fabric:
            data = data | {"fabric": fabric | {"source": "lab"}}
        return data

    def __post_init__(self) -> None:
        if self.fabric.source == "lab" and self.lab is None:
            raise problem("'lab' needs a lab section", key="fabric.source")
