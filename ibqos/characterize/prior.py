"""Profiles as the planner's priors: a new job's expected class and its attribution pattern.

When a job starts, nothing has been measured of it, yet its SL is chosen now and kept
(DESIGN.md section 2).  A profile that matches the job (:meth:`ProfileStore.match`) and is
confident enough (``profiles.min_confidence``) gives:

- the **expected class**: with a traffic model (pattern and mean rate) that fits the job's
  size, the class that traffic has on the job's actual placement (the characterization of
  :mod:`ibqos.characterize.levels`: a spread job sees more bandwidth); otherwise the
  profile's ``expected_class``;
- the **attribution prior**: a job that declares no pattern gets the profile's, so shared
  uplinks are split by it instead of by gravity (``docs/plan.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ibqos.characterize.levels import Characterizer, NodeTraffic, Placement
from ibqos.characterize.profiles import NAME_PATTERN, Observation, Profile, ProfileStore
from ibqos.classify import Class
from ibqos.errors import ProfileError
from ibqos.jobs import Job

if TYPE_CHECKING:
    from ibqos.config import ProfilesConfig
    from ibqos.decide import FinishedJob

log = logging.getLogger("ibqos.profiles")


@dataclass(frozen=True)
class Prior:
    """What a profile says of one job.

    Attributes:
        profile: the profile.
        cls: the job's expected class.
        how: ``model on its placement`` or ``profile class``.
    """

    profile: Profile
    cls: Class
    how: str

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
        modelled = model.job(Job(job.id, hosts))
        figures = characterizer.characterize(
            NodeTraffic.from_job(modelled), Placement("job", hosts)
        )
        return Prior(profile, figures.cls, "model on its placement")


def make_priors(cfg: ProfilesConfig) -> Priors | None:
    """The priors of the ``profiles`` config section; None when it names no directory.

    Raises:
        ProfileError: a profile file is bad (a daemon starting with it would plan wrong).
    """
    if cfg.dir is None:
        return None
    return Priors(ProfileStore(cfg.dir), cfg.min_confidence)


def learn(store: ProfileStore, finished: Sequence[FinishedJob], now_s: float) -> int:
    """Add each finished job's measured class to its application's profile (by name,
    user and size: the most specific profile that exists, else a new one by name).

    A profile that cannot be written is logged, not raised: learning must not stop the
    agent.  Returns how many profiles were updated.
    """
    done = 0
    for job in finished:
        if not job.name or NAME_PATTERN.match(job.name) is None:
            continue  # jobs without a usable application name teach nothing
        found = store.match(job.name, job.user, job.nodes)
        key = (None, None) if found is None else (found.user, found.nodes)
        obs = Observation(f"job {job.id}", job.cls, round(job.intensity, 6), round(now_s, 3))
        try:
            store.observe(job.name, obs, user=key[0], nodes=key[1])
        except ProfileError as err:
            log.warning("profiles: cannot learn from job %s: %s", job.id, err)
            continue
        done += 1
    return done
