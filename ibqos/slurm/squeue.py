"""Running jobs as ``squeue`` reports them: ``--json`` (Slurm >= 21.08) or a fixed text format.

Two readers of the same facts (job id, name, user, node list, start time, state):

- :func:`parse_json` reads ``squeue --json``.  Slurm 21.08 and 22.05 (openapi v0.0.37/38)
  give ``job_state`` as a string and times as integers; Slurm 23.02 and later give
  ``job_state`` as a list of flags and times as ``{"set": .., "infinite": .., "number": ..}``.
  Both shapes are read, so an upgrade of Slurm does not stop the agent.
- :func:`parse_json` also reads the CPUs each job holds on each node
  (:mod:`ibqos.slurm.jobres`), by which a host that several jobs share is split among them.
- :func:`parse_text` reads ``squeue --noheader --format=TEXT_FORMAT``, which every Slurm
  release since 2.x prints: the fallback for clusters older than 21.08.

Which jobs count as running: RUNNING, CONFIGURING (nodes allocated, prolog or boot still
going: a TaskProlog may already ask for the job's SL) and SUSPENDED (the job keeps its
nodes and resumes with the SL its tasks took at launch, so it must keep its binding).  A
job that is COMPLETING has ended for ibqos: its tasks are gone or being killed.

The job id is Slurm's unique ``job_id`` (``%A``), which is what ``SLURM_JOB_ID`` holds in a
job's prolog and tasks; for an array task it is not the ``123_4`` form.  Node lists are
expanded by :func:`ibqos.jobs.jobfile.expand_hosts`, the code the job files use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from ibqos.errors import JobsError, SlurmError
from ibqos.jobs.hosts import expand_hosts
from ibqos.jobs.model import Job, shared_nodes
from ibqos.slurm.jobres import host_cpus, slurm_int

__all__ = [
    "JSON_ARGS",
    "RUNNING_STATES",
    "TEXT_ARGS",
    "TEXT_FORMAT",
]
__all__ += ["is_running", "parse_json", "parse_text", "parse_version"]

#: states (or state flags) of a job that holds its nodes and runs, or is about to
RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})
#: a job with this flag has ended for ibqos, whatever its base state says
_ENDED_FLAG = "COMPLETING"

#: squeue arguments for the JSON reader (``--all``: hidden partitions' jobs run too)
JSON_ARGS = ("--all", "--json")
#: fields of the text reader: job id, user, state, start time, node list, then the name,
#: last because a job name may hold any character, the separator too
TEXT_FORMAT = "%A|%u|%T|%S|%N|%j"
TEXT_ARGS = ("--all", "--noheader", f"--format={TEXT_FORMAT}")
#: the first release whose squeue has --json
JSON_SINCE = (21, 8)


def is_running(states: Iterable[str]) -> bool:
    """True if a job with these state names (base state and flags) holds its nodes."""
    names = {s.upper() for s in states}
    return bool(names & RUNNING_STATES) and _ENDED_FLAG not in names


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) from ``squeue --version`` (``slurm 22.05.8``, ``slurm-wlm 20.11.9``)."""
    m = re.search(r"\b(\d+)\.(\d+)(?:\.\d+)?\b", text)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _states(value: object) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    return None


