"""The ``ibqos`` command: click commands over the core, and the one place errors become
messages and exit codes (known errors: ``ibqos: <category>: <message>``, exit 1; usage
errors: exit 2; Ctrl-C: exit 130)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import yaml

from ibqos import __version__
from ibqos.agent.daemon import Agent, make_job_source
from ibqos.agent.handoff import ask_sl, check_job_id
from ibqos.agent.lanes import resolve_lanes
from ibqos.agent.sdnotify import Notifier
from ibqos.agent.state import load_state
from ibqos.agent.status import (
    render_status,
)
from ibqos.agent.wiring import (
    fabric_from_config,
)
from ibqos.attribute.jobmap import FileJobSource
from ibqos.cli.characterize import characterize as characterize_group
from ibqos.cli.deploy import COMMANDS as DEPLOY_COMMANDS
from ibqos.collect.loop import Collector
from ibqos.collect.output import FORMATS, render
from ibqos.config.schema import BACKENDS, Config, find_config, load_config, parse_config
from ibqos.errors import IbqosError, LabError, TopologyError
from ibqos.fabric.model import (
    Fabric,
    fabric_from_file,
)
from ibqos.fabric.topology import LANE_DATA_BITS_PER_S, WIDTHS, parse_ibnetdiscover
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.jobfile import PATTERNS, parse_jobs
from ibqos.lab import manage
from ibqos.lab.lab import READBACK_S, Lab, LabPaths, default_root, normalize_for_ibsim
from ibqos.lab.traffic import CONTENTION_MODELS
from ibqos.opensm.check import check_file
from ibqos.plan.decide import Decider
from ibqos.plan.output import FORMATS as PLAN_FORMATS
from ibqos.plan.output import render as render_plan
from ibqos.sim.command import network as sim_network
from ibqos.sim.command import simulate as run_simulation
from ibqos.sim.evaluate import MODELS as SIM_MODELS
from ibqos.sim.fluid import GRANULARITIES as SIM_GRANULARITIES
from ibqos.sim.fluid import Granularity
from ibqos.sim.policies import DEFAULT_LANES as SIM_DEFAULT_LANES
from ibqos.sim.policies import POLICIES as SIM_POLICIES
from ibqos.sim.report import FORMATS as SIM_FORMATS

log = logging.getLogger(__name__)


class _Cli(click.Group):
    """Maps ibqos errors to one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except IbqosError as err:
            click.echo(f"ibqos: {err.category}: {err}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("ibqos: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            ctx.exit(0)
        except Exception as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(
                f"ibqos: unexpected error: {type(err).__name__}: {err} "
                "(run with --debug for a traceback)",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=_Cli)
@click.version_option(__version__, prog_name="ibqos")
@click.option("--debug", is_flag=True, help="Log at debug level; tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """InfiniBand QoS companion agent for OpenSM."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )


_topology_option = click.option(
    "--topology",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Read the fabric from this ibnetdiscover file instead of fabric.source.",
)
_config_option = click.option(
    "--config",
    "path",
    type=click.Path(path_type=Path),
    help="Config file (default: $IBQOS_CONFIG, then /etc/ibqos/ibqos.yaml).",
)


@cli.command("config")
@_config_option
def show_config(path: Path | None) -> None:
    """Validate the ibqos configuration and print it as loaded."""
    config = load_config(find_config(path))
    out = {
        "source": config.source,
        "mode": config.mode,
        "opensm": {k: str(v) if v is not None else None for k, v in vars(config.opensm).items()},
        "jobs": {
            "source": config.jobs.source,
            "path": str(config.jobs.path),
            "host_pattern": config.jobs.host_pattern,
        },
        "slurm": _plain(vars(config.slurm)),
    }
    for section in ("fabric", "collect", "classify"):
        out[section] = _plain(vars(getattr(config, section)))
    lanes = _plain(vars(config.lanes.base))
    out["lanes"] = {k: "auto" if k in config.lanes.auto else v for k, v in lanes.items()}
    if config.lab is not None:
        out["lab"] = {"name": config.lab.name, "dir": str(config.lab.dir)}
    click.echo(yaml.safe_dump(out, sort_keys=False), nl=False)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Config values as YAML scalars and lists (paths as text, tuples as lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, Path):
            return str(v)
        return [plain(x) for x in v] if isinstance(v, tuple) else v

    return {k: plain(v) for k, v in values.items()}


# -- collect ---------------------------------------------------------------------------
def _load_or_defaults(path: Path | None) -> Config:
    """The config, or the defaults when none was named and the default file is absent:
    ``ibqos collect`` also serves as a debug tool on hosts where ibqos is not set up."""
    found = find_config(path)
    if path is None and "IBQOS_CONFIG" not in os.environ and not found.exists():
        log.debug("no %s: using the default configuration", found)
        return parse_config({}, "defaults")
    return load_config(found)


@cli.command("collect")
@_config_option
@click.option("--backend", type=click.Choice(BACKENDS), help="Override collect.backend.")
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Replay this recording (implies --backend replay).",
)
@_topology_option
@click.option("--once", is_flag=True, help="Two sweeps one interval apart, one table, exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    help="Seconds between sweeps (default: collect.interval_s; 1 with --once).",
)
@click.option("--count", type=click.IntRange(min=1), help="Print this many tables, then exit.")
@click.option("--window", type=click.IntRange(min=1), help="MADs in flight (native).")
@click.option(
    "--record",
    "record_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also record every sweep into this directory (for --replay).",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def collect(
    path: Path | None,
    backend: str | None,
    replay_dir: Path | None,
    topology: Path | None,
    once: bool,
    interval: float | None,
    count: int | None,
    window: int | None,
    record_dir: Path | None,
    fmt: str,
) -> None:
    """Read every port's counters and print per-port rates, like an exporter's debug mode.

    Rates need two sweeps, so the first table comes one interval after the start.  JSON
    output is a list of rows per table (one line each); docs/collect.md lists the keys.
    """
    config = _load_or_defaults(path)
    cfg = config.collect
    if replay_dir is not None:
        cfg = replace(cfg, backend="replay", replay_path=replay_dir)
    elif backend == "replay" and cfg.replay_path is None:
        raise click.UsageError("--backend replay needs --replay DIR")
    elif backend is not None:
        cfg = replace(cfg, backend=backend)
    if window is not None:
        cfg = replace(cfg, window=window)
    roots = config.fabric.root_guids or None
    fabric: Fabric | None
    if topology is not None:
        fabric, discover = fabric_from_file(topology, root_guids=roots), None
    elif cfg.backend == "replay":
        fabric, discover = None, None  # the recording names its ports
    else:
        fabric = fabric_from_config(config)
        refresh = config.fabric.refresh_s
        discover = (lambda: fabric_from_config(config)) if refresh > 0 else None
    pause = interval if interval is not None else (1.0 if once else cfg.interval_s)
    with Collector(
        cfg, fabric, discover=discover, refresh_s=config.fabric.refresh_s, record=record_dir
    ) as collector:
        collector.run(1 if once else count, pause, lambda r: click.echo(render(r, fmt), nl=False))


# -- plan ------------------------------------------------------------------------------
@cli.command("plan")
@_config_option
@click.option(
    "--replay",
    "replay_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Plan on this recording's first two sweeps instead of the live fabric.",
)
@_topology_option
@click.option(
    "--jobs",
    "jobs_path",
    type=click.Path(path_type=Path),
    help="Job file or directory instead of jobs.path.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    help="Seconds between the two sweeps (default: collect.interval_s).",
)
@click.option(
    "--format", "fmt", type=click.Choice(PLAN_FORMATS), default="table", show_default=True
)
def plan_command(
    path: Path | None,
    replay_dir: Path | None,
    topology: Path | None,
    jobs_path: Path | None,
    interval: float | None,
    fmt: str,
) -> None:
    """Run one collection + plan cycle and print jobs and lanes; change nothing.

    Two sweeps one interval apart give the rates; each job's traffic per fat-tree level,
    utilization, class, SL and VL follow, then the lanes (VL, weight, SLs, jobs).  The
    JSON layout is documented in docs/plan.md.
    """
    config = _load_or_defaults(path)
    cfg = config.collect
    if replay_dir is not None:
        cfg = replace(cfg, backend="replay", replay_path=replay_dir)
    roots = config.fabric.root_guids or None
    if topology is not None:
        fabric = fabric_from_file(topology, root_guids=roots)
    elif cfg.backend == "replay" and config.fabric.source == "ibnetdiscover":
        raise click.UsageError(
            "a replay needs the fabric it was recorded on: --topology FILE or fabric.source"
        )
    else:
        fabric = fabric_from_config(config)
    # a bad job file (or a Slurm that does not answer) fails first
    jobs = (FileJobSource(jobs_path) if jobs_path else make_job_source(config)).jobs()
    lanes, notes = resolve_lanes(config, fabric, read_ports=cfg.backend != "replay")
    for note in notes:
        log.info("%s", note)
    decider = Decider.from_config(config, fabric, lanes)
    pause = interval if interval is not None else cfg.interval_s
    with Collector(cfg, fabric) as collector:
        collector.step()  # rates need two sweeps: the first is the baseline
        if cfg.backend != "replay":
            time.sleep(pause)
        rates = collector.step()
    decision = decider.decide(rates, jobs, time.time())
    click.echo(render_plan(decision, fmt), nl=False)


# -- the agent -------------------------------------------------------------------------
@cli.command("run")
@_config_option
@click.option(
    "--dry-run", is_flag=True, help="Print the plan and diffs of OpenSM's files; write nothing."
)
@click.option("--once", is_flag=True, help="One full cycle (two sweeps), then exit.")
@click.option(
    "--simulate",
    is_flag=True,
    help="With --dry-run: also show the simulated effect on the jobs (in force vs proposed).",
)
def run_command(path: Path | None, dry_run: bool, once: bool, simulate: bool) -> None:
    """Run the agent: sweep, plan, and rewrite OpenSM's QoS files every collect.interval_s.

    SIGTERM ends it after the current cycle (exit 0); SIGHUP re-reads the config.  With
    mode: observe (the default) or --dry-run nothing is written and OpenSM is never
    signalled.  Prometheus metrics are served on metrics.listen (not with --once).  Under
    systemd (ibqos.service) it notifies READY, STATUS and the watchdog.
    """
    found = find_config(path)
    config = load_config(found)
    if simulate and not dry_run:
        raise click.UsageError("--simulate needs --dry-run")
    agent = Agent(
        config,
        found,
        dry_run=dry_run,
        simulate=simulate,
        echo=lambda text: click.echo(text, nl=False),
        notifier=None if once else Notifier.from_env(),  # Type=notify (ibqos.service)
    )
    try:
        if not dry_run:
            # one writer per state directory: a --once cycle writes OpenSM's files (enforce)
            # and state.json like the daemon, and restore must not run meanwhile
            agent.hold_lock()
        if not once:
            agent.serve_metrics()
            if not dry_run:
                agent.serve_sl()
        agent.install_signal_handlers()
        ctx = click.get_current_context()
        ctx.exit(agent.run(cycles=1 if once else None))
    finally:
        agent.close()


@cli.command("job-sl")
@click.argument("job_id")
@_config_option
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The agent's socket (default: agent.socket of the config).",
)
@click.option("--server", metavar="HOST:PORT", help="Ask over TCP (agent.sl_listen) instead.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=60),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the answer.",
)
def job_sl_command(
    job_id: str, path: Path | None, socket_path: Path | None, server: str | None, timeout: float
) -> None:
    """Print the SL ibqos gave job JOB_ID (asking the running agent; a job it does not
    know yet gets one at once if its job source runs it).

    Exit 1 with one line on stderr if ibqos is not running, the job is unknown or the
    answer takes longer than --timeout: the job then runs on the default SL.  The
    TaskProlog in contrib/slurm uses this (docs/slurm.md).
    """
    check_job_id(job_id, "JOB_ID")
    address: tuple[str, int] | None = None
    if server is not None:
        if socket_path is not None:
            raise click.UsageError("give at most one of --socket and --server")
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(f"expected HOST:PORT, got {server!r}", param_hint="--server")
        address = (host.strip("[]"), int(port))
    elif socket_path is None:
        socket_path = _load_or_defaults(path).agent.socket
        if socket_path is None:
            raise click.UsageError("agent.socket is off in the config: give --socket or --server")
    sl = ask_sl(job_id, timeout, socket_path=socket_path, server=address)
    click.echo(str(sl))


@cli.command("status")
@_config_option
@click.option(
    "--format", "fmt", type=click.Choice(PLAN_FORMATS), default="table", show_default=True
)
def status_command(path: Path | None, fmt: str) -> None:
    """Show the plan in force and the last apply result, from the agent's state directory."""
    config = load_config(find_config(path))
    state = load_state(config.agent.state_dir)
    if fmt == "json":
        doc = {
            "updated_s": state.updated_s,
            "mode": state.mode,
            "last_apply": state.last_apply,
            "plan": state.plan,
        }
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(render_status(state, config.agent.state_dir), nl=False)


@cli.command("simulate")
@click.option("--xgft", help='Fat tree, "H;m1,..,mH;w1,..,wH" (D-mod-K routes, as ftree spreads).')
@click.option(
    "--width", type=click.Choice([str(w) for w in WIDTHS]), default="4", show_default=True
)
@click.option(
    "--speed", type=click.Choice(list(LANE_DATA_BITS_PER_S)), default="EDR", show_default=True
)
@_topology_option
@click.option(
    "--lfts",
    type=click.Path(path_type=Path, dir_okay=False),
    help="OpenSM's opensm-lfts.dump: the routes of --topology.",
)
@click.option(
    "--jobs",
    "jobs_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Job file in the lab's format (docs/jobs.md), with pattern, rate, duty, period.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice([*SIM_POLICIES, "all"]),
    help="Policy to simulate (repeat, or 'all'); default ibqos.",
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Simulate the plan in this `ibqos plan --format json` output.",
)
@click.option("--model", type=click.Choice(SIM_MODELS), default="fluid", show_default=True)
@click.option(
    "--senders",
    type=click.Choice(SIM_GRANULARITIES),
    default="auto",
    show_default=True,
    help="Fluid model: a rate per (job, host), per job, or auto (per host up to 512 hosts).",
)
@click.option(
    "--buffers",
    type=click.IntRange(min=0),
    help="Switch input buffers per VL, in MTU packets, of --model: the packet model's"
    " (default 8), or the fluid model's (default 8 with senders per host, none per job;"
    " buffers, head-of-line blocking and the drain, docs/simulate.md).",
)
@click.option(
    "--fluid-buffers",
    type=click.IntRange(min=0),
    help="With --model packet: the fluid model's buffers (as --buffers) where ibqos and"
    " optimal plan by simulating it (default as for --model fluid; refused when neither"
    " policy is asked for).",
)
@click.option("--iterations", type=click.IntRange(min=1), default=10, show_default=True)
@_config_option
@click.option("--format", "fmt", type=click.Choice(SIM_FORMATS), default="table", show_default=True)
def simulate_command(
    xgft: str | None,
    width: str,
    speed: str,
    topology: Path | None,
    lfts: Path | None,
    jobs_path: Path,
    policies: tuple[str, ...],
    plan_file: Path | None,
    model: str,
    senders: Granularity,
    buffers: int | None,
    fluid_buffers: int | None,
    iterations: int,
    path: Path | None,
    fmt: str,
) -> None:
    """Predict what a QoS policy does to a job mix: each job's time alone and sharing.

    Jobs iterate (compute, then communicate under their pattern); the contention of a job
    is its time for N iterations with the mix minus alone.  E is the one-vl total over the
    policy's.  Lanes come from --config's lanes section (default: ibqos's defaults).
    See docs/simulate.md.
    """
    lanes = SIM_DEFAULT_LANES
    if path is not None:
        lanes = replace(load_config(find_config(path)).lanes.base, min_hold_s=0, min_interval_s=0)
    net = sim_network(xgft, int(width), speed, topology, lfts)
    text = run_simulation(
        net,
        jobs_path,
        policies,
        plan_file,
        model,
        iterations,
        lanes,
        fmt,
        senders,
        buffers,
        fluid_buffers,
    )
    click.echo(text, nl=False)


@cli.command("check-opensm")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--data-vls", type=click.IntRange(1, 15), help="Data VLs of the fabric (OperVLs).")
@click.option("--vlarb-cap", type=click.IntRange(1, 64), help="VLArbLowCap/HighCap of the ports.")
def check_opensm_command(
    files: tuple[Path, ...], data_vls: int | None, vlarb_cap: int | None
) -> None:
    """Check opensm.conf and qos-policy.conf files against OpenSM's grammar and its traps.

    One line per finding (FILE:LINE: message); exit 1 if any is an error, i.e. something
    OpenSM would drop or misread.
    """
    errors = 0
    for file in files:
        findings = check_file(
            file, data_vls=data_vls, vlarb_low_cap=vlarb_cap, vlarb_high_cap=vlarb_cap
        )
        for finding in findings:
            click.echo(f"{finding.severity}: {finding}")
        errors += sum(f.severity == "error" for f in findings)
        if not findings:
            click.echo(f"{file}: ok")
    if errors:
        click.get_current_context().exit(1)


@cli.command("check-config")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def check_config_command(file: Path) -> None:
    """Validate an ibqos config file as a whole; one line per problem, exit 1 if any."""
    load_config(file)
    click.echo(f"{file}: ok")


# -- lab -------------------------------------------------------------------------------
_root_option = click.option(
    "--root",
    type=click.Path(path_type=Path),
    default=None,
    help="Directory holding labs (default: $IBQOS_LAB_ROOT, else $XDG_STATE_HOME/ibqos/labs).",
)


@cli.group()
def lab() -> None:
    """A simulated fabric: real ibsim + real OpenSM + a traffic model of running jobs."""


@lab.command("up")
@click.option("--name", required=True, help="Lab name ([A-Za-z][A-Za-z0-9_-]*).")
@click.option("--xgft", help='Fat tree to build, "H;m1,..,mH;w1,..,wH" (e.g. "2;8,4;1,2").')
@click.option(
    "--topology",
    type=click.Path(path_type=Path),
    help="Topology file in ibnetdiscover format instead of --xgft.",
)
@click.option(
    "--width",
    type=click.Choice([str(w) for w in WIDTHS]),
    default="4",
    show_default=True,
    help="Link width (lanes) for --xgft.",
)
@click.option(
    "--speed",
    type=click.Choice(list(LANE_DATA_BITS_PER_S)),
    default="EDR",
    show_default=True,
    help="Lane speed for --xgft.",
)
@click.option("--jobs", type=click.Path(path_type=Path), help="Job file (docs/jobs.md).")
@click.option("--sm-host", help="CA that runs OpenSM (default: opensm01, else the first CA).")
@click.option(
    "--tick",
    "tick_s",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between traffic ticks.",
)
@click.option(
    "--opensm-option",
    "osm_opts",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra opensm.conf option (repeatable).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds to wait for OpenSM to bring the subnet up.",
)
@click.option(
    "--contention",
    type=click.Choice(CONTENTION_MODELS),
    default="crude",
    show_default=True,
    help="How jobs share links: crude (iterations follow the clock; overload trims bytes) "
    "or fluid (the contention simulator under the lanes read back from the switches; "
    "docs/lab.md).",
)
@click.option(
    "--readback-interval",
    "readback_s",
    type=click.FloatRange(min=0.1),
    default=READBACK_S,
    show_default=True,
    help="Seconds between two reads of the QoS setup from the fabric (fluid contention).",
)
@_root_option
def lab_up(
    name: str,
    xgft: str | None,
    topology: Path | None,
    width: str,
    speed: str,
    jobs: Path | None,
    sm_host: str | None,
    tick_s: float,
    osm_opts: tuple[str, ...],
    timeout: float,
    contention: str,
    readback_s: float,
    root: Path | None,
) -> None:
    """Build a fabric, start ibsim and OpenSM, and run the job mix in the background."""
    if (xgft is None) == (topology is None):
        raise click.UsageError("give exactly one of --xgft and --topology")
    if xgft is not None:
        topo = build_xgft(parse_xgft(xgft), int(width), speed)
    else:
        assert topology is not None
        try:
            text = topology.read_text()
        except OSError as err:
            raise TopologyError(f"--topology {topology}: cannot read: {err.strerror}") from err
        topo = parse_ibnetdiscover(text, str(topology))
        topo = normalize_for_ibsim(topo)
    options = dict(_key_value(o) for o in osm_opts)
    lab_ = manage.up(
        name,
        topo,
        root=root or default_root(),
        jobs=jobs,
        sm_host=sm_host,
        opensm_options=options,
        tick_s=tick_s,
        timeout=timeout,
        contention=contention,
        readback_s=readback_s,
    )
    cas, sws = len(lab_.topo.cas()), len(lab_.topo.switches())
    click.echo(f"lab {name} is up: {sws} switches, {cas} CAs, OpenSM MASTER; {lab_.paths.dir}")
    click.echo(f"  try: ibqos lab run {name} -- sminfo")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"{text!r}: expected KEY=VALUE", param_hint="--opensm-option")
    return key.strip(), value.strip()


