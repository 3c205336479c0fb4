"""What a profile predicts of one job on the hosts it was given: its expected class.

When a job starts, nothing has been measured of it, yet its SL is chosen now and kept
(docs/design.md §4).  A confident profile that matches the job (:mod:`ibqos.classify.prior`)
gives its expected class:

- with a traffic model (pattern and mean rate) that fits the job's size, the class that
  traffic has on the job's actual placement (the characterization of
  :mod:`ibqos.classify.levels`: a spread job sees more bandwidth), unless at least
  :data:`~ibqos.classify.profiles.MIN_MEASURED` jobs measured on the fabric agree on
  another class with ``min_confidence`` (:meth:`~ibqos.classify.profiles.Profile.
  measured_class`): then that class;
- without a model the profile's ``expected_class``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ibqos.classify.levels import Characterizer, Placement
from ibqos.classify.profiles import Profile
from ibqos.config.classes import Class


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


def predict(
    profile: Profile,
    job_id: str,
    hosts: tuple[str, ...],
    characterizer: Characterizer | None,
    min_confidence: float,
) -> Prior:
    """The expected class of a job (running on *hosts*) by its *profile*.

    Args:
        profile: the job's profile.
        job_id: the job.
        hosts: its hosts found on the fabric, in job order.
        characterizer: the fabric's; None: the model is not used.
        min_confidence: how sure the measured jobs must be to overrule the model (0..1).
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
    measured = profile.measured_class(min_confidence)
    traffic = model.traffic(job_id, hosts)
    figures = characterizer.characterize(traffic, Placement("job", hosts))
    if measured is not None and measured[0] != figures.cls:
        # Jobs measured on the fabric consistently saw another class: the model (its
        # rate, its pattern) no longer describes what the application does, and a
        # model that always won could never be corrected by what was measured.
        how = f"measured jobs, the model said {figures.cls}"
        return Prior(profile, measured[0], how, figures.intensity)
    return Prior(profile, figures.cls, "model on its placement", figures.intensity)
