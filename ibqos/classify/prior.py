"""Profiles as the planner's priors: each job's profile, its attribution pattern, learning.

When a job starts, nothing has been measured of it, yet its SL is chosen now and kept
(docs/design.md §4).  A profile that matches the job (:meth:`ProfileStore.match`) and is
confident enough (``profiles.min_confidence``) gives:

- the **attribution prior**: a job that declares no pattern gets the profile's, so shared
  uplinks are split by it instead of by gravity (``docs/plan.md``): :class:`JobProfiles`,
  the first stage of a decision cycle, before the jobs are mapped;
- the **expected class** (:func:`ibqos.classify.predict.predict`), once the job's hosts
  are known (:mod:`ibqos.classify.expected`).

When jobs end, their measured classes are added to their profiles (:func:`learn`); the
phases the tuner fitted to the setups it tried (:mod:`ibqos.sim.learn`) are recorded in
them as they are learnt (:func:`learn_phases`), for the next run's prediction.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ibqos.classify.levels import Characterizer
from ibqos.classify.predict import Prior, predict
from ibqos.classify.profile_schema import NAME_PATTERN
from ibqos.classify.profiles import Model, Observation, Profile, ProfileStore
from ibqos.config.classes import Class
from ibqos.errors import ProfileError
from ibqos.jobs.model import Job

if TYPE_CHECKING:
    from ibqos.config.models import ProfilesConfig

log = logging.getLogger(__name__)


class Priors:
    """Matches jobs to profiles.

    Args:
        store: the profiles.
        min_confidence: profiles less confident than this are not used (0..1).
    """

    def __init__(self, store: ProfileStore, min_confidence: float = 0.5) -> None:
        self.store = store
        self.min_confidence = min_confidence

    def profile(self, job: Job) -> Profile | None:
        """The confident profile matching *job*, if any."""
        found = self.store.match(job.name, job.user, len(job.nodes))
        if found is None or found.confidence < self.min_confidence:
            return None
        return found

    def phases(self, job: Job) -> Model | None:
        """The model of the profile matching *job* when it records both phases
        (``duty`` and ``period_s``), however sure the profile is of its class: phases
        learnt from trials may be all a new profile holds."""
        found = self.store.match(job.name, job.user, len(job.nodes))
        model = found.model if found is not None else None
        if model is None or model.duty is None or model.period_s is None:
            return None
        return model

    def with_pattern(self, job: Job, profile: Profile) -> Job:
        """*job* with the profile's pattern as its attribution prior, when it declares none
        and the profile's model fits its size; else *job* itself."""
        model = profile.model
        if job.pattern or model is None or not model.fits(len(job.nodes)):
            return job
        return model.job(job)

    def prior(
        self,
        job: Job,
        profile: Profile,
        hosts: tuple[str, ...],
        characterizer: Characterizer | None,
    ) -> Prior:
        """The expected class of *job* (running on *hosts*) by *profile*
        (:func:`~ibqos.classify.predict.predict`).

        Args:
            job: the job as its source gave it.
            profile: its profile (:meth:`profile`).
            hosts: its hosts found on the fabric, in job order.
            characterizer: the fabric's; None: the model is not used.
        """
        return predict(profile, job.id, hosts, characterizer, self.min_confidence)


class Matched(NamedTuple):
    """A job and its profile, as :class:`JobProfiles` matched them.

    Attributes:
        source: the job as its source gave it.
        job: the job used: with its profile's pattern when it declares none.
        profile: its profile; None when none matched.
    """

    source: Job
    job: Job
    profile: Profile | None


class JobProfiles:
    """The running jobs' profiles, each matched once per job object.

    A job source hands back the same objects while nothing changes, so a job is matched
    when it first appears, and the job used keeps its identity from cycle to cycle: the
    job mapper's and the attributor's caches still hold.

    Attributes:
        matched: by ``id()`` of a job as its source gave it, and of the job used: the
            match (the jobs of the last :meth:`lookup` only).
    """

    def __init__(self) -> None:
        self.matched: dict[int, Matched] = {}

    def lookup(self, jobs: Sequence[Job], priors: Priors | None) -> Sequence[Job]:
        """The jobs, each with its profile's pattern when it declares none (*jobs* itself
        without priors)."""
        if priors is None:
            return jobs
        seen: dict[int, Matched] = {}
        out = []
        for job in jobs:
            hit = self.matched.get(id(job))
            if hit is None or hit.source is not job:
                profile = priors.profile(job)
                used = job if profile is None else priors.with_pattern(job, profile)
                hit = Matched(job, used, profile)
            seen[id(job)] = seen[id(hit.job)] = hit
            out.append(hit.job)
        self.matched = seen
        return out


def make_priors(cfg: ProfilesConfig) -> Priors | None:
    """The priors of the ``profiles`` config section; None when it names no directory.

    Raises:
        ProfileError: a profile file is bad (a daemon starting with it would plan wrong).
    """
    if cfg.dir is None:
        return None
    return Priors(ProfileStore(cfg.dir), cfg.min_confidence)


