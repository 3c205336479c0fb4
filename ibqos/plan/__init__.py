"""Planning: the lane plan of the running jobs, and one decision cycle end to end.

Pipeline stage 4 of ibqos (docs/design.md §5)::

    classified jobs ──► plan() ──► Plan (job->SL, SL->VL, VLArb weights) ──► Decision

- :mod:`~ibqos.plan.decide`: :class:`Decider`, one decision cycle through every stage;
- :mod:`~ibqos.plan.planner`: SLs, lanes and weights (stable, constrained), with
  :mod:`~ibqos.plan.tables` (SL2VL and VLArb of the active SLs), :mod:`~ibqos.plan.grouping`
  (jobs to lanes) and :mod:`~ibqos.plan.weights` (VLArb);
- :mod:`~ibqos.plan.setups`: the favour-light law's setup and the candidates beside it;
  :mod:`~ibqos.plan.tuner`: trying them on the fabric (rounds of trials, the score);
  :mod:`~ibqos.plan.tuning`: the two as a cycle drives them (:class:`TuningDriver`);
- :mod:`~ibqos.plan.report`: what a cycle hands out (:class:`Decision`, :class:`JobReport`),
  built from what its stages produced (:class:`CycleOutputs`);
- :mod:`~ibqos.plan.output`: ``ibqos plan`` output, as tables or the documented JSON.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.plan.decide import Decider
    from ibqos.plan.grouping import lane_cost, optimal_grouping
    from ibqos.plan.output import align, lane_weights, pct_text, rate_text, render, to_json
    from ibqos.plan.planner import JobState, Lane, Plan, PlanResult, Tables, plan
    from ibqos.plan.report import CycleOutputs, Decision, JobReport, LevelFigures, build_decision
    from ibqos.plan.setups import LAW, Setup, candidates
    from ibqos.plan.tuner import Tuner, TuningStatus
    from ibqos.plan.tuning import Predicted, Predictor, TuningDriver
    from ibqos.plan.weights import interleave, lane_entries, quantize, weight_target
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".decide": ("Decider",),
            ".grouping": ("lane_cost", "optimal_grouping"),
            ".output": ("align", "lane_weights", "pct_text", "rate_text", "render", "to_json"),
            ".planner": ("JobState", "Lane", "Plan", "PlanResult", "Tables", "plan"),
            ".report": ("CycleOutputs", "Decision", "JobReport", "LevelFigures", "build_decision"),
            ".setups": ("LAW", "Setup", "candidates"),
            ".tuner": ("Tuner", "TuningStatus"),
            ".tuning": ("Predicted", "Predictor", "TuningDriver"),
            ".weights": ("interleave", "lane_entries", "quantize", "weight_target"),
        },
    )

__all__ = [
    "LAW",
    "CycleOutputs",
    "Decider",
    "Decision",
    "JobReport",
    "JobState",
    "Lane",
    "LevelFigures",
    "Plan",
    "PlanResult",
    "Predicted",
    "Predictor",
    "Setup",
    "Tables",
    "Tuner",
    "TuningDriver",
    "TuningStatus",
    "align",
    "build_decision",
    "candidates",
    "interleave",
    "lane_cost",
    "lane_entries",
    "lane_weights",
    "optimal_grouping",
    "pct_text",
    "plan",
    "quantize",
    "rate_text",
    "render",
    "to_json",
    "weight_target",
]
