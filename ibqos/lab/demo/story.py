"""The demo's story: the lab and the dry run, then the agent round by round while jobs
start, end and turn heavy, and tuning tries its setups (:mod:`ibqos.lab.demo`).

What the demo says is here, in the order it says it; what it does and shows is
:class:`~ibqos.lab.demo.stage.Demo`'s.  :func:`main` runs the story and takes everything
down at the end, on error and on Ctrl-C.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from ibqos.errors import LabError
from ibqos.lab.demo.stage import EXAMPLE_JOBS, NAME, TRACE, XGFT, Demo, note, say

FLUID = """\
fluid contention: each job computes, then sends its iteration's bytes at up to its rate;
jobs share the links as the lanes read back from the switches say (OpenSM's defaults for
now: every job on SL 0, one lane). Iterations per second per job: {url}"""

LINK = "a 4x EDR link carries 12.5 GB/s each way; the model counts what the jobs send through it."

UPLINKS = """\
a leaf's two uplinks carry 25 GB/s: job 3001 alone fills 64 % of those of leaves 1 and 2."""

TRACE_NOTE = f"""\
{TRACE}: 8 ranks of a 2-D halo exchange; with 4 ranks per
node it is a 2-node job. Per placement on this fabric, its traffic per level and its class:"""

PROFILES_NOTE = """\
the agent gets profiles.dir = these: a new job named stencil on 2 nodes starts in the
profile's class (low) instead of the default for a job with no history (moderate)."""

CONFIG_NOTE = """\
config: the lab's ibqos.yaml plus collect.interval_s 5, classify.tau_s 10, lanes.min_hold_s 10,
min_interval_s 0 (defaults 10, 60, 60, 300: real fabrics want calm lanes; the demo wants to show changes),
tuning.settle_s 10, trial_sweeps 2, shortlist 2, margin 0.03, margin_sigmas 2, predicted_slack 10
(defaults 30, 3, 3, 0, 0, 0.05),
opensm.reload_budget 6 a minute (2)"""  # noqa: E501 (one printed line)

TABLES_NOTE = """\
SL2VL (qos_*_sl2vl: the VL of SL 0..15) and VLArb weights (qos_*_vlarb_low: VL:weight) go
into opensm.conf; the policy puts each job's ports in a port-group and its paths on its SL."""

ONE_LANE = """\
jobs whose bursts cross the uplinks 3001 fills are slowed: they queue behind its traffic
in the one lane (3001's own links are the busiest: it is slowed most)."""

AGENT = """\
every 5 s it sweeps all port counters and works out each job's traffic across the spines;
intensity = that traffic / the uplink capacity of the job's leaves, smoothed; class low
(< 10 %), moderate, or high (>= 40 %; +-20 % hysteresis). Each job gets an SL of its own
while SLs last; SLs are grouped onto the 8 VLs (light jobs share), the lightest lanes get
the most VLArb weight; ibqos rewrites opensm.conf and qos-policy.conf and signals OpenSM,
which programs every port's SL2VL and VLArb tables and serves each job's SL in PathRecords."""

STARTS = """\
it plans at once, before it has measured anything: every job gets an SL, in the class
expected of a job with no history (moderate). 9 job SLs and SL 0 (the default level of
unmanaged traffic) on 8 VLs: some must share. The first measurement comes 5 s later
(the dry run above measured first; the daemon plans first, so running jobs get SLs at once)."""

MEASURED = """\
a measured class replaces the planned one after it has held for 10 s: 3001 (all-to-all across
leaves 1 and 2) turns high, 3002 stays moderate, the rest turn low. Lanes are regrouped and
reweighted: the light jobs share lanes, the heavy lane gets the least weight.
Progress: the jobs whose bursts cross the uplinks 3001 fills (lammps 3002, wrf 3005) run at
full speed on their own lanes; 3001 loses a little: it catches up while they compute."""

