"""Jobs on the fabric: which CA ports each running job's hosts own.

Two parts:

- a **job source** says which jobs run now (:class:`JobSource`; :class:`FileJobSource` reads a
  job file or a directory of job files, see ``docs/jobs.md``, and re-reads it only when it
  changed);
- :func:`map_jobs` turns each job's host names into fabric ports, through the hosts'
  NodeDescriptions (:class:`HostMatcher`: by default the first word, ``cn0001 mlx5_0`` ->
  ``cn0001``).

Bad job input never stops the agent once it has run: unknown hosts and empty jobs are
warnings, and the job is partly mapped or skipped.  Only the first read of a job source
raises (:class:`~ibqos.errors.JobsError`), so that a wrong path is reported at start.

**Hosts that several jobs share** (Slurm's OverSubscribe, shared GPU partitions) belong to
each of them: every job keeps its ports, its port-group and its SL, since an SL belongs to a
job's queue pairs, not to a node.  What a shared host port sends is then split among its
jobs (:attr:`MappedJob.share`), by weights in this order, the first that every job on the
host has:

1. the job's declared mean rate per node (``rate_bytes_per_s`` x ``duty``, job files);
2. the CPUs the job holds on the host (:attr:`~ibqos.jobs.model.Job.host_cpus`, from
   Slurm's ``job_resources``): MPI ranks are CPUs;
3. equal shares.

The split is an estimate, and attribution reports it as such (``measured`` below 1).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from ibqos.errors import JobsError
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric, PortKey
from ibqos.jobs.model import Job
from ibqos.jobs.reader import JobReader, Stamp

log = logging.getLogger(__name__)

__all__ = [
    "FileJobSource",
    "JobSource",
    "MappedJob",
]
__all__ += ["JobMapper", "host_ports", "log_warnings", "map_jobs"]

_MAX_LOGGED = 10  # warnings logged one by one per mapping; the rest are counted
_MAX_HOSTS_TEXT = 120  # characters of a folded host list in one warning


@dataclass(frozen=True)
class MappedJob:
    """A running job and the fabric ports of its hosts.

    Attributes:
        job: the job as its source gave it.
        ports: (node GUID, port) of the CA ports of its hosts that the fabric has, in host
            order (a host with two linked HCA ports contributes both).
        hosts: the job's hosts that were found on the fabric, in job order.
        missing: the job's hosts that match no CA on the fabric.
        share: per port (as *ports*), the share of the port's traffic that is the job's:
            1.0 on a host of its own, less on a host it shares; empty: 1.0 everywhere.
        shared: the job's hosts that other running jobs have too, in job order.
    """

    job: Job
    ports: tuple[PortKey, ...]
    hosts: tuple[str, ...]
    missing: tuple[str, ...] = ()
    share: tuple[float, ...] = ()
    shared: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The job's id."""
        return self.job.id


# --- job sources -------------------------------------------------------------------------


class JobSource(Protocol):
    """Where the running jobs come from (a job file, Slurm, ...)."""

    def jobs(self) -> tuple[Job, ...]:
        """Return the jobs running now.

        Raises:
            JobsError: only if the source has never been read successfully.  After a good
                read, a bad one logs one warning and returns the last good jobs.
        """
        ...