@lab.command("down")
@click.argument("name")
@_root_option
def lab_down(name: str, root: Path | None) -> None:
    """End the lab's own processes (by pid) and remove its directory."""
    ended = manage.down(name, root=root or default_root())
    click.echo(f"lab {name} is down" + (f"; ended {', '.join(ended)}" if ended else ""))


@lab.command("status")
@click.argument("name")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@_root_option
def lab_status(name: str, fmt: str, root: Path | None) -> None:
    """Show a lab's state, processes and paths."""
    info = manage.status(name, root=root or default_root())
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"lab {info['name']}: {info['status']}  ({info['dir']})")
    for key, proc in info["processes"].items():
        click.echo(f"  {key:<11} pid {proc['pid']:<8} {'running' if proc['alive'] else 'gone'}")
    click.echo(
        f"  ticks {info['ticks']}, model time {info['model_time_s']:.1f} s, "
        f"{info['lines_last_tick']} PerformanceSet lines last tick"
    )
    click.echo(f"  jobs: {', '.join(info['jobs']) or '(none)'}")
    click.echo(f"  contention {info['contention']}; metrics {info['metrics_url'] or '-'}")
    window = info["progress_window_s"]
    for jid, job in info["progress"].items():
        lane = f", SL {job['sl']} -> VL {job['vl']}" if "vl" in job else ""
        click.echo(
            f"  job {jid}: {job['iterations']} iterations,"
            f" {job['iterations_per_second']:.2f}/s over {window:g} s{lane}"
        )
    for key, path in info["paths"].items():
        click.echo(f"  {key:<15} {path}")


