"""``ibqos lab``: simulated fabrics (ibsim, OpenSM and a traffic model) to try ibqos on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from ibqos.cli.lab_ctl import lab_link, lab_opensm
from ibqos.cli.lab_job import lab_job
from ibqos.cli.options import (
    format_option,
    jobs_option,
    root_option,
    speed_option,
    topology_option,
    width_option,
    xgft_option,
)
from ibqos.errors import FabricChoiceError, LabError, TopologyError
from ibqos.fabric.given import given_fabric
from ibqos.fabric.topology import parse_ibnetdiscover
from ibqos.fabric.xgft import XgftSpec, build_xgft
from ibqos.lab import manage
from ibqos.lab.files import LabPaths, default_root, normalize_for_ibsim
from ibqos.lab.lab import READBACK_S, Lab
from ibqos.lab.traffic import CONTENTION_MODELS


@click.group()
def lab() -> None:
    """A simulated fabric: real ibsim + real OpenSM + a traffic model of running jobs."""


@lab.command("up")
@click.option("--name", required=True, help="Lab name ([A-Za-z][A-Za-z0-9_-]*).")
@xgft_option('Fat tree to build, "H;m1,..,mH;w1,..,wH" (e.g. "2;8,4;1,2").')
@topology_option("Topology file in ibnetdiscover format instead of --xgft.", file_only=False)
@width_option("Link width (lanes) for --xgft.")
@speed_option("Lane speed for --xgft.")
@jobs_option("Job file (docs/jobs.md).", dest="jobs")
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
@root_option
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
    try:
        given = given_fabric(xgft, topology, "exactly one of --xgft and --topology")
    except FabricChoiceError as err:  # here a usage error: click shows the usage, exit 2
        raise click.UsageError(str(err)) from None
    if isinstance(given, XgftSpec):
        topo = build_xgft(given, int(width), speed)
    else:
        try:
            text = given.read_text()
        except OSError as err:
            raise TopologyError(f"--topology {given}: cannot read: {err.strerror}") from err
        topo = normalize_for_ibsim(parse_ibnetdiscover(text, str(given)))
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
@root_option
def lab_down(name: str, root: Path | None) -> None:
    """End the lab's own processes (by pid) and remove its directory."""
    ended = manage.down(name, root=root or default_root())
    click.echo(f"lab {name} is down" + (f"; ended {', '.join(ended)}" if ended else ""))


@lab.command("status")
@click.argument("name")
@format_option(["text", "json"], default="text")
@root_option
def lab_status(name: str, fmt: str, root: Path | None) -> None:
    """Show a lab's state, processes and paths."""
    info = manage.status(name, root=root or default_root())
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"lab {info['name']}: {info['status']}  ({info['dir']})")
    for key, proc in info["processes"].items():
        click.echo(f"  {key:<11} pid {proc['pid']:<8} {'running' if proc['alive'] else 'gone'}")
    osm = info["opensm"]
    state = f"running, pid {osm['pid']}" if osm["running"] else "not running"
    click.echo(f"  OpenSM {state}" + (f" ({osm['note']})" if osm["note"] else ""))
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
@root_option
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
@root_option
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


lab.add_command(lab_job)
lab.add_command(lab_opensm)
lab.add_command(lab_link)