class FileJobSource(JobSource):
    """Jobs from a YAML/JSON job file or a directory of job files (``docs/jobs.md``).

    Each call to :meth:`jobs` checks the modification time, size and inode of the file (or
    of the directory's job files, and which files there are) and re-reads only when one of
    them changed, and then only what changed (:class:`~ibqos.jobs.reader.JobReader`: the
    files that changed, their entries that changed).  With a directory, one file per job
    (written by a Slurm prolog, removed by the epilog) works: removing a file ends its jobs.

    A job file is valid or not as a whole: a version with any problem is not taken, the
    previous jobs are kept (:attr:`up` False).  In a directory one bad job is left out and
    the others taken (:class:`~ibqos.jobs.reader.JobReader` says how); each problem is
    logged once, and the jobs left out are counted (:attr:`rejected`).

    The jobs listed are the running jobs.  ``start_time`` is not a filter: a start time in
    the future is most likely clock skew between the scheduler and this host, and a job that
    vanished for that reason would lose its lane.

    Args:
        path: the job file or directory.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._reader = JobReader(self.path)
        self._seen: tuple[Stamp, ...] | str | None = None
        self._jobs: tuple[Job, ...] | None = None
        self._up: bool | None = None
        self._rejected = 0
        self._problems: frozenset[str] = frozenset()  # logged, and still there

    @property
    def up(self) -> bool | None:
        """False while the file's current version is invalid (or the directory cannot be
        listed) and the previous jobs are kept (``ibqos_job_source_up``); None before the
        first read.  Jobs left out of a directory leave it True (:attr:`rejected`)."""
        return self._up

    @property
    def rejected(self) -> int:
        """Jobs of the directory's current version left out as invalid (0 for a file)."""
        return self._rejected

    @property
    def problems(self) -> frozenset[str]:
        """Why the directory's jobs were left out, one line each (empty for a file)."""
        return self._problems

    def jobs(self) -> tuple[Job, ...]:
        """Return the jobs, re-reading the file(s) if they changed since the last call.

        Raises:
            JobsError: the first read failed (the file is missing, unreadable or invalid;
                the directory cannot be listed).  Later failures log one warning per
                change, naming the file, and keep the previous jobs.
        """
        # Stamp before reading: a change during the read then shows on the next call.
        signature = self._reader.signature()
        if self._jobs is not None and signature == self._seen:
            return self._jobs
        try:
            reading = self._reader.read()
        except JobsError as err:
            self._up = False
            if self._jobs is None:
                raise
            self._seen = signature  # warn once per bad version, not on every call
            log.warning("%s; keeping the previous %d jobs", err, len(self._jobs))
            return self._jobs
        self._log_problems(reading.problems)
        if self._jobs is not None:
            log.info(
                "%s: re-read, %d jobs (were %d)", self.path, len(reading.jobs), len(self._jobs)
            )
        self._seen, self._jobs = signature, reading.jobs
        self._up, self._rejected = True, reading.rejected
        return reading.jobs

    def _log_problems(self, problems: Sequence[str]) -> None:
        """Log the problems not logged yet (a bad job is said once, not at every change
        of the directory), the first few one by one, then a count."""
        new = [p for p in dict.fromkeys(problems) if p not in self._problems]
        self._problems = frozenset(problems)
        for line in new[:_MAX_LOGGED]:
            log.warning("%s", line)
        if len(new) > _MAX_LOGGED:
            log.warning("... and %d more jobs left out", len(new) - _MAX_LOGGED)


# --- host names ----------------------------------------------------------------------------


def host_ports(fabric: Fabric, matcher: HostMatcher | None = None) -> dict[str, list[PortKey]]:
    """Index the fabric's CA ports by host name.

    Every linked port of every CA whose description gives a host name is listed, sorted by
    (node GUID, port), so a host with two HCAs or a two-port HCA has several ports.
    Switch ports are never listed.
    """
    matcher = matcher or HostMatcher()
    index: dict[str, list[PortKey]] = {}
    names: dict[str, str | None] = {}  # many ports share a description: match it once
    for key, fp in fabric.ports.items():
        if fp.is_switch:
            continue
        if fp.node_desc not in names:
            names[fp.node_desc] = matcher.hostname(fp.node_desc)
        host = names[fp.node_desc]
        if host is not None:
            index.setdefault(host, []).append(key)
    for keys in index.values():
        keys.sort()
    return index


# --- mapping -------------------------------------------------------------------------------


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders "9" before "10" and "1234_2" before "1234_10"."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", text) if t)


