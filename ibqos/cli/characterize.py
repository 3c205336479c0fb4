"""``ibqos characterize``: offline characterization of applications, and job profiles
(docs/characterize.md).

Click commands only; :mod:`ibqos.cli.main` adds the group to its own, which turns errors into
one line and exit status 1.  The work is in :mod:`ibqos.characterize`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ibqos.agent.state import load_state
from ibqos.agent.wiring import (
    fabric_from_config,
)
from ibqos.attribute.jobmap import FileJobSource, JobMapper
from ibqos.attribute.sharing import SharingTables
from ibqos.characterize import command, history, report
from ibqos.characterize.otf2trace import load_otf2
from ibqos.characterize.trace import load_csv_trace
from ibqos.classify.levels import Characterizer, NodeTraffic
from ibqos.classify.prior import learn
from ibqos.classify.profiles import Observation, Profile, ProfileStore, check_name
from ibqos.config.schema import Config, find_config, load_config, parse_config
from ibqos.errors import JobsError, ProfileError
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import (
    fabric_from_file,
)
from ibqos.fabric.topology import LANE_DATA_BITS_PER_S, WIDTHS
from ibqos.jobs.jobfile import load_jobs
from ibqos.plan.output import align

_config_option = click.option(
    "--config",
    "path",
    type=click.Path(path_type=Path),
    help="Config file (thresholds, profiles.dir; default: $IBQOS_CONFIG, /etc/ibqos/ibqos.yaml).",
)
_profiles_option = click.option(
    "--profiles",
    "profiles_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Profile directory (default: profiles.dir of the config).",
)


def _fabric_options(f: Any) -> Any:
    for option in reversed(
        (
            click.option("--xgft", help='Fat tree "H;m1,..,mH;w1,..,wH" (as ibqos lab).'),
            click.option(
                "--topology",
                type=click.Path(path_type=Path, dir_okay=False),
                help="A recorded fabric (ibnetdiscover output) instead of --xgft.",
            ),
            click.option(
                "--width",
                type=click.Choice([str(w) for w in WIDTHS]),
                default="4",
                show_default=True,
            ),
            click.option(
                "--speed",
                type=click.Choice(list(LANE_DATA_BITS_PER_S)),
                default="EDR",
                show_default=True,
            ),
            click.option(
                "--placement",
                "placements",
                multiple=True,
                help="contiguous, F<n> (n nodes per leaf switch), random[:seed]; repeat it"
                " (default: contiguous, every F<n>, random).",
            ),
            click.option(
                "--out",
                type=click.Path(path_type=Path, file_okay=False),
                help="Write levels.csv, levels.json and the plots into this directory.",
            ),
            click.option(
                "--plot-format",
                type=click.Choice(report.PLOT_FORMATS),
                default="png",
                show_default=True,
            ),
            click.option(
                "--format",
                "fmt",
                type=click.Choice(("table", "json")),
                default="table",
                show_default=True,
            ),
            _config_option,
        )
    ):
        f = option(f)
    return f


def _config(path: Path | None) -> Config:
    """The config, or the defaults when none is named and the default file is absent."""
    found = find_config(path)
    if path is None and "IBQOS_CONFIG" not in os.environ and not found.exists():
        return parse_config({}, "defaults")
    return load_config(found)


def _store(config: Config, profiles_dir: Path | None) -> ProfileStore:
    directory = profiles_dir or config.profiles.dir
    if directory is None:
        raise ProfileError("no profile directory: give --profiles DIR or set profiles.dir")
    return ProfileStore(directory)


def _emit(runs: Sequence[command.Run], fmt: str, out: Path | None, plot_format: str) -> None:
    files: dict[str, bytes] = {}
    for run in runs:
        prefix = "" if len(runs) == 1 else f"{run.title.split()[-1]}-"
        files |= {prefix + name: data for name, data in command.outputs(run, plot_format).items()}
    if fmt == "json":
        docs = [json.loads(files[name]) for name in files if name.endswith("levels.json")]
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
    else:
        for run in runs:
            click.echo(f"{run.title} on {run.fabric_name}")
            click.echo(report.text_table(run.placements), nl=False)
            click.echo("available bandwidth by spread:")
            click.echo(report.text_table(run.spread), nl=False)
    if out is not None:
        paths = report.write_outputs(out, files)
        click.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)


@click.group("characterize")
def characterize() -> None:
    """Characterize applications offline and keep their job profiles (docs/characterize.md)."""


@characterize.command("trace")
@click.argument("trace_path", metavar="TRACE", type=click.Path(path_type=Path))
@click.option(
    "--trace-format",
    type=click.Choice(("auto", "csv", "otf2")),
    default="auto",
    show_default=True,
    help="auto: OTF2 for a directory or *.otf2, else the ibqos CSV format.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=1e-6),
    default=1.0,
    show_default=True,
    help="OTF2: seconds per interval.",
)
@click.option("--ranks-per-node", type=click.IntRange(min=1), default=1, show_default=True)
@_fabric_options
@click.option("--save", "application", metavar="APP", help="Record it in APP's profile.")
@click.option("--user", help="With --save: the profile is this user's only.")
@_profiles_option
def trace_command(
    trace_path: Path,
    trace_format: str,
    interval: float,
    ranks_per_node: int,
    xgft: str | None,
    topology: Path | None,
    width: str,
    speed: str,
    placements: tuple[str, ...],
    out: Path | None,
    plot_format: str,
    fmt: str,
    path: Path | None,
    application: str | None,
    user: str | None,
    profiles_dir: Path | None,
) -> None:
    """Per-level injection, available bandwidth, utilization and class of a traced
    application on placements of a fat tree."""
    _check_names(application, user)  # before anything is printed or written
    config = _config(path)
    store = _store(config, profiles_dir) if application else None
    otf2 = trace_format == "otf2" or (
        trace_format == "auto" and (trace_path.is_dir() or trace_path.suffix == ".otf2")
    )
    if otf2:
        imported = load_otf2(trace_path, interval)
        trace = imported.trace
        click.echo(
            f"{trace_path}: {trace.ranks} ranks, {imported.sends} sends,"
            f" {imported.collective_bytes:.0f} collective bytes spread, {trace.span_s:g} s",
            err=True,
        )
    else:
        trace = load_csv_trace(trace_path)
    traffic = trace.node_traffic(ranks_per_node)
    fabric, name, exclude = command.fabric_of(
        xgft, topology, int(width), speed, config.jobs.exclude_hosts
    )
    ch = Characterizer(fabric, config.classify, HostMatcher(config.jobs.host_pattern), exclude)
    run = command.characterize(
        ch, traffic, placements, title=f"trace {trace_path.name}", fabric_name=name
    )
    _emit([run], fmt, out, plot_format)
    if store is not None and application is not None:
        profile = command.save_profile(
            store, application, run, command.model_of_trace(traffic), user=user, now_s=time.time()
        )
        click.echo(
            _saved(profile),
            err=True,
        )


@characterize.command("jobs")
@click.option("--jobs", "jobs_path", required=True, type=click.Path(path_type=Path))
@_fabric_options
@click.option("--save", is_flag=True, help="Record each job in its application's (name's) profile.")
@_profiles_option
def jobs_command(
    jobs_path: Path,
    xgft: str | None,
    topology: Path | None,
    width: str,
    speed: str,
    placements: tuple[str, ...],
    out: Path | None,
    plot_format: str,
    fmt: str,
    path: Path | None,
    save: bool,
    profiles_dir: Path | None,
) -> None:
    """Characterize the jobs of a lab job file (docs/jobs.md) on their own placement
    (``job``) and on the others."""
    config = _config(path)
    store = _store(config, profiles_dir) if save else None
    jobs = load_jobs(jobs_path, traffic=True)
    fabric, name, exclude = command.fabric_of(
        xgft, topology, int(width), speed, config.jobs.exclude_hosts
    )
    ch = Characterizer(fabric, config.classify, HostMatcher(config.jobs.host_pattern), exclude)
    runs = []
    for job in jobs:
        if save and not job.name:
            raise JobsError(f"{jobs_path}: job {job.id}: --save needs a name (the application)")
        if save:
            check_name(job.name, f"{jobs_path}: job {job.id}: --save: name")
        traffic = NodeTraffic.from_job(job)
        asked = placements or ("job", *command.DEFAULT_PLACEMENTS)
        runs.append(
            command.characterize(
                ch, traffic, asked, title=f"job {job.id}", fabric_name=name, job_hosts=job.nodes
            )
        )
    _emit(runs, fmt, out, plot_format)
    if store is not None:
        for job, run in zip(jobs, runs, strict=True):
            profile = command.save_profile(
                store, job.name, run, command.model_of_job(job), now_s=time.time()
            )
            click.echo(
                _saved(profile),
                err=True,
            )


@characterize.command("history")
@click.option(
    "--prometheus", "url", required=True, metavar="URL", help="e.g. http://127.0.0.1:9090"
)
@click.option("--job", "job_id", required=True, help="The job id (label job_id).")
@click.option("--start", type=float, help="Seconds since the epoch (default: --minutes ago).")
@click.option("--end", type=float, help="Seconds since the epoch (default: now).")
@click.option("--minutes", type=click.FloatRange(min=0.01), default=60.0, show_default=True)
@click.option("--step", type=click.FloatRange(min=0.001), default=15.0, show_default=True)
@_config_option
@click.option("--save", "application", metavar="APP", help="Record it in APP's profile.")
@click.option("--user", help="With --save: the profile is this user's only.")
@_profiles_option
@click.option(
    "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True
)
def history_command(
    url: str,
    job_id: str,
    start: float | None,
    end: float | None,
    minutes: float,
    step: float,
    path: Path | None,
    application: str | None,
    user: str | None,
    profiles_dir: Path | None,
    fmt: str,
) -> None:
    """A job's per-level behaviour as ibqos recorded it, from Prometheus range queries of
    the agent's metrics."""
    _check_names(application, user)
    config = _config(path)
    store = _store(config, profiles_dir) if application else None
    end_s = end if end is not None else time.time()
    start_s = start if start is not None else end_s - 60 * minutes
    series = {
        kind: history.fetch_query_range(
            url, history.job_query(metric, job_id), start_s, end_s, step
        )
        for kind, metric in history.JOB_METRICS.items()
    }
    hist = history.job_history(job_id, series, config.classify)
    if fmt == "json":
        click.echo(json.dumps(_history_doc(hist), indent=1))
    else:
        click.echo(_history_text(hist), nl=False)
    if store is not None and application is not None:
        obs = Observation(
            f"history of job {job_id} from {url}",
            hist.cls,
            round(hist.intensity, 6),
            round(hist.end_s, 3),
        )
        profile = store.observe(application, obs, user=user)
        click.echo(
            _saved(profile),
            err=True,
        )


