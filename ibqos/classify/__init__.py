"""Classification: each running job's utilization, intensity and class.

Pipeline stage 3 of ibqos (docs/design.md §3, "Per-level utilization")::

    jobs ──► JobProfiles.lookup() (a profile's pattern, before the jobs are mapped)
    mapped jobs ──► Expectations.expected() (profile prediction, history, default)
    attributed rates ──► JobUtilization.utilizations() ──► Classifier.classify()

- :mod:`~ibqos.classify.classifier`: available bandwidth, utilization, intensity, and the
  classifier (EWMA, hysteresis);
- :mod:`~ibqos.classify.profiles`: job profiles (the YAML store) and their traffic models,
  in the format :mod:`~ibqos.classify.profile_schema` validates;
- :mod:`~ibqos.classify.prior`: profiles as priors (matching, patterns, learning);
- :mod:`~ibqos.classify.traffic`, :mod:`~ibqos.classify.levels`: a job's traffic and its
  per-level figures on a placement (the characterization);
- :mod:`~ibqos.classify.predict`: what a profile predicts of a job on its hosts;
- :mod:`~ibqos.classify.expected`: each running job's expected class, and what ended
  jobs leave for the next ones.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.classify.classifier import (
        Capacities,
        Classifier,
        JobClass,
        JobUtilization,
        Utilizations,
        available,
        class_of,
        intensity,
        next_class,
        utilization,
    )
    from ibqos.classify.expected import Expectations, Expected, Running
    from ibqos.classify.levels import Characterization, Characterizer, LevelRow, Placement
    from ibqos.classify.predict import Prior
    from ibqos.classify.prior import FinishedJob, JobProfiles, Matched, Priors, learn, make_priors
    from ibqos.classify.profiles import (
        Model,
        Observation,
        Profile,
        ProfileStore,
        check_name,
        load_profile,
        parse_profile,
    )
    from ibqos.classify.traffic import NodeTraffic
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".classifier": (
                "Capacities",
                "Classifier",
                "JobClass",
                "JobUtilization",
                "Utilizations",
                "available",
                "class_of",
                "intensity",
                "next_class",
                "utilization",
            ),
            ".expected": ("Expectations", "Expected", "Running"),
            ".levels": ("Characterization", "Characterizer", "LevelRow", "Placement"),
            ".predict": ("Prior",),
            ".prior": ("FinishedJob", "JobProfiles", "Matched", "Priors", "learn", "make_priors"),
            ".profiles": (
                "Model",
                "Observation",
                "Profile",
                "ProfileStore",
                "check_name",
                "load_profile",
                "parse_profile",
            ),
            ".traffic": ("NodeTraffic",),
        },
    )

__all__ = [
    "Capacities",
    "Characterization",
    "Characterizer",
    "Classifier",
    "Expectations",
    "Expected",
    "FinishedJob",
    "JobClass",
    "JobProfiles",
    "JobUtilization",
    "LevelRow",
    "Matched",
    "Model",
    "NodeTraffic",
    "Observation",
    "Placement",
    "Prior",
    "Priors",
    "Profile",
    "ProfileStore",
    "Running",
    "Utilizations",
    "available",
    "check_name",
    "class_of",
    "intensity",
    "learn",
    "load_profile",
    "make_priors",
    "next_class",
    "parse_profile",
    "utilization",
]
