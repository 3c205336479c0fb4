"""Labs run by a supervisor process: bring one up, look at it, edit its jobs, take it down.

These are what the ``ibqos lab`` commands call; a test that wants a lab in its own process
uses :class:`~ibqos.lab.lab.Lab` directly.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from ibqos.errors import LabError
from ibqos.fabric.topology import Topology
from ibqos.fsio import atomic_write
from ibqos.jobs import jobfile as jobsmod
from ibqos.jobs.model import Job
from ibqos.lab import control, procs
from ibqos.lab.files import LabPaths, check_name, hostnames, load_state
from ibqos.lab.lab import READBACK_S, Lab
from ibqos.lab.progress import WINDOW_S

#: seconds ibsim may take to acknowledge a batch of link changes
LINK_TIMEOUT_S = 30.0


def up(
    name: str,
    topo: Topology,
    *,
    root: Path,
    jobs: Path | None = None,
    sm_host: str | None = None,
    opensm_options: Mapping[str, str] | None = None,
    tick_s: float = 1.0,
    timeout: float = 120.0,
    contention: str = "crude",
    readback_s: float = READBACK_S,
    progress_window_s: float = WINDOW_S,
) -> Lab:
    """Create a lab and start its supervisor; return once the subnet is up.

    *contention*, *readback_s* and *progress_window_s* are :meth:`Lab.create`'s.

    Raises:
        LabError: it did not come up; the lab is taken down again and the message says why.
    """
    lab = Lab.create(
        name,
        topo,
        root=root,
        jobs=jobs,
        sm_host=sm_host,
        opensm_options=opensm_options,
        tick_s=tick_s,
        contention=contention,
        readback_s=readback_s,
        progress_window_s=progress_window_s,
    )
    paths = lab.paths
    read_fd, write_fd = os.pipe()
    try:
        with paths.supervisor_log.open("ab") as log:
            subprocess.run(  # returns at once: the supervisor forks and detaches
                [
                    sys.executable,
                    "-m",
                    "ibqos.lab.supervisor",
                    str(paths.dir),
                    str(write_fd),
                    str(timeout),
                ],
                pass_fds=(write_fd,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=paths.dir,
                check=True,
                timeout=60,
            )
    except (OSError, subprocess.SubprocessError) as err:
        os.close(read_fd)
        down(name, root=root)
        raise LabError(f"cannot start the lab supervisor: {err}") from err
    finally:
        os.close(write_fd)
    answer = _read_answer(read_fd, timeout + 30.0)
    if answer != "ok":
        down(name, root=root)
        reason = answer.removeprefix("error: ") or "the supervisor exited without a word"
        raise LabError(f"lab {name} did not come up: {reason}")
    return lab


def _read_answer(fd: int, timeout: float) -> str:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode(errors="replace").strip()
    return text if chunks else "error: no answer from the lab supervisor in time"


def down(name: str, *, root: Path) -> list[str]:
    """End every process of the lab (by recorded pid + start time) and remove its directory.

    Returns:
        descriptions of the processes that were ended.
    """
    paths = LabPaths(root, check_name(name))
    if not paths.dir.exists():
        raise LabError(f"no lab {name} under {root}")
    state = load_state(paths)
    ended: list[str] = []
    refs = {k: procs.ProcRef.from_dict(v) for k, v in state.get("procs", {}).items()}
    # The supervisor first: it stops OpenSM and ibsim in order, then the rest if left.
    for key in sorted(refs, key=lambda k: k != "supervisor"):
        if procs.alive(refs[key]):
            procs.end(refs[key], timeout=10.0)
            ended.append(f"{key} (pid {refs[key].pid})")
    shutil.rmtree(paths.dir)
    return ended


def status(name: str, *, root: Path) -> dict[str, Any]:
    """What a lab is and how it is doing, as plain data.

    ``opensm`` says whether OpenSM runs, its pid, and what last happened to it (stopped,
    exited with a status).  ``progress`` holds each running job's iterations and
    iterations per second (over ``progress_window_s``), ``qos`` (fluid contention) the
    setup last read back from the fabric, ``metrics_url`` where the supervisor serves the
    lab's metrics (None when the lab is down or runs in-process).
    """
    paths = LabPaths(root, check_name(name))
    if not paths.spec.exists():
        raise LabError(f"no lab {name} under {root}")
    spec = json.loads(paths.spec.read_text())
    state = load_state(paths)
    processes = {
        k: {"pid": v["pid"], "alive": procs.alive(procs.ProcRef.from_dict(v))}
        for k, v in state.get("procs", {}).items()
    }
    truth: dict[str, Any] = {}
    if paths.truth.exists():
        truth = json.loads(paths.truth.read_text())
    # OpenSM may be down on purpose (or crashed) while the lab itself runs on
    running = bool(processes) and all(
        p["alive"] for k, p in processes.items() if k.partition(":")[0] != "opensm"
    )
    osm_proc = processes.get("opensm", {"pid": None, "alive": False})
    opensm = {
        "running": running and osm_proc["alive"],
        "pid": osm_proc["pid"] if osm_proc["alive"] else None,
        "note": state.get("opensm", {}).get("note", ""),
    }
    osm = paths.opensm
    jobs = truth.get("jobs", {})
    return {
        "name": name,
        "status": state.get("status", "unknown") if running else "down",
        "dir": str(paths.dir),
        "sockname": spec["sockname"],
        "sm_node": spec["sm_node"],
        "tick_s": spec["tick_s"],
        "contention": spec.get("contention", "crude"),
        "metrics_url": state.get("metrics_url") if running else None,
        "processes": processes,
        "opensm": opensm,
        "paths": {
            "config": str(paths.config),
            "jobs": str(paths.jobs),
            "truth": str(paths.truth),
            "net": str(paths.net),
            "ibnetdiscover": str(paths.discovered),
            "opensm_conf": str(osm.conf),
            "qos_policy": str(osm.policy),
            "opensm_log": str(osm.log),
            "opensm_pid": str(osm.pid),
            "lfts_dump": str(osm.lfts_dump),
            "supervisor_log": str(paths.supervisor_log),
            "workdir": str(paths.run),
        },
        "ticks": truth.get("ticks", 0),
        "model_time_s": truth.get("time_s", 0.0),
        "lines_last_tick": truth.get("lines_last_tick", 0),
        "jobs": sorted(j for j, v in jobs.items() if v.get("running")),
        "progress_window_s": truth.get("progress_window_s", WINDOW_S),
        "progress": {
            jid: {
                key: v[key]
                for key in ("iterations", "iterations_per_second", "sl", "vl")
                if key in v
            }
            for jid, v in sorted(jobs.items())
            if v.get("running")
        },
        "qos": truth.get("qos"),
    }


def list_labs(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "lab.json").exists())


@contextmanager
def _jobs_locked(paths: LabPaths) -> Iterator[None]:
    with (paths.dir / ".jobs.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def edit_jobs(
    name: str, *, root: Path, add: tuple[Job, ...] = (), remove: tuple[str, ...] = ()
) -> tuple[Job, ...]:
    """Add and remove jobs in a lab's job file; the supervisor picks it up at its next tick.

    Raises:
        JobsError: a new job is invalid or names unknown hosts.
        LabError: an id to remove is not in the file, or an id to add is taken.
    """
    lab = Lab(LabPaths(root, check_name(name)))
    with _jobs_locked(lab.paths):
        current = jobsmod.load_jobs(lab.paths.jobs, traffic=True)
        ids = {j.id for j in current}
        missing = [i for i in remove if i not in ids]
        if missing:
            raise LabError(f"lab {name}: no job {missing[0]} in {lab.paths.jobs}")
        taken = [j.id for j in add if j.id in ids and j.id not in remove]
        if taken:
            raise LabError(f"lab {name}: job {taken[0]} already exists in {lab.paths.jobs}")
        kept = tuple(j for j in current if j.id not in remove)
        merged = kept + add
        text = jobsmod.dump_jobs(merged)
        # duplicate ids are caught here
        checked = jobsmod.parse_jobs(yaml.safe_load(text), "new jobs", traffic=True)
        jobsmod.check_hosts(add, hostnames(lab.topo), "new jobs")
        atomic_write(lab.paths.jobs, text)
        return checked


def opensm(name: str, action: str, *, root: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Stop, start or restart a supervised lab's OpenSM (through its supervisor).

    ``start`` and ``restart`` return once OpenSM's log says SUBNET UP again.

    Returns:
        :meth:`Lab.opensm_info` afterwards: running, pid, note.

    Raises:
        LabError: no such lab or no supervisor, OpenSM already in that state, or it did
            not come up within *timeout* seconds.
    """
    if action not in control.OPENSM_ACTIONS:
        raise LabError(f"opensm action {action!r}: expected one of {control.OPENSM_ACTIONS}")
    paths = LabPaths(root, check_name(name))
    info: dict[str, Any] = control.ask(
        paths, "opensm", {"action": action, "timeout": timeout}, timeout
    )
    return info


def link(name: str, action: str, targets: list[str], *, root: Path) -> list[str]:
    """Take links of a supervised lab down or up (``NODE`` or ``NODE[PORT]`` each).

    Returns once ibsim has acknowledged; OpenSM notices through traps or its next sweep.

    Returns:
        one line per target saying what was done.

    Raises:
        LabError: a malformed target, unknown node or port, or ibsim refused.
    """
    if action not in control.LINK_ACTIONS:
        raise LabError(f"link action {action!r}: expected down or up")
    parsed = [control.parse_target(t) for t in targets]
    paths = LabPaths(root, check_name(name))
    done: list[str] = control.ask(
        paths, "link", {"action": action, "targets": parsed}, LINK_TIMEOUT_S
    )
    return done
