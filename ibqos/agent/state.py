"""What must survive a restart, in the state directory (``agent.state_dir``).

``state.json`` holds the job -> SL bindings and classes of the plan in force, the classes of
finished applications (the expected class of their next job) and each one's last measured
finished job (for ``ibqos characterize learn``), a summary of the plan and the last apply
result.  On restart the agent gives every job that is still running the SL it
had, so no job's SL is reshuffled (its MPI ranks cached it at launch).  ``ibqos status``
reads the same file.  It is written atomically after every cycle that changed it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ibqos.config.classes import Class, as_class
from ibqos.errors import StateError
from ibqos.fsio import atomic_write

if TYPE_CHECKING:
    from ibqos.classify.prior import FinishedJob
    from ibqos.plan.tuner import TuningStatus

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
VERSION = 1


@dataclass
class AgentState:
    """The agent's memory across restarts.

    Attributes:
        job_sl: SL of every running job the plan in force knows.
        job_cls: class of each of those jobs as the plan accepted it.
        history: application name -> class of its last finished job.
        plan: the last decision as ``ibqos plan --format json`` prints it (for status).
        last_apply: the last apply result (``summary``, ``ok``, ``rolled_back``, ...).
        updated_s: when it was written, seconds since the epoch.
        mode: the mode it ran in ("observe": *plan* was only proposed, not in force).
        finished: application name -> its last finished job that was measured (what
            ``ibqos characterize learn`` adds to profiles, once per job id and end time).
        in_force: the plan whose files OpenSM took (:func:`ibqos.plan.saved.plan_to_doc`;
            in observe mode the plan shown): a restart continues from it without re-packing
            the lanes.  None: no plan in force yet.
        tuning: what tuning was doing (:func:`tuning_doc`), for ``ibqos status``; None:
            tuning is off or has not run.
        routes: the forwarding tables in use (:meth:`ibqos.collect.routes.RouteSource.
            status`), for ``ibqos status``; None: not known.
    """

    job_sl: dict[str, int] = field(default_factory=dict)
    job_cls: dict[str, Class] = field(default_factory=dict)
    history: dict[str, Class] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    last_apply: dict[str, Any] | None = None
    updated_s: float = 0.0
    mode: str = "enforce"
    # last: callers that build a state positionally keep working
    finished: dict[str, FinishedJob] = field(default_factory=dict)
    in_force: dict[str, Any] | None = None
    tuning: dict[str, Any] | None = None
    routes: dict[str, Any] | None = None

    def to_json(self) -> str:
        """The file's text."""
        doc = {
            "version": VERSION,
            "updated_s": self.updated_s,
            "mode": self.mode,
            "job_sl": self.job_sl,
            "job_cls": self.job_cls,
            "history": self.history,
            "finished": {name: job.to_doc() for name, job in self.finished.items()},
            "last_apply": self.last_apply,
            "plan": self.plan,
            "in_force": self.in_force,
            "tuning": self.tuning,
            "routes": self.routes,
        }
        return json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n"


def load_state(state_dir: Path) -> AgentState:
    """The saved state, or an empty one when there is none yet.

    Raises:
        StateError: the file exists but is not a state file this version reads (ibqos
            will not guess SLs over a state it cannot read: move the file away to start
            afresh).
    """
    path = state_dir / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return AgentState()
    except OSError as err:
        raise StateError(f"{path}: cannot read: {err.strerror}") from err
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise StateError(f"{path}: not JSON (line {err.lineno})") from err
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise StateError(f"{path}: not an ibqos state file of version {VERSION}")
    try:
        return AgentState(
            job_sl={str(k): _sl(v) for k, v in doc["job_sl"].items()},
            job_cls={str(k): as_class(v) for k, v in doc["job_cls"].items()},
            history={str(k): as_class(v) for k, v in doc["history"].items()},
            # absent in files of before profiles were learned
            finished={str(k): _finished(str(k), v) for k, v in doc.get("finished", {}).items()},
            plan=doc.get("plan"),
            last_apply=doc.get("last_apply"),
            updated_s=float(doc.get("updated_s", 0.0)),
            mode=str(doc.get("mode", "enforce")),  # files of before modes existed: enforce
            in_force=_mapping(doc.get("in_force")),  # absent in files of ibqos <= 0.2.0
            tuning=_mapping(doc.get("tuning")),  # absent in files of ibqos <= 0.3.0
            routes=_mapping(doc.get("routes")),  # absent in files of before it was kept
        )
    except (KeyError, AttributeError, TypeError, ValueError) as err:
        raise StateError(f"{path}: damaged ({err})") from err


def save_state(state_dir: Path, state: AgentState) -> None:
    """Write the state atomically (the directory is created if missing)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(state_dir / STATE_FILE, state.to_json())
    except OSError as err:
        raise StateError(f"{state_dir / STATE_FILE}: cannot write: {err.strerror}") from err


def _finished(name: str, doc: Any) -> FinishedJob:
    from ibqos.classify.prior import FinishedJob  # numpy: not for ibqos status --help

    end = doc["end_s"]
    user = doc["user"]
    return FinishedJob(
        id=str(doc["id"]),
        name=name,
        user=None if user is None else str(user),
        nodes=int(doc["nodes"]),
        cls=as_class(doc["class"]),
        intensity=float(doc["intensity"]),
        end_s=None if end is None else float(end),
    )


def _mapping(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("not an object where one belongs")
    return value


def tuning_doc(status: TuningStatus) -> dict[str, Any]:
    """*status* as the state file keeps it (strict JSON: a score of a trial ended at the
    floor, infinite, is kept as null)."""

    def finite(scores: Mapping[str, float]) -> dict[str, float | None]:
        return {k: (v if math.isfinite(v) else None) for k, v in sorted(scores.items())}

    doc: dict[str, Any] = {
        "state": status.state,
        "wanted": status.wanted,
        "trial": status.trial,
        "rounds": status.rounds,
        "reloads": status.reloads,
        "reloads_last_hour": status.reloads_last_hour,
        "predicted": finite(status.predicted),
        "measured": finite(status.measured),
        "decision": status.decision,
        "refinements": status.refinements,
    }
    if status.prediction_error is not None:  # the jobs' phases fitted to the trials
        doc["prediction_error"] = finite(status.prediction_error)
    return doc


def _sl(value: object) -> int:
    if type(value) is not int or not 0 <= value <= 15:
        raise ValueError(f"SL {value!r} is not 0-15")
    return value
