"""Per-job utilization, intensity and class: the "classify" stage of the pipeline.

docs/design.md §3, "Per-level utilization": for job *j* and fat-tree level *l*,
``avail[j, l]`` is the uplink capacity of the level-*l* subtrees holding *j*'s nodes,
``util[j, l] = rate[j, l] / avail[j, l]``, and the job's intensity is the largest
``util[j, l]`` over the levels *l* >= 1, where jobs share links.  The intensity is smoothed
over time (EWMA) and sorted into classes (``low``, ``moderate``, ``high``) with hysteresis.

- :class:`Capacities` holds the per-fabric tables, built once per fabric, and
  :func:`available` / :meth:`Capacities.available` give ``avail[j, l]`` for every level
  (:meth:`Capacities.available_many`: for many jobs at once, with numpy).
- :func:`utilization` divides the attributed rates by it, :func:`intensity` takes the max.
- :class:`JobUtilization` does both for all the running jobs of a decision cycle at once,
  on arrays (one row per job, one column per level), and keeps each job's ``avail`` while
  it runs: :class:`Utilizations`.
- :class:`Classifier` keeps each job's smoothed intensity and class across cycles
  (:meth:`Classifier.update_many`: many jobs whose intensity is already known;
  :meth:`Classifier.classify`: the running jobs of a cycle).

Levels with no available bandwidth.  The top level's subtree is the whole fabric and has no
uplinks, so nothing crosses upward there; a subtree whose uplinks are all down cannot send
anything out either.  ``avail`` is 0.0 for those levels and :func:`utilization` leaves them
out (the ratio is undefined and nothing is shared there), so they never decide the class.

Everything here is pure: no I/O, no clock (times are passed in, in seconds).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ibqos.config.classes import CLASSES, Class, Thresholds, as_class

if TYPE_CHECKING:
    from ibqos.attribute.attribution import Attribution
    from ibqos.attribute.jobmap import MappedJob
    from ibqos.fabric.model import Fabric, PortKey


# -- available bandwidth ------------------------------------------------------------------


@dataclass(frozen=True)
class Capacities:
    """Per-fabric tables for ``avail[j, l]``; build once per fabric with :meth:`from_fabric`.

    Attributes:
        height: the fabric's top level.
        host_capacity: capacity of every CA port, bytes per second (one direction), by
            (node GUID, port).
        subtree_of: for level *l* >= 1, at index ``l - 1``: the level-*l* subtree id of
            every CA port, by (node GUID, port) (the subtree of the port's CA).
        subtree_capacity: for level *l* >= 1, at index ``l - 1``: the level-*l* uplink
            capacity of every subtree, bytes per second (0.0 at the top level and for a
            subtree whose uplinks are all down).
    """

    height: int
    host_capacity: Mapping[PortKey, float]
    subtree_of: tuple[Mapping[PortKey, int], ...]
    subtree_capacity: tuple[Mapping[int, float], ...]

    @classmethod
    def from_fabric(cls, fabric: Fabric) -> Capacities:
        """Build the tables of *fabric* (its per-level subtrees, walked once per fabric)."""
        hosts = {
            key: fp.capacity_bytes_per_s for key, fp in fabric.ports.items() if fp.role == "host"
        }
        node_of = {key: fabric.ports[key].node_id for key in hosts}
        subtree_of: list[dict[PortKey, int]] = []
        capacity: list[dict[int, float]] = []
        for level in range(1, fabric.height + 1):
            comp = fabric.components(level)  # walked once per fabric, shared
            subtree_of.append({key: comp[node] for key, node in node_of.items()})
            capacity.append(fabric.subtree_uplink_capacity_bytes_per_s(level))
        return cls(fabric.height, hosts, tuple(subtree_of), tuple(capacity))

    def available(self, ports: Iterable[PortKey]) -> dict[int, float]:
        """``avail[j, l]`` for a job owning the CA *ports*, bytes per second, by level.

        Level 0 is the sum of the ports' capacities (injection); level *l* >= 1 is the sum of
        the level-*l* uplink capacities of the distinct level-*l* subtrees holding the ports.
        Every level 0..height is present; the top level is 0.0 (it has no uplinks).  Ports
        the fabric does not have as CA ports are skipped: a job map may be one cycle behind
        a fabric change.
        """
        known = [key for key in dict.fromkeys(ports) if key in self.host_capacity]
        out = {0: sum((self.host_capacity[key] for key in known), 0.0)}
        for level, (subtree_of, capacity) in enumerate(
            zip(self.subtree_of, self.subtree_capacity, strict=True), start=1
        ):
            held = {subtree_of[key] for key in known}
            out[level] = sum((capacity[s] for s in held), 0.0)
        return out

    def available_many(self, jobs: Sequence[Iterable[PortKey]]) -> npt.NDArray[np.float64]:
        """:meth:`available` of many jobs at once, each given by its CA ports.

        Returns:
            An array of one row per job and one column per level 0..height, bytes per
            second; the same figures as :meth:`available` (up to the order of summation).
        """
        arrays = self._arrays
        n_jobs = len(jobs)
        keys = [list(ports) for ports in jobs]
        job = np.repeat(np.arange(n_jobs, dtype=np.int64), [len(k) for k in keys])
        index = arrays.index
        port = np.array([index.get(k, -1) for ks in keys for k in ks], dtype=np.int64)
        known = port >= 0  # ports the fabric does not have as CA ports are skipped
        n_ports = len(arrays.capacity)
        pair = np.unique(job[known] * n_ports + port[known])  # each (job, port) once
        pj, pp = pair // n_ports, pair % n_ports
        out = np.zeros((n_jobs, self.height + 1))
        out[:, 0] = np.bincount(pj, weights=arrays.capacity[pp], minlength=n_jobs)
        for level, (sub, capacity) in enumerate(
            zip(arrays.subtree_of, arrays.subtree_capacity, strict=True), start=1
        ):
            n_sub = len(capacity)
            held = np.unique(pj * n_sub + sub[pp])  # each (job, subtree) once
            out[:, level] = np.bincount(
                held // n_sub, weights=capacity[held % n_sub], minlength=n_jobs
            )
        return out

    @cached_property
    def _arrays(self) -> _CapacityArrays:
        """The tables as arrays, for :meth:`available_many` (built on first use)."""
        index = {key: i for i, key in enumerate(self.host_capacity)}
        subtree_of = []
        capacity = []
        for sub_of, cap in zip(self.subtree_of, self.subtree_capacity, strict=True):
            subtree_of.append(np.array([sub_of[key] for key in index], dtype=np.int64))
            dense = np.zeros(max([*cap, *sub_of.values(), -1]) + 1)
            dense[list(cap)] = list(cap.values())
            capacity.append(dense)
        return _CapacityArrays(
            index,
            np.array(list(self.host_capacity.values()), dtype=np.float64),
            tuple(subtree_of),
            tuple(capacity),
        )


@dataclass(frozen=True)
class _CapacityArrays:
    """:class:`Capacities` as arrays: CA ports numbered 0..n-1 in ``index`` order.

    Attributes:
        index: (node GUID, port) -> number of the CA port.
        capacity: per CA port, bytes per second.
        subtree_of: per level >= 1, the subtree id of each CA port.
        subtree_capacity: per level >= 1, indexed by subtree id, its uplink capacity in
            bytes per second (0.0 for ids without a subtree).
    """

    index: dict[PortKey, int]
    capacity: npt.NDArray[np.float64]
    subtree_of: tuple[npt.NDArray[np.int64], ...]
    subtree_capacity: tuple[npt.NDArray[np.float64], ...]


def available(fabric: Fabric | Capacities, job: MappedJob) -> dict[int, float]:
    """``avail[j, l]`` of *job*, bytes per second, by level 0..height.

    Pass a :class:`Capacities` built once when classifying many jobs; passing a
    :class:`~ibqos.fabric.model.Fabric` builds the tables on every call.  See
    :meth:`Capacities.available`.
    """
    caps = fabric if isinstance(fabric, Capacities) else Capacities.from_fabric(fabric)
    return caps.available(job.ports)


def utilization(
    rate_by_level: Mapping[int, float], avail_by_level: Mapping[int, float]
) -> dict[int, float]:
    """``util[j, l] = rate[j, l] / avail[j, l]`` (a fraction, 1.0 = all of it), by level.

    Args:
        rate_by_level: bytes per second the job sends across each level.
        avail_by_level: bytes per second available to it at each level (:func:`available`).

    Returns:
        One entry per level of *rate_by_level* with ``avail > 0``; levels without available
        bandwidth (the top level, cut-off subtrees) are left out: nothing crosses there.
    """
    return {
        level: rate / avail
        for level, rate in rate_by_level.items()
        if (avail := avail_by_level.get(level, 0.0)) > 0.0
    }


def intensity(util_by_level: Mapping[int, float]) -> tuple[float, int | None]:
    """A job's intensity and the level that gives it.

    The intensity is the largest utilization over the levels >= 1 (shared links).  Only when
    there is no such level (a single-switch fabric, whose one level has no uplinks) does
    level 0, the injection, decide: jobs then share no link, and their injection still tells
    bursty from streaming jobs.  Ties go to the lowest level.

    Returns:
        (intensity, level), or (0.0, None) for an empty mapping.

    Raises:
        ValueError: a utilization is negative, NaN or infinite.
    """
    for level, value in util_by_level.items():
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"level {level}: utilization {value!r} is not a finite value >= 0")
    shared = {lvl: v for lvl, v in util_by_level.items() if lvl >= 1}
    pool = shared or dict(util_by_level)
    if not pool:
        return 0.0, None
    level = min(pool, key=lambda lvl: (-pool[lvl], lvl))
    return pool[level], level


@dataclass(frozen=True, slots=True)
class Utilizations:
    """The running jobs' figures of one decision cycle: one row per job (in job order),
    one column per level 0..height.

    Attributes:
        rate: bytes per second the job sends across the level; NaN where a port it needs
            did not answer.
        avail: uplink capacity of the level's subtrees holding the job (level 0: its
            hosts' ports), bytes per second; 0.0 at the top level.
        util: ``rate / avail`` where *known*, else NaN.
        known: both are known and ``avail > 0``.
        sampled: per job, whether it has a sample this cycle.
        intensity: per job, its intensity (where *sampled*).
        level: per job, the level that gave the intensity.
    """

    rate: npt.NDArray[np.float64]
    avail: npt.NDArray[np.float64]
    util: npt.NDArray[np.float64]
    known: npt.NDArray[np.bool_]
    sampled: npt.NDArray[np.bool_]
    intensity: npt.NDArray[np.float64]
    level: npt.NDArray[np.int64]


class JobUtilization:
    """:func:`utilization` and :func:`intensity` of every running job at once.

    A cycle must stay well under a second with 50k ports and thousands of jobs
    (``docs/plan-benchmark.md``), so the figures are arrays, and ``avail[j, l]``, which
    depends only on a job's ports, is computed when a job first appears and kept while it
    runs.

    Args:
        capacities: the fabric's tables.
    """

    def __init__(self, capacities: Capacities) -> None:
        self.capacities = capacities
        self._last: tuple[tuple[MappedJob, ...], npt.NDArray[np.float64]] | None = None
        self._rows: dict[int, tuple[MappedJob, list[float]]] = {}  # by id() of the job

    def utilizations(
        self,
        mapped: Sequence[MappedJob],
        attribution: Attribution,
        planned: Container[str] | None = None,
    ) -> Utilizations:
        """The jobs' figures from their attributed rates.

        A job has a sample when some level >= 1 (where jobs share links) is known, or, on
        a single-switch fabric, when level 0 is.  Its intensity is the largest known
        utilization over the levels >= 1 (else level 0), ties to the lowest level.

        Args:
            mapped: the running jobs.
            attribution: their rates, rows in the order of *mapped*.
            planned: when the rates were not swept for this cycle, the jobs the plan in
                force holds: only they have a sample (the others' nodes were not running
                them when the rates were swept).

        Raises:
            ValueError: a known utilization is negative or not finite.
        """
        jobs = tuple(mapped)
        avail = self._available(jobs)
        rate = np.full(avail.shape, math.nan)
        rate[:, list(attribution.levels)] = attribution.bytes_per_s
        known = (avail > 0) & np.isfinite(rate)
        util = np.divide(rate, avail, out=np.full(avail.shape, math.nan), where=known)
        shared = known & (np.arange(util.shape[1]) >= 1)
        has_shared = np.asarray(shared.any(axis=1), dtype=np.bool_)
        single = self.capacities.height <= 1
        sampled = has_shared | (np.asarray(known.any(axis=1), dtype=np.bool_) & single)
        wrong = known & ~(np.isfinite(util) & (util >= 0))
        bad = np.flatnonzero(sampled & wrong.any(axis=1))
        if len(bad):
            j = int(bad[0])
            lvl = int(np.flatnonzero(wrong[j])[0])
            raise ValueError(
                f"job {jobs[j].id}: level {lvl}: utilization {float(util[j, lvl])!r}"
                " is not a finite value >= 0"
            )
        pool = np.where(has_shared[:, None], shared, known)
        candidates = np.where(pool, util, -math.inf)
        level = np.asarray(candidates.argmax(axis=1), dtype=np.int64)  # ties: the lowest level
        value = np.asarray(candidates[np.arange(len(level)), level], dtype=np.float64)
        if planned is not None:
            sampled &= np.array([mj.id in planned for mj in jobs], dtype=np.bool_)
        return Utilizations(rate, avail, util, known, sampled, value, level)

    def _available(self, mapped: tuple[MappedJob, ...]) -> npt.NDArray[np.float64]:
        """``avail[j, l]`` of every job (rows kept by job, see the class docstring)."""
        if self._last is not None and self._last[0] == mapped:
            return self._last[1]
        # by identity: the job mapper hands back the same MappedJob while a job runs
        known = self._rows
        new = [mj for mj in mapped if (hit := known.get(id(mj))) is None or hit[0] is not mj]
        rows = self.capacities.available_many([mj.ports for mj in new]).tolist()
        fresh = {id(mj): (mj, row) for mj, row in zip(new, rows, strict=True)}
        self._rows = {id(mj): fresh.get(id(mj)) or known[id(mj)] for mj in mapped}
        width = self.capacities.height + 1
        avail = np.array([self._rows[id(mj)][1] for mj in mapped]).reshape(-1, width)
        self._last = (mapped, avail)
        return avail


# -- classes ------------------------------------------------------------------------------


def class_of(value: float, thresholds: Thresholds) -> Class:
    """The class of an intensity without hysteresis (for a job with no class yet)."""
    rank = sum(1 for bound in thresholds.bounds if value >= bound)
    return CLASSES[rank]


def next_class(current: Class, value: float, thresholds: Thresholds) -> Class:
    """The class after *current* for the smoothed intensity *value*, with hysteresis.

    It moves up while *value* exceeds the next class's bound times ``1 + hysteresis``
    (possibly several classes at once); otherwise down while *value* is below the current
    class's bound times ``1 - hysteresis``; otherwise it stays.
    """
    bounds = (0.0, *thresholds.bounds)  # bounds[k]: lowest intensity of CLASSES[k]
    h = thresholds.hysteresis
    rank = CLASSES.index(current)
    start = rank
    while rank + 1 < len(CLASSES) and value > bounds[rank + 1] * (1 + h):
        rank += 1
    if rank == start:
        while rank > 0 and value < bounds[rank] * (1 - h):
            rank -= 1
    return CLASSES[rank]


def _as_class(name: str) -> Class:
    try:
        return as_class(name)
    except ValueError:
        raise ValueError(f"prior: expected one of {', '.join(CLASSES)}, got {name!r}") from None


@dataclass(frozen=True, slots=True)
class JobClass:
    """One job's classification after an update.

    Attributes:
        job_id: the job.
        intensity: this sample's intensity (max utilization over levels >= 1, a fraction).
        level: the level that gave *intensity*, None if no level was given.
        smoothed: the EWMA of the intensity (a fraction).
        cls: the class.
        since_s: when *cls* started, seconds (the clock of the ``now_s`` passed in).
        held_s: how long *cls* has been held at this update, seconds.
        changed: *cls* differs from the previous update's; on a job's first update, True
            only when the sample moved it out of its *prior* class.
    """

    job_id: str
    intensity: float
    level: int | None
    smoothed: float
    cls: Class
    since_s: float
    held_s: float
    changed: bool


@dataclass
class _State:
    smoothed: float
    cls: Class
    since_s: float
    last_s: float
    result: JobClass | None = None


class Classifier:
    """Keeps each job's smoothed intensity and class across cycles.

    Args:
        thresholds: bounds, hysteresis, time constant; may be replaced (``classifier.
            thresholds = ...``) on a config reload, and the jobs keep their state.
    """

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = Thresholds() if thresholds is None else thresholds
        self._jobs: dict[str, _State] = {}

    def update(
        self,
        job_id: str,
        util_by_level: Mapping[int, float],
        now_s: float,
        prior: str | None = None,
    ) -> JobClass:
        """Add one sample of a job's utilization and return its classification.

        The EWMA weight of the new sample is ``1 - exp(-dt / tau_s)``, with *dt* the seconds
        since the job's previous sample, so irregular cycles weigh by time; a job's first
        sample initialises the average.  A sample not later than the previous one does not
        move the average (*dt* <= 0 counts as 0).

        Args:
            job_id: the job.
            util_by_level: :func:`utilization` of the job, by level.
            now_s: time of the sample, seconds (any monotonic clock, the same for all calls).
            prior: for a job seen for the first time, the class to start in (e.g. its
                expected class from a profile); the first sample then moves it only past
                the hysteresis margins.  Ignored for a known job.  Without it the first
                class is the plain band of the first sample.

        Raises:
            ValueError: *prior* is not a class name, or a utilization is negative or not
                finite.
        """
        value, level = intensity(util_by_level)
        return self._observe(job_id, value, level, now_s, prior)

    def update_many(
        self,
        job_ids: Sequence[str],
        values: Sequence[float],
        levels: Sequence[int | None],
        now_s: float,
        priors: Sequence[str | None],
    ) -> list[JobClass]:
        """:meth:`update` for many jobs whose intensity is already known.

        The same as ``update(job_ids[i], {levels[i]: values[i]}, now_s, priors[i])`` for
        each *i* in turn, for a caller that computed the intensities (:func:`intensity`)
        of all jobs at once.

        Args:
            job_ids: the jobs.
            values: their intensities (fractions, finite and >= 0: not checked here).
            levels: the level that gave each intensity.
            now_s: time of the samples, seconds.
            priors: each job's class to start in if it is new (see :meth:`update`).

        Raises:
            ValueError: a prior is not a class name.
        """
        return [
            self._observe(job_id, value, level, now_s, prior)
            for job_id, value, level, prior in zip(job_ids, values, levels, priors, strict=True)
        ]

    def _observe(
        self, job_id: str, value: float, level: int | None, now_s: float, prior: str | None
    ) -> JobClass:
        """Add one intensity sample of a job (see :meth:`update`)."""
        th = self.thresholds
        state = self._jobs.get(job_id)
        if state is None:
            start = class_of(value, th) if prior is None else _as_class(prior)
            state = _State(smoothed=value, cls=start, since_s=now_s, last_s=now_s)
            self._jobs[job_id] = state
            cls = start if prior is None else next_class(start, value, th)
        else:
            dt = max(0.0, now_s - state.last_s)
            alpha = 1.0 if th.tau_s == 0 else 1.0 - math.exp(-dt / th.tau_s)
            state.smoothed += alpha * (value - state.smoothed)
            state.last_s = max(state.last_s, now_s)
            cls = next_class(state.cls, state.smoothed, th)
        changed = cls != state.cls
        if changed:
            state.cls, state.since_s = cls, now_s
        state.result = JobClass(
            job_id=job_id,
            intensity=value,
            level=level,
            smoothed=state.smoothed,
            cls=state.cls,
            since_s=state.since_s,
            held_s=max(0.0, now_s - state.since_s),
            changed=changed,
        )
        return state.result

    def classify(
        self,
        job_ids: Sequence[str],
        figures: Utilizations,
        now_s: float,
        expected: Sequence[str],
    ) -> list[JobClass | None]:
        """Classify the running jobs of a decision cycle, and forget the jobs that ended.

        Args:
            job_ids: the running jobs.
            figures: their figures (rows in the order of *job_ids*); a job that is not
                ``sampled`` keeps its last sample.
            now_s: the cycle's time, seconds.
            expected: each job's class to start in if it is new.

        Returns:
            Each job's latest classification (None: never sampled).
        """
        samples: list[JobClass | None] = [self.get(job_id) for job_id in job_ids]
        now = np.flatnonzero(figures.sampled).tolist()
        updated = self.update_many(
            [job_ids[i] for i in now],
            figures.intensity[now].tolist(),
            figures.level[now].tolist(),
            now_s,
            [expected[i] for i in now],
        )
        for i, sample in zip(now, updated, strict=True):
            samples[i] = sample
        self.prune(job_ids)
        return samples

    def get(self, job_id: str) -> JobClass | None:
        """The job's latest classification, None for a job never updated (or forgotten)."""
        state = self._jobs.get(job_id)
        return None if state is None else state.result

    def forget(self, job_id: str) -> None:
        """Drop an ended job's state (nothing happens for an unknown job)."""
        self._jobs.pop(job_id, None)

    def prune(self, running_ids: Collection[str]) -> list[str]:
        """Drop the state of every job not in *running_ids*; return the dropped ids."""
        running = set(running_ids)
        gone = [job_id for job_id in self._jobs if job_id not in running]
        for job_id in gone:
            del self._jobs[job_id]
        return gone

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)