def _hosts_text(hosts: Iterable[str]) -> str:
    hosts = list(hosts)
    text = str(NodeSet.fromlist(hosts, resolver=RESOLVER_NOGROUP))
    if len(text) > _MAX_HOSTS_TEXT:
        text = text[: _MAX_HOSTS_TEXT - 3] + "..."
    return text


def _label(job: Job) -> str:
    return f"job {job.id}" + (f" ({job.name})" if job.name else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def map_jobs(
    jobs: Sequence[Job],
    fabric: Fabric,
    matcher: HostMatcher | None = None,
    *,
    index: Mapping[str, Sequence[PortKey]] | None = None,
    log: bool = True,
) -> tuple[list[MappedJob], list[str]]:
    """Map each job's hosts to the fabric's CA ports.

    Rules:

    - A host matches the CAs whose NodeDescription gives its name (``matcher``, default: the
      first word); all linked ports of those CAs belong to it.  Switches never match.
    - Hosts that match no CA are left out (``MappedJob.missing``) with a warning; the rest of
      the job is mapped.
    - A host in several jobs belongs to each of them; its ports' traffic is split among
      them (``MappedJob.share``, see the module docstring).
    - A job without a host on the fabric is skipped with a warning.

    Args:
        jobs: the running jobs (ids unique).
        fabric: the fabric.
        matcher: how to read host names from NodeDescriptions.
        index: :func:`host_ports` of *fabric* built beforehand (a caller that maps every
            cycle builds it once per fabric); None: build it here with *matcher*.
        log: log the warnings (a caller that maps every cycle logs only new ones).

    Returns:
        The mapped jobs in input order, and the warnings, one line each (job first, in input
        order).  The warnings are also logged on ``ibqos.attribute.jobmap``, the first few
        one by one and then a count.
    """
    if index is None:
        index = host_ports(fabric, matcher)
    results = [_map_one(job, index) for job in jobs]
    mapped = _shared_out([m for m, _ in results if m is not None], index)
    warnings = [msg for _, msgs in results for msg in msgs]
    if log:
        log_warnings(warnings)
    return mapped, warnings


def _map_one(
    job: Job, index: Mapping[str, Sequence[PortKey]]
) -> tuple[MappedJob | None, list[str]]:
    """Map one job on its own (as if no other job ran).  Returns the mapped job (None:
    skipped) and its warnings."""
    hosts: list[str] = []
    missing: list[str] = []
    for node in dict.fromkeys(job.nodes):  # a host listed twice is one host
        (hosts if node in index else missing).append(node)
    msgs: list[str] = []
    if not job.nodes:
        msgs.append(f"{_label(job)}: no hosts; skipped")
        return None, msgs
    if missing:
        msgs.append(
            f"{_label(job)}: {_plural(len(missing), 'host')} of {len(job.nodes)} not on the "
            f"fabric: {_hosts_text(missing)}"
        )
    if not hosts:
        msgs.append(f"{_label(job)}: no host on the fabric; skipped")
        return None, msgs
    ports = tuple(key for host in hosts for key in index[host])
    return MappedJob(job=job, ports=ports, hosts=tuple(hosts), missing=tuple(missing)), msgs


def _shared_out(mapped: list[MappedJob], index: Mapping[str, Sequence[PortKey]]) -> list[MappedJob]:
    """*mapped* (each mapped on its own), with the share of every host that several of
    them have set on each of those jobs (the module docstring says how it is split)."""
    users: dict[str, list[int]] = {}
    for i, mj in enumerate(mapped):
        for host in mj.hosts:
            users.setdefault(host, []).append(i)
    shared = {host: who for host, who in users.items() if len(who) > 1}
    if not shared:
        return mapped
    cut: dict[int, dict[str, float]] = {}  # job row -> shared host -> its share
    cpus: dict[int, dict[str, int]] = {}  # job row -> host -> CPUs it holds there
    for host, who in shared.items():
        for i in who:
            if i not in cpus:
                cpus[i] = dict(mapped[i].job.host_cpus)
        split = _split([mapped[i].job for i in who], [cpus[i].get(host) for i in who])
        for i, part in zip(who, split, strict=True):
            cut.setdefault(i, {})[host] = part
    out = list(mapped)
    for i, parts in cut.items():
        mj = mapped[i]
        # each host contributes its ports in host order (see _map_one)
        share = tuple(parts.get(host, 1.0) for host in mj.hosts for _ in index[host])
        out[i] = replace(mj, share=share, shared=tuple(h for h in mj.hosts if h in parts))
    return out


def _split(jobs: Sequence[Job], cpus: Sequence[int | None]) -> list[float]:
    """The shares of one host's traffic of the *jobs* on it (holding *cpus* there, None
    where not known), summing to 1: by declared rates, else by CPUs, else equal."""
    weights = [1.0] * len(jobs)
    if all(job.has_rates for job in jobs):
        weights = [job.rate_bytes_per_s * job.duty for job in jobs]
    elif all(c is not None and c > 0 for c in cpus):
        weights = [float(c or 0) for c in cpus]
    total = sum(weights)
    return [w / total for w in weights]


class JobMapper:
    """:func:`map_jobs` for a caller that maps the running jobs every cycle.

    A job's hosts, missing hosts, ports and warnings depend only on the job and the
    fabric's index; only the shares of hosts that several jobs have depend on the other
    jobs.  So each job is mapped on its own once and kept while it runs, and the shares
    are worked out only for the jobs on shared hosts.  A job whose mapping and shares did
    not change is handed back as the same :class:`MappedJob` object (attribution keeps
    its work per job by identity).  The result equals ``map_jobs(jobs, fabric,
    index=index)``: in a cycle without shared hosts only new jobs cost anything, which
    keeps a cycle of thousands of jobs to a few milliseconds.

    Args:
        fabric: the fabric.
        matcher: how to read host names from NodeDescriptions.

    Attributes:
        index: :func:`host_ports` of the fabric.
    """

    def __init__(self, fabric: Fabric, matcher: HostMatcher | None = None) -> None:
        self.fabric = fabric
        self.index = host_ports(fabric, matcher)
        self._alone: dict[Job, tuple[MappedJob | None, list[str]]] = {}
        self._shared: dict[Job, MappedJob] = {}  # last cycle's jobs on shared hosts
        self._last: tuple[tuple[Job, ...], list[MappedJob], list[str]] | None = None

    def map(self, jobs: Sequence[Job]) -> tuple[list[MappedJob], list[str]]:
        """Map *jobs* as :func:`map_jobs` does (without logging), reusing earlier work.

        Returns:
            The mapped jobs in input order, and the warnings (fresh lists every call).
        """
        key = tuple(jobs)
        # the same jobs as last time (a job source that did not change): compared by
        # identity first, so this costs next to nothing
        if self._last is not None and self._last[0] == key:
            return list(self._last[1]), list(self._last[2])
        alone: dict[Job, tuple[MappedJob | None, list[str]]] = {}
        results = []
        for job in key:
            hit = self._alone.get(job)
            if hit is None:
                hit = _map_one(job, self.index)
            alone[job] = hit
            results.append(hit)
        self._alone = alone  # ended jobs drop out
        mapped = _shared_out([m for m, _ in results if m is not None], self.index)
        shared: dict[Job, MappedJob] = {}
        for i, mj in enumerate(mapped):
            if mj.shared:
                before = self._shared.get(mj.job)
                if before is not None and before == mj:
                    mapped[i] = mj = before
                shared[mj.job] = mj
        self._shared = shared
        warnings = [msg for _, msgs in results for msg in msgs]
        self._last = (key, mapped, warnings)
        return list(mapped), list(warnings)


def log_warnings(warnings: Sequence[str]) -> None:
    """Log job mapping warnings: the first few one by one, then a count."""
    for msg in warnings[:_MAX_LOGGED]:
        log.warning("%s", msg)
    if len(warnings) > _MAX_LOGGED:
        log.warning("... and %d more job mapping warnings", len(warnings) - _MAX_LOGGED)