@lab.command("list")
@_root_option
def lab_list(root: Path | None) -> None:
    """List labs."""
    base = root or default_root()
    for name in manage.list_labs(base):
        click.echo(f"{name}\t{manage.status(name, root=base)['status']}")


@lab.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--host", help="Node to attach to (host name or node id; default: OpenSM's).")
@click.option(
    "--here",
    is_flag=True,
    help="Run in the current directory (it must be writable) instead of the lab's work directory.",
)
@_root_option
def lab_run(
    name: str, command: tuple[str, ...], host: str | None, here: bool, root: Path | None
) -> None:
    """Run COMMAND attached to the lab (e.g. -- perfquery -x 3 1).

    The command gets LD_PRELOAD=libumad2sim.so, IBSIM_SOCKNAME, SIM_HOST and
    IBQOS_CONFIG (the lab's ibqos.yaml); its exit status is passed on.
    """
    base = root or default_root()
    info = manage.status(name, root=base)
    if info["status"] != "up":
        raise LabError(f"lab {name} is not up (status: {info['status']})")
    lab_ = Lab(LabPaths(base, name))
    cwd = Path.cwd() if here else lab_.paths.run
    try:
        code = subprocess.call(list(command), env=lab_.env(host), cwd=cwd)
    except OSError as err:
        raise LabError(f"{command[0]}: {err.strerror}") from err
    sys.exit(code)


@lab.group("job")
def lab_job() -> None:
    """Add or remove jobs of a running lab (edits its job file; applied at the next tick)."""


@lab_job.command("add")
@click.argument("name")
@click.option("--id", "job_id", required=True, help="Job id.")
@click.option("--nodes", required=True, help="Host list, e.g. cn[0001-0008].")
@click.option("--pattern", type=click.Choice(PATTERNS), required=True)
@click.option(
    "--rate",
    "rate",
    type=float,
    required=True,
    help="Bytes per second per node while communicating.",
)
@click.option(
    "--duty",
    type=float,
    default=1.0,
    show_default=True,
    help="Share of each iteration spent communicating.",
)
@click.option(
    "--period", type=float, default=0.1, show_default=True, help="Iteration length in seconds."
)
@click.option("--app", "app", default="", help="Application name.")
@click.option("--user", default=None)
@_root_option
def lab_job_add(
    name: str,
    job_id: str,
    nodes: str,
    pattern: str,
    rate: float,
    duty: float,
    period: float,
    app: str,
    user: str | None,
    root: Path | None,
) -> None:
    """Add a job to a lab."""
    item: dict[str, object] = {
        "id": job_id,
        "nodes": nodes,
        "pattern": pattern,
        "rate_bytes_per_s": rate,
        "duty": duty,
        "period_s": period,
    }
    if app:
        item["name"] = app
    if user:
        item["user"] = user
    new = parse_jobs({"jobs": [item]}, "command line", traffic=True)
    jobs = manage.edit_jobs(name, root=root or default_root(), add=new)
    click.echo(f"lab {name}: job {job_id} added ({len(jobs)} jobs)")


@lab_job.command("remove")
@click.argument("name")
@click.argument("job_ids", nargs=-1, required=True)
@_root_option
def lab_job_remove(name: str, job_ids: tuple[str, ...], root: Path | None) -> None:
    """Remove jobs from a lab."""
    jobs = manage.edit_jobs(name, root=root or default_root(), remove=job_ids)
    click.echo(f"lab {name}: removed {', '.join(job_ids)} ({len(jobs)} jobs left)")


for _command in DEPLOY_COMMANDS:
    cli.add_command(_command)
cli.add_command(characterize_group)


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    cli()