def learn(
    store: ProfileStore, finished: Iterable[FinishedJob], now_s: float, *, strict: bool = False
) -> int:
    """Add each finished job's measured class to its application's profile (by name,
    user and size: the most specific profile that exists, else a new one by name).

    Each job is one observation, ``job <id>`` at its end time (*now_s* when that is not
    known): a job already in its profile (the agent learned it, or ``ibqos characterize
    learn`` ran before) is not added again.  Each profile is read again from its file
    right before it is updated (:meth:`ProfileStore.observe`).

    A profile that cannot be written is logged, not raised, unless *strict*: learning must
    not stop the agent.  Returns how many profiles were updated.

    Raises:
        ProfileError: with *strict*, a profile that cannot be read or written.
    """
    done = 0
    for job in finished:
        if not job.name or NAME_PATTERN.match(job.name) is None:
            continue  # jobs without a usable application name teach nothing
        found = store.match(job.name, job.user, job.nodes)
        key = (None, None) if found is None else (found.user, found.nodes)
        when = round(now_s if job.end_s is None else job.end_s, 3)
        obs = Observation(f"job {job.id}", job.cls, round(job.intensity, 6), when)
        try:
            current = store.reread(job.name, *key)
            if current is not None and any(
                (o.source, o.time_s) == (obs.source, obs.time_s) for o in current.observations
            ):
                continue
            store.observe(job.name, obs, user=key[0], nodes=key[1])
        except ProfileError as err:
            if strict:
                raise
            log.warning("profiles: cannot learn from job %s: %s", job.id, err)
            continue
        done += 1
    return done


#: trials the phases of a profile count at most: an application that changed (a new input,
#: a new version) moves its learnt phases within a few runs
MAX_PHASE_TRIALS = 50


def learn_phases(
    store: ProfileStore,
    job: Job,
    duty: float,
    period_s: float,
    trials: int,
    cls: Class,
    *,
    strict: bool = False,
) -> bool:
    """Record the phases fitted to *trials* setups tried (:mod:`ibqos.sim.learn`) in the
    profile of *job*'s application (by name, user and size: the most specific that
    exists, else a new one by name, as :func:`learn` chooses), read again from its file
    first.  Phases already learnt are averaged with the new ones, each weighted by its
    trials (the period geometrically: it is a scale), counting at most
    :data:`MAX_PHASE_TRIALS`; phases declared or characterized (no ``phase_trials``) are
    kept.  A profile without a model gets the job's pattern (all-to-all without one: gravity
    within a job); a new profile gets *cls*, with confidence 0: nothing observed yet.

    Returns whether a profile was written; a job without a usable name is skipped, and a
    profile that cannot be written is logged, not raised, unless *strict*.

    Raises:
        ProfileError: with *strict*, a profile that cannot be read or written.
    """
    if not job.name or NAME_PATTERN.match(job.name) is None:
        return False
    found = store.match(job.name, job.user, len(job.nodes))
    key = (None, None) if found is None else (found.user, found.nodes)
    try:
        profile = store.reread(job.name, *key) or Profile(job.name, cls, 0.0, *key)
        model = profile.model or Model(
            job.pattern or "all-to-all", halo_dims=job.halo_dims, matrix=job.matrix
        )
        if model.duty is not None and model.period_s is not None:
            if model.phase_trials is None:
                return False  # declared: the trials were fitted around it
            old = min(model.phase_trials, MAX_PHASE_TRIALS)
            total = old + trials
            duty = (old * model.duty + trials * duty) / total
            period_s = math.exp(
                (old * math.log(model.period_s) + trials * math.log(period_s)) / total
            )
            trials = total
        learnt = replace(
            model,
            duty=round(duty, 4),
            period_s=float(f"{period_s:.4g}"),
            phase_trials=min(trials, MAX_PHASE_TRIALS),
        )
        store.save(replace(profile, model=learnt))
    except ProfileError as err:
        if strict:
            raise
        log.warning("profiles: cannot record the phases of job %s: %s", job.id, err)
        return False
    return True


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """A job that ended, as last measured (to learn profiles from).

    Attributes:
        id, name, user: from the job source.
        nodes: its hosts on the fabric.
        cls: the class of its last smoothed intensity, by the thresholds alone (no
            hysteresis, so not biased towards the class it was expected to have).
        intensity: its last smoothed intensity (a fraction).
        end_s: when it was seen to have ended, seconds since the epoch (None: unknown).
    """

    id: str
    name: str
    user: str | None
    nodes: int
    cls: Class
    intensity: float
    end_s: float | None = None

    def to_doc(self) -> dict[str, Any]:
        """As the state file keeps it."""
        return {
            "id": self.id,
            "user": self.user,
            "nodes": self.nodes,
            "class": self.cls,
            "intensity": self.intensity,
            "end_s": self.end_s,
        }
