"""The contention simulator: a job mix on a fabric under QoS setups (``docs/simulate.md``).

The modules, a stage each::

    network.py: the fabric and its routes        workload.py: the jobs' flows (SimJob)
    qos.py: a QoS setup as the simulator sees it (Arbitration)
    fluid.py: the fluid model, event by event (FluidSim); its pieces:
        senders.py, allocator.py (maxmin.py), layout.py, inputs.py (headofline.py),
        buffers.py, drains.py, fluidstep.py
    packet.py: the packet model, packet by packet (simulate_packets)
    evaluate.py: a mix under a setup, alone and sharing (RunSettings, Outcome)
    policies.py: the setups compared          report.py: their tables
    estimate.py, predict.py: the jobs as the agent measured them, and the
        steady-state prediction of setups
    search.py: tuning's prediction of its candidates and the search beyond them
        (rank_pool), over setupspace.py's points and moves
    closedloop.py: ``--policy ibqos``, the agent's tuning closed over the fluid model
    command.py: ``ibqos simulate``            whatif.py: the agent's what-if

The names below are the simulator's public face.  The function ``evaluate`` is not among
them, as its module has the same name: use :meth:`RunSettings.evaluate`, or import it from
:mod:`ibqos.sim.evaluate`.  Modules inside the package import each other by module path,
never through this face.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.sim.command import simulate
    from ibqos.sim.evaluate import MODELS, JobOutcome, Outcome, RunSettings, alone
    from ibqos.sim.fluid import FluidSim, JobPhase, simulate_fluid
    from ibqos.sim.network import Network, dmodk_lfts, xgft_network
    from ibqos.sim.packet import PACKET_BUFFER, simulate_packets
    from ibqos.sim.policies import DEFAULT_LANES, POLICIES, build, one_vl
    from ibqos.sim.qos import Arbitration, from_tables
    from ibqos.sim.report import FORMATS, render
    from ibqos.sim.senders import GRANULARITIES, Granularity, auto_buffers
    from ibqos.sim.whatif import what_if
    from ibqos.sim.workload import JobRun, RunResult, SimJob, prepare
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".command": ("simulate",),
            ".evaluate": ("MODELS", "JobOutcome", "Outcome", "RunSettings", "alone"),
            ".fluid": ("FluidSim", "JobPhase", "simulate_fluid"),
            ".network": ("Network", "dmodk_lfts", "xgft_network"),
            ".packet": ("PACKET_BUFFER", "simulate_packets"),
            ".policies": ("DEFAULT_LANES", "POLICIES", "build", "one_vl"),
            ".qos": ("Arbitration", "from_tables"),
            ".report": ("FORMATS", "render"),
            ".senders": ("GRANULARITIES", "Granularity", "auto_buffers"),
            ".whatif": ("what_if",),
            ".workload": ("JobRun", "RunResult", "SimJob", "prepare"),
        },
    )

__all__ = [
    "DEFAULT_LANES",
    "FORMATS",
    "GRANULARITIES",
    "MODELS",
    "PACKET_BUFFER",
    "POLICIES",
    "Arbitration",
    "FluidSim",
    "Granularity",
    "JobOutcome",
    "JobPhase",
    "JobRun",
    "Network",
    "Outcome",
    "RunResult",
    "RunSettings",
    "SimJob",
    "alone",
    "auto_buffers",
    "build",
    "dmodk_lfts",
    "from_tables",
    "one_vl",
    "prepare",
    "render",
    "simulate",
    "simulate_fluid",
    "simulate_packets",
    "what_if",
    "xgft_network",
]
