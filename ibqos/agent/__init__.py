"""The agent: ``ibqos run``, the daemon beside OpenSM, and what it keeps between runs.

- :mod:`~ibqos.agent.daemon`: :class:`Agent`, the loop at a steady cadence, with signals;
  it is put together from :mod:`~ibqos.agent.parts` (the parts the config builds, the SL
  service), :mod:`~ibqos.agent.cycle` (the cycles), :mod:`~ibqos.agent.sinks` (apply,
  observe or dry run) and :mod:`~ibqos.agent.reload` (SIGHUP);
- :mod:`~ibqos.agent.pipeline`: what one decision cycle runs on (fabric, lanes, decider,
  route source, job source, collector), built the one way ``ibqos run`` and
  ``ibqos plan`` build it;
- :mod:`~ibqos.agent.state`: the state file; :mod:`~ibqos.agent.status`: ``ibqos status``;
- :mod:`~ibqos.agent.lock`: one agent per state directory;
- :mod:`~ibqos.agent.sdnotify`: systemd's READY, STATUS and watchdog;
- :mod:`~ibqos.agent.handoff`: a job's SL for its launch (``ibqos job-sl``), served by
  :mod:`~ibqos.agent.slserve` (one thread, one selector);
- :mod:`~ibqos.agent.lanes`: the lanes as the config says, with its ``auto`` values read;
- :mod:`~ibqos.agent.standby`: beside a standby OpenSM the cycles stand by, and take over
  once it is the master.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.agent.daemon import Agent, next_tick
    from ibqos.agent.handoff import Answer, SlBoard, SlServer, ask_sl, check_job_id
    from ibqos.agent.lanes import opensm_routing_engine, resolve_lanes
    from ibqos.agent.lock import AgentLock, holder
    from ibqos.agent.sdnotify import Notifier
    from ibqos.agent.state import AgentState, load_state, save_state
    from ibqos.agent.status import render_status
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".daemon": ("Agent", "next_tick"),
            ".handoff": ("Answer", "SlBoard", "SlServer", "ask_sl", "check_job_id"),
            ".lanes": ("opensm_routing_engine", "resolve_lanes"),
            ".lock": ("AgentLock", "holder"),
            ".sdnotify": ("Notifier",),
            ".state": ("AgentState", "load_state", "save_state"),
            ".status": ("render_status",),
        },
    )

__all__ = [
    "Agent",
    "AgentLock",
    "AgentState",
    "Answer",
    "Notifier",
    "SlBoard",
    "SlServer",
    "ask_sl",
    "check_job_id",
    "holder",
    "load_state",
    "next_tick",
    "opensm_routing_engine",
    "render_status",
    "resolve_lanes",
    "save_state",
]
