"""``ibqos characterize history``: a job's per-level behaviour from the agent's metrics
in Prometheus."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from ibqos.characterize import history
from ibqos.classify.profiles import Observation
from ibqos.cli.options import (
    CHARACTERIZE_CONFIG_HELP,
    config_option,
    format_option,
    load_or_defaults,
    profiles_option,
    save_options,
)
from ibqos.cli.profiles import check_names, profile_store, saved_line


@click.command("history")
@click.option(
    "--prometheus", "url", required=True, metavar="URL", help="e.g. http://127.0.0.1:9090"
)
@click.option("--job", "job_id", required=True, help="The job id (label job_id).")
@click.option("--start", type=float, help="Seconds since the epoch (default: --minutes ago).")
@click.option("--end", type=float, help="Seconds since the epoch (default: now).")
@click.option("--minutes", type=click.FloatRange(min=0.01), default=60.0, show_default=True)
@click.option("--step", type=click.FloatRange(min=0.001), default=15.0, show_default=True)
@config_option(CHARACTERIZE_CONFIG_HELP)
@save_options
@profiles_option
@format_option(("table", "json"))
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
    check_names(application, user)
    config = load_or_defaults(path)
    store = profile_store(config, profiles_dir) if application else None
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
        click.echo(saved_line(profile), err=True)


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
