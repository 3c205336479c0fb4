"""The background process behind ``ibqos lab up``: owns one lab and ticks its traffic.

It holds ibsim's console pipe (which must stay open), starts OpenSM, serves the lab's
metrics (jobs' iterations, :mod:`ibqos.lab.progress`) on a loopback port it records in
state.json as ``metrics_url``, then every ``tick_s`` seconds re-reads the job file if it
changed and writes the new counters (with fluid contention, re-reading the QoS setup from the fabric
every ``readback_s``).  It tells ``lab up`` through an inherited pipe whether the fabric
came up, and only once traffic flows (:func:`flowing`): after the first tick (which, with
fluid contention, compiles the solver where numba has no cache yet), and once a running
job's bytes are in the counters, so that what reads the fabric right after ``lab up``
sees the jobs.  Between ticks it serves control requests (stop, start or restart
OpenSM, take links down and up; :mod:`ibqos.lab.control`), woken by SIGUSR1.  An OpenSM
that exits on its own is reaped and recorded, and the lab runs on; an ibsim that exits ends
the lab.  SIGTERM ends OpenSM and ibsim and exits.  Run as
``python -m ibqos.lab.supervisor LAB_DIR READY_FD TIMEOUT``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ibqos.errors import IbqosError, JobsError
from ibqos.fsio import atomic_write
from ibqos.lab import control, procs
from ibqos.lab.files import LabPaths, load_state
from ibqos.lab.lab import Lab
from ibqos.lab.progress import MetricsServer
from ibqos.lab.progress import serve as serve_metrics

log = logging.getLogger(__name__)


def serve(
    lab: Lab, ready_fd: int, timeout: float, stop: threading.Event, wake: threading.Event
) -> int:
    """Start *lab*, report readiness on *ready_fd*, tick until *stop* is set.

    *wake* is set (by a signal) when *stop* is, or when a control request waits.

    Returns:
        exit status: 0 after a requested stop, 1 if the lab failed.
    """
    try:
        lab.start(timeout)  # stops what it started if it fails
    except IbqosError as err:
        _report(ready_fd, f"error: {err}")
        return 1
    try:
        lab.last_truth = lab.truth()
        metrics = serve_metrics(lambda: lab.last_truth, lab.paths.name)
    except OSError as err:
        lab.stop("failed")
        _report(ready_fd, f"error: cannot serve the lab's metrics: {err}")
        return 1
    try:
        _record(lab.paths, "metrics_url", metrics.url)
        return _loop(lab, stop, wake, metrics, lambda message: _report(ready_fd, message))
    finally:
        metrics.close()


def flowing(lab: Lab, tick_s: float) -> bool:
    """Whether ``lab up`` may return: a running job has sent bytes, or none will soon.

    With no running job there is nothing to wait for.  A job may compute before it first
    sends (fluid contention: ``(1 - duty) x period_s``), so once the model has run for the
    longest running job's period (plus two ticks) without bytes, waiting longer would not
    help either (a job of zero rate, a tick that failed).
    """
    truth = lab.last_truth
    running = [j for j in truth.get("jobs", {}).values() if j.get("running")]
    if not running or any(j["level_bytes"][0] > 0 for j in running):
        return True
    periods = [load.job.period_s for load in lab.model.jobs.values()] if lab.model else []
    return float(truth.get("time_s", 0.0)) >= max(periods, default=0.0) + 2 * tick_s


def _record(paths: LabPaths, key: str, value: str) -> None:
    state = load_state(paths)
    state[key] = value
    atomic_write(paths.state, json.dumps(state, indent=1) + "\n")


def _loop(
    lab: Lab,
    stop: threading.Event,
    wake: threading.Event,
    metrics: MetricsServer,
    report: Callable[[str], None],
) -> int:
    """Tick every ``tick_s`` until *stop*; *report* "ok" once traffic flows (or the
    error that ended the lab before)."""
    tick_s = float(lab.spec.get("tick_s", 1.0))
    log.info(
        "lab %s up in %.1f s (%s contention); ticking every %.2f s; metrics on %s",
        lab.paths.name,
        lab.timings.get("up_s", 0.0),
        lab.contention,
        tick_s,
        metrics.url,
    )
    # the first tick one tick_s from now, so that it advances the model by a whole tick
    # (a tick of ~0 s would leave the counters at 0 while 'lab up' has returned)
    last = time.monotonic()
    next_at = last + tick_s
    waiting = True
    bad_jobs = ""
    while not stop.is_set():
        wake.wait(max(0.0, next_at - time.monotonic()))
        # cleared before looking, so a request that arrives meanwhile wakes the next wait
        wake.clear()
        if stop.is_set():
            break
        control.serve_pending(lab, stop.is_set)
        now = time.monotonic()
        if now < next_at:
            continue  # woken for a request only
        try:
            if lab.reload_jobs():
                log.info("job file changed: %d jobs", len(lab.model.jobs if lab.model else {}))
            bad_jobs = ""
        except JobsError as err:
            if str(err) != bad_jobs:  # say it once, keep the previous mix
                log.warning("job file rejected, keeping the previous jobs: %s", err)
                bad_jobs = str(err)
        try:
            lab.tick(now - last)
        except IbqosError as err:
            log.error("tick failed: %s", err)
        last = now
        if waiting and flowing(lab, tick_s):
            waiting = False
            report("ok")
        code = lab.check_opensm()
        if code is not None:
            # a fault to observe, not the lab's end: 'lab opensm start' brings it back
            log.error("OpenSM exited with status %d; the lab runs on without it", code)
        if lab.ibsim is None or lab.ibsim.proc is None or lab.ibsim.proc.poll() is not None:
            log.error("ibsim exited; stopping the lab")
            if waiting:
                report("error: ibsim exited before the first traffic")
            lab.stop("failed")
            return 1
        next_at += tick_s
        if next_at < now:  # skip missed slots instead of bursting to catch up
            next_at = now + tick_s
    lab.stop()
    log.info("lab %s stopped", lab.paths.name)
    return 0


def _report(fd: int, message: str) -> None:
    try:
        os.write(fd, (message.replace("\n", " ") + "\n").encode())
        os.close(fd)
    except OSError:
        pass  # 'lab up' gave up waiting; the log still has it


def main(argv: list[str]) -> int:
    lab_dir, ready_fd, timeout = Path(argv[0]), int(argv[1]), float(argv[2])
    # Detach: 'lab up' waits for this first process, so it leaves no running child
    # behind; the forked copy (no threads yet, so forking is safe) serves the lab.
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    stop, wake = threading.Event(), threading.Event()

    def on_stop(*_: object) -> None:
        stop.set()
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_stop)
    signal.signal(control.WAKE_SIGNAL, lambda *_: wake.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    paths = LabPaths(lab_dir.parent, lab_dir.name)
    state = load_state(paths)
    state.setdefault("procs", {})["supervisor"] = procs.ref_of(os.getpid()).to_dict()
    atomic_write(paths.state, json.dumps(state, indent=1) + "\n")
    try:
        lab = Lab(paths)
    except IbqosError as err:
        _report(ready_fd, f"error: {err}")
        return 1
    return serve(lab, ready_fd, timeout, stop, wake)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