JOB_STARTS = """\
a start is planned at once, between sweeps: the job gets a free SL, and the SA serves it on
the job's paths within a second or two, before its MPI ranks ask for them. Its expected
class comes from its profile (stencil-n2.yaml: low), not the default (moderate)."""

HEAVY = """\
it shares a lane with other light jobs. Its intensity now rises sweep by sweep (smoothed
over ~10 s): past 12 % it measures moderate, past 48 % high; a class must hold 10 s before
the lanes move, so a short burst does not move them."""

HIGH = """\
3003 is high: its SL leaves the shared lane for a lane of its own with the least weight.
The SL itself does not change (its ranks cached it); only the SL's lane and the weights do.
Progress: lammps (3002) shares leaf 3's uplinks with namd; while namd's lane still had a
light job's weight lammps slowed down; with namd on the least-weighted lane it recovers
(rates are averaged over 10 s: it may take until the next round to show)."""

ENDS = "its SL is freed and its port-group leaves the policy at once; the lanes are regrouped."

TUNING = """\
the favour-light law is where tuning starts, not where it must stay: once the mix (jobs and
classes) has held 10 s, the agent tries setups on the fabric, one at a time: the law, then
the next ones (other weight ratios, lanes merged; best predicted first when a prediction
ranks them, else in a fixed order). Each switch is one OpenSM reload; the sweep the reload
falls in is left out, the next 2 are the trial. A trial's score is the jobs' node-weighted
slowdown relative to their best under any setup tried (from each job's injected bytes/s)."""

TRIALS = """\
each trial stops early if a job drops below half its best (tuning.floor); a round spends at
most tuning.max_reloads_per_hour reloads (12) and starts a trial only with room for its revert."""

SETTLES = """\
it leaves the law only for a gain above tuning.margin (3 %) and two standard errors of
the trials' sweep scores (margin_sigmas 2); the decision line says the scores. It re-tunes when the mix changes or the kept setup's score drifts by 15 %.
Progress: the last column compares with the jobs' speed under the law, before the round."""  # noqa: E501 (one printed line)


def before_the_agent(demo: Demo) -> None:
    """The lab, its counters and ground truth, a job profile, and the agent's dry run."""
    say(
        f"lab up: XGFT {XGFT} (4 leaf switches x 8 hosts, 2 spines), 4x EDR, "
        f"jobs from {EXAMPLE_JOBS}"
    )
    demo.lab_up()
    note(FLUID.format(url=demo.lab_metrics))

    say("OpenSM, asked through the fabric (sminfo) and its log")
    demo.show_opensm()

    say("counters moving (PortXmitData, 64-bit, read with perfquery -x; bytes = 4 x words)")
    demo.show_counters()
    note(LINK)

    say(
        "ground truth kept by the traffic model: GB/s per job injected (level 0) and across "
        "the spines (level 1)"
    )
    demo.show_truth()
    note(UPLINKS)

    say(
        "every port at once: ibqos collect (native collector: PerfMgt Gets through libibumad, "
        "many in flight)"
    )
    demo.show_ports()

    say("a job profile, made offline: ibqos characterize on the example trace of a stencil code")
    note(TRACE_NOTE)
    demo.show_profiles()
    note(PROFILES_NOTE)
    demo.write_config()

    say(
        "dry run: what the agent would write into OpenSM's files (ibqos run --dry-run --once); "
        "nothing is written"
    )
    note(CONFIG_NOTE)
    demo.show_dry_run()
    note(TABLES_NOTE)