def parse_json(text: str, source: str = "squeue --json") -> tuple[tuple[Job, ...], list[str]]:
    """Read the running jobs from ``squeue --json`` output.

    Args:
        text: the whole output.
        source: names the input in messages.

    Returns:
        The running jobs in squeue's order, and one warning per job entry that could not
        be read (that job is left out; the others are kept).

    Raises:
        SlurmError: the output is not JSON, has no ``jobs`` list, or carries Slurm errors.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmError(f"{source}: not JSON (line {err.lineno}, column {err.colno})") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmError(f"{source}: expected an object with a 'jobs' list")
    errors = doc.get("errors") or []
    if isinstance(errors, list) and errors:
        first = errors[0]
        if isinstance(first, dict):
            # 22.05 with slurmctld down: "Failed while looking for jobs" / "Unspecified error"
            parts = (first.get("description"), first.get("source"), first.get("error"))
            what = ": ".join(str(p) for p in parts if p)
        else:
            what = str(first)
        raise SlurmError(f"{source}: squeue reported an error: {what}")
    jobs: list[Job] = []
    resources: list[object] = []  # each job's job_resources
    warnings: list[str] = []
    for i, item in enumerate(doc["jobs"]):
        where = f"{source}: jobs[{i}]"
        if not isinstance(item, dict):
            warnings.append(f"{where}: expected an object; skipped")
            continue
        job_id = slurm_int(item.get("job_id"))
        states = _states(item.get("job_state"))
        if job_id is None or states is None:
            warnings.append(f"{where}: no job_id or job_state this reader knows; skipped")
            continue
        if not is_running(states):
            continue
        job = _job(
            str(job_id),
            item.get("name"),
            item.get("user_name"),
            item.get("nodes"),
            slurm_int(item.get("start_time")),
            f"{source}: job {job_id}",
            warnings,
        )
        if job is not None:
            jobs.append(job)
            resources.append(item.get("job_resources"))
    return _with_cpus(jobs, resources), warnings


def _with_cpus(jobs: list[Job], resources: list[object]) -> tuple[Job, ...]:
    """The jobs, those on a node another job has too with the CPUs they hold on such
    nodes (:attr:`Job.host_cpus`).  Only shared nodes: the counts serve to split a shared
    host's traffic, and a job of a thousand exclusive nodes need not carry a thousand."""
    shared = shared_nodes(jobs)
    if not shared:
        return tuple(jobs)
    out = []
    for job, res in zip(jobs, resources, strict=True):
        cpus = tuple((h, n) for h, n in host_cpus(res) if h in shared and h in job.nodes)
        out.append(replace(job, host_cpus=cpus) if cpus else job)
    return tuple(out)


def parse_text(text: str, source: str = "squeue") -> tuple[tuple[Job, ...], list[str]]:
    """Read the running jobs from ``squeue --noheader --format=TEXT_FORMAT`` output.

    Start times are printed in the host's local time zone, so they are read as local time.

    Returns:
        The running jobs, and one warning per line that could not be read.
    """
    jobs: list[Job] = []
    warnings: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", 5)
        if len(fields) != 6 or not fields[0].strip():
            warnings.append(f"{source}: line {n}: expected 6 '|'-separated fields; skipped")
            continue
        job_id, user, state, start, nodes, name = fields
        if not is_running(state.split()):
            continue
        job = _job(
            job_id.strip(),
            name,
            user.strip(),
            nodes.strip(),
            _local_time(start.strip()),
            f"{source}: line {n} (job {job_id.strip()})",
            warnings,
        )
        if job is not None:
            jobs.append(job)
    return tuple(jobs), warnings


def _local_time(text: str) -> int | None:
    """Seconds since the epoch from squeue's ``2024-05-01T10:00:00`` (local time)."""
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return None  # N/A, Unknown, None


def _job(
    job_id: str,
    name: object,
    user: object,
    nodes: object,
    start: int | None,
    where: str,
    warnings: list[str],
) -> Job | None:
    if not isinstance(nodes, str) or not nodes or nodes in ("(null)", "None assigned"):
        # a job between allocation states may briefly have no node list; it holds no
        # port yet, and the next poll sees its nodes
        return None
    try:
        hosts = expand_hosts(nodes, f"{where}: nodes")
    except JobsError as err:
        warnings.append(f"{err}; skipped")
        return None
    return Job(
        id=job_id,
        nodes=hosts,
        name=name if isinstance(name, str) else "",
        user=user if isinstance(user, str) and user else None,
        start_time=None if start is None or start <= 0 else float(start),
    )


def squeue_argv(prefix: Sequence[str], fmt: str) -> list[str]:
    """The squeue command line for reader *fmt* ("json" or "text")."""
    return [*prefix, *(JSON_ARGS if fmt == "json" else TEXT_ARGS)]
