"""Profiles as the planner's priors: a new job's expected class and its attribution pattern.

When a job starts, nothing has been measured of it, yet its SL is chosen now and kept
(DESIGN.md section 2).  A profile that matches the job (:meth:`ProfileStore.match`) and is
confident enough (``profiles.min_confidence``) gives:

- the **expected class**: with a traffic model (pattern and mean rate) that fits the job's
  size, the class that traffic has on the job's actual placement (the characterization of
  :mod:`ibqos.classify.levels`: a spread job sees more bandwidth), unless at least
  :data:`~ibqos.classify.profiles.MIN_MEASURED` jobs measured on the fabric agree on
  another class with ``min_confidence`` (:meth:`Profile.measured_class`): then that class;
  without a model the profile's ``expected_class``;
- the **attribution prior**: a job that declares no pattern gets the profile's, so shared
  uplinks are split by it instead of by gravity (``docs/plan.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ibqos.classify.levels import Characterizer, NodeTraffic, Placement
from ibqos.classify.profiles import NAME_PATTERN, Model, Observation, Profile, ProfileStore
from ibqos.config.classes import (
    Class,
)
from ibqos.errors import ProfileError
from ibqos.jobs.jobfile import Job

if TYPE_CHECKING:
    from ibqos.config.schema import ProfilesConfig

    pass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prior:
    """What a profile says of one job.

    Attributes:
        profile: the profile.
        cls: the job's expected class.
        how: ``model on its placement``, ``profile class`` or ``measured jobs ...``.
        intensity: the model's intensity on the job's placement (a fraction); None when
            no model was used.
    """

    profile: Profile
    cls: Class
    how: str
    intensity: float | None = None

    def describe(self) -> str:
        """One line for ``ibqos plan``: which profile, what it gave and how sure it is."""
        name = self.profile.path.name if self.profile.path else self.profile.file_name()
        return f"{name}: {self.cls} ({self.how}, confidence {self.profile.confidence:.2f})"


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
        """The expected class of *job* (running on *hosts*) by *profile*.

        Args:
            job: the job as its source gave it.
            profile: its profile (:meth:`profile`).
            hosts: its hosts found on the fabric, in job order.
            characterizer: the fabric's; None: the model is not used.
        """
        model = profile.model
        if (
            characterizer is None
            or model is None
            or not model.rate_bytes_per_s
            or not hosts
            or not model.fits(len(hosts))
            or any(h not in characterizer.ports for h in hosts)
        ):
            return Prior(profile, profile.expected_class, "profile class")
        traffic = model_traffic(model, job.id, hosts)
        figures = characterizer.characterize(traffic, Placement("job", hosts))
        measured = profile.measured_class(self.min_confidence)
        if measured is not None and measured[0] != figures.cls:
            # Jobs measured on the fabric consistently saw another class: the model (its
            # rate, its pattern) no longer describes what the application does, and a
            # model that always won could never be corrected by what was measured.
            how = f"measured jobs, the model said {figures.cls}"
            return Prior(profile, measured[0], how, figures.intensity)
        return Prior(profile, figures.cls, "model on its placement", figures.intensity)


def model_traffic(model: Model, job_id: str, hosts: Sequence[str]) -> NodeTraffic:
    """The traffic a model with a rate predicts for a job on *hosts* (node order).

    A ``matrix`` model is scaled as a whole, so nodes send in the matrix's proportions and
    the mean over all nodes is the rate: a traced job in which only some nodes send keeps
    its total (the lab's job format instead gives every sending row the full rate).  Other
    patterns are the lab's (``docs/jobs.md``), every node sending the rate.
    """
    if model.matrix is not None:
        weights = np.array(model.matrix, dtype=np.float64)
        scale = model.rate_bytes_per_s * len(weights) / float(weights.sum())
        return NodeTraffic.from_matrix(weights * scale)
    return NodeTraffic.from_job(model.job(Job(job_id, tuple(hosts))))


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