def play(demo: Demo) -> None:
    """The jobs' progress without ibqos, then the agent's rounds, then its stop."""
    say("before ibqos: how fast the jobs iterate with OpenSM's default QoS (every job on one lane)")
    demo.show_progress(save="before")
    note(ONE_LANE)

    say(f"the agent: ibqos run, attached to the lab; its log goes to {demo.agent_log}")
    note(AGENT)
    demo.start_agent()

    demo.round("the agent starts: 9 jobs running, 8 VLs", STARTS)
    demo.settle(9)
    demo.start_prometheus()
    demo.report()

    demo.round("nothing new: the measurements take over", MEASURED)
    demo.settle(5)
    demo.wait_plan(
        40,
        lambda jobs, _: (
            all(j["class"] == j["measured_class"] for j in jobs.values())
            and jobs["3001"]["class"] == "high"
        ),
    )
    demo.report()

    demo.round(
        "job 3010 (stencil, the profiled application, on cn0025 + cn0026) starts: 10 jobs now",
        JOB_STARTS,
    )
    job = ("--id", "3010", "--app", "stencil", "--user", "heidi", "--nodes", "cn[0025-0026]")
    traffic = ("--pattern", "ring", "--rate", "2.0e9", "--duty", "0.5", "--period", "0.1")
    demo.command_shown("lab", "job", "add", NAME, *job, *traffic)
    demo.show_path("3010", "cn0025", "cn0026")
    demo.settle()
    demo.report()

    demo.round(
        "job 3003 (namd) turns heavy: 0.2 -> 12 GB/s per node (a new phase; its entry in the "
        "job file changes)",
        HEAVY,
    )
    demo.edit_job("3003", rate_bytes_per_s=1.2e10, duty=0.9)
    demo.settle()
    demo.report()

    demo.round("nothing new: namd's class change comes through", HIGH)
    demo.settle(5)
    demo.wait_plan(45, lambda jobs, _: jobs["3003"]["class"] == "high")
    demo.report()

    demo.round("job 3004 (gromacs) ends", ENDS)
    demo.command_shown("lab", "job", "remove", NAME, "3004")
    demo.settle()
    demo.report(ended=["3004"])

    tune(demo)

    say("the agent stops (SIGTERM): it finishes its cycle and exits 0; OpenSM keeps the last plan")
    status = demo.stop_agent()
    demo.show_log()
    print(f"agent exit status: {status}")
    demo.stop_prometheus()


def tune(demo: Demo) -> None:
    """The last rounds: the mix holds still, and tuning tries its setups and keeps one."""
    demo.round("the mix holds still: tuning starts a round of trials", TUNING)
    demo.show_progress(save="tuning")  # the "before tuning" column
    demo.wait_plan(
        60,
        lambda _, tuning: tuning.get("state") == "trial" and tuning.get("trial") != "favour-light",
    )
    demo.report()

    demo.round("tuning: the trials go on", TRIALS)
    demo.wait_plan(
        60,
        lambda _, tuning: (
            tuning.get("state") == "settled"
            or (
                tuning.get("trial") not in (None, "favour-light")
                and len(tuning.get("measured") or {}) >= 2
            )
        ),
    )
    demo.report()

    demo.round("tuning settles: the agent keeps the setup of least measured score", SETTLES)
    demo.wait_plan(60, lambda _, tuning: tuning.get("state") == "settled")
    time.sleep(4)  # the lab reads back the kept setup; its progress window moves on
    demo.report()


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    """Run the demo; its exit status (130 on Ctrl-C, 143 on SIGTERM)."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # in order with the commands' output
    # in /tmp, whatever TMPDIR says: the lab's sockets live under it, and must stay short
    root = Path(tempfile.mkdtemp(prefix="ibqos-demo.", dir="/tmp"))
    os.environ["IBQOS_LAB_ROOT"] = str(root)  # for every ibqos command the demo runs
    demo = Demo(root, float(os.environ.get("IBQOS_DEMO_ROUND_S", "12")))
    signal.signal(signal.SIGTERM, _terminated)
    try:
        before_the_agent(demo)
        play(demo)
        say("lab down")
        demo.command_shown("lab", "down", NAME)
        print(f"demo time: {demo.elapsed()} s")
    except KeyboardInterrupt:
        return 130
    except LabError as err:
        print(f"demo: {err}", file=sys.stderr)
        return 1
    finally:
        demo.cleanup()
    return 0