@characterize.command("learn")
@click.option(
    "--state",
    "state_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The agent's state directory (agent.state_dir).",
)
@_config_option
@_profiles_option
def learn_command(state_dir: Path, path: Path | None, profiles_dir: Path | None) -> None:
    """Add the measured classes of finished applications the agent recorded (its
    state.json: each application's last finished job) to their profiles; a job already
    in its profile (by id and end time) is not added again."""
    config = _config(path)
    store = _store(config, profiles_dir)
    state = load_state(state_dir)
    added = learn(store, state.finished.values(), time.time(), strict=True)
    click.echo(f"{added} profiles updated in {store.directory}")


@characterize.command("profiles")
@_config_option
@_profiles_option
def profiles_command(path: Path | None, profiles_dir: Path | None) -> None:
    """List the profiles (checking every file)."""
    store = _store(_config(path), profiles_dir)
    header = ["APPLICATION", "USER", "NODES", "CLASS", "CONFIDENCE", "MODEL", "OBSERVATIONS"]
    header.append("FILE")
    rows = []
    for p in sorted(store.profiles, key=lambda p: p.key[0]):
        model = "-" if p.model is None else p.model.pattern
        rows.append(
            [
                p.application,
                p.user or "-",
                "-" if p.nodes is None else str(p.nodes),
                p.expected_class,
                f"{p.confidence:.2f}",
                model,
                str(len(p.observations)),
                p.path.name if p.path else "-",
            ]
        )
    click.echo("\n".join(align(header, rows)))


