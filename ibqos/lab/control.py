"""Requests to a running lab's supervisor: stop/start OpenSM, take links down and up.

The supervisor is the only process that may do these: OpenSM is its child (it alone can
reap it, and OpenSM dies with it through the parent-death signal), and it holds ibsim's
console.  So a client (``ibqos lab opensm``, ``ibqos lab link``) asks it through files in
``<lab>/control/``:

1. the client writes ``<id>.request`` (JSON ``{"op": ..., "args": {...}}``) atomically,
   then sends SIGUSR1 to the supervisor (by pid, checked against its start time);
2. the supervisor's loop wakes (or finds it at its next tick anyway), removes the request,
   does it between two ticks, and writes ``<id>.reply`` (JSON ``{"ok": true, "result":
   ...}`` or ``{"ok": false, "error": "..."}``) atomically;
3. the client polls for the reply, reads it and removes it.

Requests are served one at a time in the order of their ids (time-stamped), so they
never interleave with each other or with a tick's writes to ibsim.  A client that gives
up removes its request if it was not taken yet.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ibqos.errors import IbqosError, LabError
from ibqos.fsio import atomic_write
from ibqos.lab import procs
from ibqos.lab.files import LabPaths, load_state
from ibqos.lab.lab import Lab

log = logging.getLogger(__name__)

#: the signal that wakes the supervisor's loop for a request
WAKE_SIGNAL = signal.SIGUSR1
#: seconds between two looks for the reply
POLL_S = 0.05
#: seconds the supervisor may take beyond the request's own timeout (a tick in progress)
MARGIN_S = 30.0
OPENSM_ACTIONS = ("stop", "start", "restart")
LINK_ACTIONS = ("down", "up")


_TARGET_RE = re.compile(r"([^\[\]\s]+)(?:\[(\d+)\])?")


def parse_target(text: str) -> tuple[str, int | None]:
    """``cn0001`` or ``cn0001[1]`` into (node, port); port None means every link of it.

    Raises:
        LabError: not of that form.
    """
    m = _TARGET_RE.fullmatch(text.strip())
    if m is None:
        raise LabError(f"link target {text!r}: expected NODE or NODE[PORT], e.g. cn0001[1]")
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def control_dir(paths: LabPaths) -> Path:
    return paths.dir / "control"


# -- client side ----------------------------------------------------------------------
def ask(paths: LabPaths, op: str, args: dict[str, Any], timeout: float) -> Any:
    """Send one request to the lab's supervisor and wait for its answer.

    Args:
        op: ``opensm`` or ``link``.
        args: the operation's arguments (plain JSON data).
        timeout: seconds the operation may take; the wait allows :data:`MARGIN_S` more.

    Returns:
        the operation's result.

    Raises:
        LabError: the lab has no running supervisor, it did not answer in time, or the
            operation failed (its message).
    """
    name = paths.name
    ref = _supervisor(paths)
    folder = control_dir(paths)
    rid = f"{time.time_ns():020d}-{os.getpid()}"
    request, reply = folder / f"{rid}.request", folder / f"{rid}.reply"
    try:
        folder.mkdir(exist_ok=True)
        atomic_write(request, json.dumps({"op": op, "args": args}) + "\n")
    except OSError as err:  # e.g. the lab was taken down meanwhile
        raise LabError(f"lab {name}: cannot write {request}: {err.strerror}") from err
    try:
        os.kill(ref.pid, WAKE_SIGNAL)
    except ProcessLookupError:
        pass  # it has just gone: the loop below says so
    deadline = time.monotonic() + timeout + MARGIN_S
    while not reply.exists():
        if not procs.alive(ref):
            request.unlink(missing_ok=True)
            raise LabError(f"lab {name}: its supervisor exited before answering {op}")
        if time.monotonic() > deadline:
            request.unlink(missing_ok=True)
            raise LabError(
                f"lab {name}: no answer from its supervisor to {op} within "
                f"{timeout + MARGIN_S:.0f} s (see {paths.supervisor_log})"
            )
        time.sleep(POLL_S)
    try:
        answer = json.loads(reply.read_text())
    except (OSError, ValueError) as err:
        raise LabError(f"lab {name}: unreadable answer {reply}: {err}") from err
    finally:
        reply.unlink(missing_ok=True)
    if not answer.get("ok"):
        raise LabError(str(answer.get("error", f"lab {name}: {op} failed")))
    return answer.get("result")


def _supervisor(paths: LabPaths) -> procs.ProcRef:
    if not paths.spec.exists():
        raise LabError(f"no lab {paths.name} under {paths.root}")
    entry = load_state(paths).get("procs", {}).get("supervisor")
    ref = procs.ProcRef.from_dict(entry) if entry else None
    if ref is None or not procs.alive(ref):
        raise LabError(
            f"lab {paths.name} has no running supervisor (is it up? a lab run in-process "
            "is driven through its Lab object)"
        )
    return ref


# -- supervisor side ------------------------------------------------------------------
def pending(paths: LabPaths) -> Iterator[tuple[str, Any]]:
    """Requests waiting, oldest first, each taken (removed) as it is yielded.

    Yields:
        (request id, the parsed request, or None if it is not valid JSON).
    """
    folder = control_dir(paths)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.request")):
        try:
            text = path.read_text()
            path.unlink()
        except FileNotFoundError:
            continue  # its client gave up
        try:
            yield path.stem, json.loads(text)
        except ValueError:
            yield path.stem, None


def answer(paths: LabPaths, rid: str, result: Any = None, error: str | None = None) -> None:
    reply = {"ok": False, "error": error} if error is not None else {"ok": True, "result": result}
    atomic_write(control_dir(paths) / f"{rid}.reply", json.dumps(reply) + "\n")


def serve_pending(lab: Lab, abort: Callable[[], bool]) -> int:
    """Do every waiting request on *lab* and answer it.

    Args:
        abort: True once the lab is being taken down (an OpenSM start then gives up).

    Returns:
        how many requests were served.
    """
    served = 0
    for rid, request in pending(lab.paths):
        served += 1
        try:
            result = execute(lab, request, abort)
        except (IbqosError, OSError) as err:
            log.warning("request %s failed: %s", rid, err)
            answer(lab.paths, rid, error=str(err))
        except (KeyError, TypeError, ValueError) as err:
            message = f"lab {lab.paths.name}: malformed control request {request!r:.80}: {err}"
            log.warning("request %s: %s", rid, message)
            answer(lab.paths, rid, error=message)
        else:
            answer(lab.paths, rid, result=result)
    return served


def execute(lab: Lab, request: Any, abort: Callable[[], bool]) -> Any:
    """Do one request.

    Raises:
        LabError: a malformed request, or the operation failed.
    """
    if not isinstance(request, dict) or not isinstance(request.get("args"), dict):
        raise LabError(f"lab {lab.paths.name}: malformed control request {request!r:.80}")
    op, args = request.get("op"), request["args"]
    if op == "opensm":
        action = args.get("action")
        timeout = float(args.get("timeout", 60.0))
        if action == "stop":
            lab.stop_opensm()
        elif action == "start":
            lab.start_opensm(timeout, abort)
        elif action == "restart":
            lab.restart_opensm(timeout, abort)
        else:
            raise LabError(f"opensm action {action!r}: expected one of {OPENSM_ACTIONS}")
        return lab.opensm_info()
    if op == "link":
        targets = [(str(t[0]), None if t[1] is None else int(t[1])) for t in args["targets"]]
        return lab.links(str(args.get("action")), targets)
    raise LabError(f"lab {lab.paths.name}: unknown control request {op!r}")
