"""The ``tuning`` section of ``ibqos.yaml``: how the agent tries QoS setups beside its law.

The agent generates candidate setups for the running jobs (:mod:`ibqos.plan.setups`),
predicts them with the fluid model to keep a shortlist, and, in enforce mode only, tries the
shortlist on the fabric one setup at a time, keeping the one the jobs' own counters show
them progressing best under (:mod:`ibqos.plan.tuner`, ``docs/tuning.md``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from ibqos.config.fields import described, flag, number

__all__ = ["Objective", "TuningConfig"]

#: what a setup's score judges: the node-weighted mean slowdown (the machine time lost)
#: or the worst job's slowdown
Objective = Literal["node-time", "worst-job"]


@dataclass(frozen=True, config=ConfigDict(extra="forbid", json_schema_extra=described()))
class TuningConfig:
    """How the agent tunes the QoS setup by prediction and observation.

    Attributes:
        enabled: tune at all; false keeps the favour-light law, as before tuning existed.
            In observe mode tuning only predicts (never reloads OpenSM).
        candidates: most setups generated for a mix, the law included (1 = the law only).
        shortlist: most setups tried on the fabric besides the law, the best predicted
            first.
        trial_sweeps: counter sweeps measured per trial (>= 2); the sweep the reload
            falls in is left out, so a trial lasts trial_sweeps + 1 sweeps.
        margin: least measured gain (a fraction of the score) for leaving the
            favour-light law, or an earlier tried setup for a later one: the floor of the
            margin, which widens to margin_sigmas standard errors of the two trials'
            scores when their sweeps scatter more.
        objective: what the score of a setup judges (docs/tuning.md, "The score"):
            "node-time", the node-weighted mean of the jobs' slowdowns (the machine time
            lost; the default), or "worst-job", the largest slowdown of any job (least
            maximum slowdown: for sites that protect small jobs from big ones).
        margin_sigmas: how many standard errors of the measured difference a setup must
            gain by to be kept over an earlier tried one (0: the floor alone).
        predicted_slack: a shortlisted setup predicted worse than the best predicted by
            more than this fraction of the score is not tried.
        floor: a trial that drops any job below this share of its best rate (measured
            under the setups tried so far) is ended and reverted at once.
        drift: re-tune when the kept setup's score, measured again, is this much (a
            fraction) worse than when it was chosen.
        settle_s: seconds a changed mix (a job started or ended, a class changed) must
            stay unchanged before a new round of trials starts.
        max_reloads_per_hour: most OpenSM reloads tuning may cause in any hour (trials,
            their reverts and the final choice); a trial starts only with room for its
            revert too.
        assumed_duty: share of each iteration a job communicates, for jobs whose profile
            gives none (prediction only).
        assumed_period_s: iteration length in seconds, for jobs whose profile gives none
            (prediction only).
        search_budget_s: wall-clock seconds a prediction may take, the search for setups
            beyond the candidates included (``docs/tuning.md``, "The search"); the
            candidates are predicted whatever it says; 0: no search.
        refine_rounds: after a round decides, rounds of refinement at most per mix
            (``docs/tuning.md``, "Refinement"): setups near the kept one, predicted with
            the jobs' phases fitted to the trials, then tried on the fabric within
            max_reloads_per_hour, each kept only if it measures better by the margin;
            0: none.
    """

    enabled: Annotated[bool, flag()] = True
    candidates: Annotated[int, number(1, 16, integer=True)] = 8
    shortlist: Annotated[int, number(0, 15, integer=True)] = 3
    trial_sweeps: Annotated[int, number(2, 100, integer=True)] = 3
    margin: Annotated[float, number(0, 1)] = 0.0
    objective: Objective = "node-time"
    margin_sigmas: Annotated[float, number(0, 10)] = 0.0
    predicted_slack: Annotated[float, number(0, 10)] = 0.05
    floor: Annotated[float, number(0, 1)] = 0.5
    drift: Annotated[float, number(0.01, 10)] = 0.15
    settle_s: Annotated[float, number(0)] = 30.0
    max_reloads_per_hour: Annotated[int, number(2, 3600, integer=True)] = 12
    assumed_duty: Annotated[float, number(0.01, 1)] = 0.5
    assumed_period_s: Annotated[float, number(1e-6, 3600)] = 0.01
    search_budget_s: Annotated[float, number(0, 3600)] = 60.0
    refine_rounds: Annotated[int, number(0, 16, integer=True)] = 2