@characterize.command("sharing")
@_config_option
@click.option(
    "--jobs",
    "jobs_path",
    type=click.Path(path_type=Path),
    help="Job file or directory instead of the job source.",
)
@click.option(
    "--topology",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The fabric from this ibnetdiscover file instead of fabric.source.",
)
@click.option(
    "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True
)
def sharing_command(
    path: Path | None, jobs_path: Path | None, topology: Path | None, fmt: str
) -> None:
    """Per running job: other jobs sharing its leaf switches and upper subtrees, and its
    fragmentation (advice for placing network-intensive jobs in subtrees of their own)."""
    from ibqos.agent.daemon import make_job_source  # the agent's job sources; heavy to import

    config = _config(path)
    roots = config.fabric.root_guids or None
    fabric = (
        fabric_from_file(topology, root_guids=roots) if topology else fabric_from_config(config)
    )
    jobs = (FileJobSource(jobs_path) if jobs_path else make_job_source(config)).jobs()
    matcher = HostMatcher(config.jobs.host_pattern)
    mapped, warnings = JobMapper(fabric, matcher).map(jobs)
    sharing = SharingTables(fabric, matcher, config.jobs.exclude_hosts).sharing(mapped)
    if fmt == "json":
        doc = [
            {
                "id": mj.id,
                "name": mj.job.name,
                "nodes": s.nodes,
                "subtrees": {str(k): v for k, v in s.subtrees.items()},
                "sharing_jobs": {str(k): v for k, v in s.sharing.items()},
                "fragmentation": round(s.fragmentation, 4),
            }
            for mj in mapped
            if (s := sharing[mj.id]) is not None
        ]
        click.echo(json.dumps({"jobs": doc, "warnings": warnings}, indent=1))
        return
    levels = list(range(1, fabric.height))
    header = [
        "JOB",
        "NAME",
        "NODES",
        *(f"L{lv} subtrees/sharing" for lv in levels),
        "FRAGMENTATION",
    ]
    rows = []
    for mj in mapped:
        s = sharing[mj.id]
        rows.append(
            [
                mj.id,
                mj.job.name or "-",
                str(s.nodes),
                *(f"{s.subtrees[lv]}/{s.sharing[lv]}" for lv in levels),
                f"{s.fragmentation:.2f}",
            ]
        )
    click.echo("\n".join(align(header, rows)))
    for w in warnings:
        click.echo(f"warning: {w}")


