"""The class each running job is expected to have before it is measured, and what the
jobs that ended leave for the next ones.

A job's expected class is fixed when the decision cycle first sees it: the class it had
before a restart (the agent's saved state), else what its profile predicts on its hosts
(:func:`~ibqos.classify.predict.predict`), else the last class of its application (a job
of the same name that ended), else the configured default.  The classifier starts a new
job in that class, and the planner gives it an SL that suits it.

When a job ends, its class is kept by application name (:attr:`Expectations.history`),
and a job that was measured is handed out as a
:class:`~ibqos.classify.prior.FinishedJob`, to learn profiles from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ibqos.attribute.jobmap import MappedJob
from ibqos.classify.classifier import Classifier, class_of
from ibqos.classify.levels import Characterizer
from ibqos.classify.predict import Prior, predict
from ibqos.classify.prior import FinishedJob, Matched, Priors
from ibqos.config.classes import Class, Thresholds
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric


@dataclass(frozen=True)
class Running:
    """What a planned cycle knew of its running jobs, by job id.

    Attributes:
        names: application names.
        ran: (user, number of hosts on the fabric).
        expected: expected classes (fixed when a job was first seen).
        priors: the profile predictions that gave expected classes.
    """

    names: Mapping[str, str] = field(default_factory=dict)
    ran: Mapping[str, tuple[str | None, int]] = field(default_factory=dict)
    expected: Mapping[str, Class] = field(default_factory=dict)
    priors: Mapping[str, Prior] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """The expected classes of one cycle.

    Attributes:
        classes: one per running job, in job order.
        running: what to remember of the running jobs once the cycle's plan holds.
    """

    classes: list[Class]
    running: Running


class Expectations:
    """Expected classes of the running jobs, and the classes of the jobs that ended.

    Args:
        fabric: the topology the jobs run on (a profile's model is characterized on it).
        matcher: how host names are read from NodeDescriptions.
        exclude_hosts: hosts on the fabric that run no jobs.

    Attributes:
        history: application name -> class of its last finished job (the expected class of
            the next job of that name; profiles refine it).
        last_finished: application name -> its last finished job that was measured (kept
            in the state file for ``ibqos characterize learn``, which counts each job once
            by id and end).
        known_cls: classes of jobs that ran before a restart (the saved state): such a job,
            still running, starts in its class.
    """

    def __init__(
        self, fabric: Fabric, matcher: HostMatcher, exclude_hosts: Collection[str]
    ) -> None:
        self.history: dict[str, Class] = {}
        self.last_finished: dict[str, FinishedJob] = {}
        self.known_cls: dict[str, Class] = {}
        self.matcher = matcher
        self.exclude_hosts = exclude_hosts
        self.set_fabric(fabric)

    def set_fabric(self, fabric: Fabric) -> None:
        """Predict on a new topology (after a fabric change)."""
        self.fabric = fabric
        self._characterizer: Characterizer | None = None  # built when a profile needs it

    def ended(
        self,
        classes: Mapping[str, Class],
        running: Collection[str],
        last: Running,
        classifier: Classifier,
        wall_clock: Callable[[], float],
    ) -> tuple[FinishedJob, ...]:
        """Record the class of every job that ended; return those that were measured.

        Args:
            classes: job id -> class, of the plan in force.
            running: ids of the jobs running now.
            last: what the cycle that made the plan in force knew of its jobs.
            classifier: the classifier, still holding the ended jobs' last samples.
            wall_clock: seconds since the epoch, read once to stamp the jobs that ended.
        """
        finished = []
        end_s: float | None = None
        for job_id, cls in classes.items():
            if job_id in running:
                continue
            if end_s is None:
                end_s = round(wall_clock(), 3)  # ms: as profiles keep it
            name = last.names.get(job_id, "")
            if name:
                self.history[name] = cls
            sample = classifier.get(job_id)
            job = last.ran.get(job_id)
            if sample is not None and job is not None:
                # the band of its measured (smoothed) intensity: the class it kept may
                # still be its prior's, held by hysteresis, and learning that would only
                # confirm the prior
                measured = class_of(sample.smoothed, classifier.thresholds)
                done = FinishedJob(job_id, name, job[0], job[1], measured, sample.smoothed, end_s)
                finished.append(done)
                if name:
                    self.last_finished[name] = done
        return tuple(finished)

    def expected(
        self,
        mapped: Sequence[MappedJob],
        last: Running,
        matched: Mapping[int, Matched],
        priors: Priors | None,
        thresholds: Thresholds,
        default: Class,
    ) -> Expected:
        """The expected class of every running job, computed when a job is first seen.

        Args:
            mapped: the running jobs.
            last: what the last planned cycle knew of its jobs.
            matched: the jobs' profiles (:attr:`ibqos.classify.prior.JobProfiles.matched`).
            priors: the profiles in use (None: none).
            thresholds: the classifier's, as a config reload last set them.
            default: the class of a job nothing is known of (``LaneConfig.default_class``).
        """
        priors_of = dict(last.priors)
        classes = []
        for mj in mapped:
            cls = last.expected.get(mj.id) or self.known_cls.get(mj.id)
            if cls is None:
                hit = matched.get(id(mj.job))
                profile = hit.profile if hit is not None and hit.job is mj.job else None
                if profile is not None and priors is not None:
                    if self._characterizer is None and profile.model is not None:
                        self._characterizer = Characterizer(
                            self.fabric, matcher=self.matcher, exclude=self.exclude_hosts
                        )
                    if self._characterizer is not None:
                        self._characterizer.thresholds = thresholds
                    prior = predict(
                        profile, mj.id, mj.hosts, self._characterizer, priors.min_confidence
                    )
                    priors_of[mj.id] = prior
                    cls = prior.cls
                else:
                    known = self.history.get(mj.job.name) if mj.job.name else None
                    cls = known or default
            classes.append(cls)
        expected = {mj.id: cls for mj, cls in zip(mapped, classes, strict=True)}
        running = Running(
            names={mj.id: mj.job.name for mj in mapped},
            ran={mj.id: (mj.job.user, len(mj.hosts)) for mj in mapped},
            expected=expected,
            priors={j: p for j, p in priors_of.items() if j in expected},
        )
        return Expected(classes, running)