def _check_names(application: str | None, user: str | None) -> None:
    """--save APP and --user must be able to key a profile (ProfileError otherwise)."""
    if application is not None:
        check_name(application, "--save")
    if user is not None:
        check_name(user, "--user")


def _saved(profile: Profile) -> str:
    return f"profile {profile.path}: {profile.expected_class}, confidence {profile.confidence:g}"


def _history_doc(h: history.JobHistory) -> dict[str, Any]:
    return {
        "job_id": h.job_id,
        "start_s": h.start_s,
        "end_s": h.end_s,
        "intensity": h.intensity,
        "level": h.level,
        "class": h.cls,
        "levels": {
            str(lv.level): {
                "samples": lv.samples,
                "bytes_per_s": lv.bytes_per_s,
                "peak_bytes_per_s": lv.peak_bytes_per_s,
                "avail_bytes_per_s": lv.avail_bytes_per_s,
                "util": lv.util,
                "peak_util": lv.peak_util,
            }
            for lv in h.levels
        },
    }


def _history_text(h: history.JobHistory) -> str:
    lines = [
        f"job {h.job_id}: {h.end_s - h.start_s:.0f} s of history, intensity"
        f" {100 * h.intensity:.1f}% (level {h.level}), class {h.cls}"
    ]
    for lv in h.levels:
        util = "-" if lv.util is None else f"{100 * lv.util:.1f}%"
        avail = "-" if lv.avail_bytes_per_s is None else f"{lv.avail_bytes_per_s:.4g}"
        lines.append(
            f"  L{lv.level}: {lv.bytes_per_s:.4g} B/s (peak {lv.peak_bytes_per_s:.4g}),"
            f" avail {avail} B/s, util {util}, {lv.samples} samples"
        )
    return "\n".join(lines) + "\n"
