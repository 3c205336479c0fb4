"""ibsim, the simulated management plane, driven through its console on a pipe.

ibsim prints ``sim> `` before reading each console line and answers every command in
between (docs/design.md §8.1, §8.4), so a batch of N commands is done when N more prompts have
arrived; a reply that starts with ``#`` is an error.  The console must stay open: at EOF
ibsim spins at 100 % CPU.
"""

from __future__ import annotations

import glob
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ibqos.errors import LabError
from ibqos.lab import procs

if TYPE_CHECKING:
    from ibqos.fabric.topology import Node

PROMPT = b"sim> "
MAX_LINE = 127  # the console reads at most 127 characters a line (sim_run_console)
UMAD2SIM_GLOB = "/usr/lib/*/umad2sim/libumad2sim.so"
#: console command per link action: Unlink keeps the link to restore, ReLink restores it
LINK_COMMANDS = {"down": "Unlink", "up": "ReLink"}


def link_line(action: str, node_id: str, port: int | None) -> str:
    """Console line taking *node_id*'s link at *port* (every link when None) down or up.

    *node_id* is the net-file id; ports count from 1 on CAs and switches alike.
    """
    return f'{LINK_COMMANDS[action]} "{node_id}"' + ("" if port is None else f"[{port}]")


def umad2sim_path() -> str:
    """Path of libumad2sim.so ($IBQOS_UMAD2SIM, else the Debian multiarch location)."""
    explicit = os.environ.get("IBQOS_UMAD2SIM")
    if explicit:
        return explicit
    hits = sorted(glob.glob(UMAD2SIM_GLOB))
    if not hits:
        raise LabError(f"libumad2sim.so not found ({UMAD2SIM_GLOB}); install ibsim-utils")
    return hits[0]


def client_env(base: Mapping[str, str], sockname: str, host: str) -> dict[str, str]:
    """Environment for a umad client (OpenSM, diags, ibqos) attached to node *host*."""
    env = dict(base)
    preload = [umad2sim_path()]
    env["LD_PRELOAD"] = " ".join(preload)
    env["IBSIM_SOCKNAME"] = sockname
    env["SIM_HOST"] = host
    return env


class IbSim:
    """One ibsim process with its console held on a pipe.

    Args:
        netfile: topology in ibnetdiscover format.
        sockname: IBSIM_SOCKNAME, unique per lab (abstract Unix socket names are global).
        workdir: working directory.
        log: file for ibsim's stderr.
        limits: (nodes, switches, ports) for -N/-S/-P.
    """

    def __init__(
        self,
        netfile: Path,
        sockname: str,
        workdir: Path,
        log: Path,
        limits: tuple[int, int, int],
    ) -> None:
        self.netfile = netfile
        self.sockname = sockname
        self.workdir = workdir
        self.log = log
        self.limits = limits
        self.proc: subprocess.Popen[bytes] | None = None
        self._cond = threading.Condition()
        self._prompts = 0
        self._errors: list[str] = []
        self._partial = b""
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start ibsim and wait for its first prompt."""
        nodes, switches, ports = self.limits
        argv = ["ibsim", "-s", "-N", str(nodes), "-S", str(switches), "-P", str(ports)]
        env = dict(os.environ, IBSIM_SOCKNAME=self.sockname)
        env.pop("LD_PRELOAD", None)
        with self.log.open("ab") as err:
            self.proc = procs.spawn(
                [*argv, str(self.netfile)],
                env=env,
                cwd=self.workdir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self._reader = threading.Thread(target=self._read, name="ibsim-console", daemon=True)
        self._reader.start()
        self._wait_prompts(1, timeout, "start")

    def command(self, lines: Sequence[str], timeout: float = 120.0) -> list[str]:
        """Send console commands and wait until ibsim has answered all of them.

        Returns:
            the error replies (lines ibsim starts with '#'), in order.
        """
        if self.proc is None or self.proc.stdin is None:
            raise LabError("ibsim is not running")
        for line in lines:
            if len(line) > MAX_LINE or "\n" in line:
                raise LabError(f"ibsim console line too long or split: {line[:60]!r}...")
        with self._cond:
            target = self._prompts + len(lines)
            first_error = len(self._errors)
        data = "".join(f"{line}\n" for line in lines).encode()
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError as err:
            raise LabError(f"ibsim exited: {procs.tail(self.log)}") from err
        self._wait_prompts(target, timeout, f"{len(lines)} commands")
        with self._cond:
            return self._errors[first_error:]

    def stop(self) -> None:
        """End ibsim (SIGTERM first: closing its console first would make it spin)."""
        if self.proc is None:
            return
        procs.stop_child(self.proc)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self._reader is not None:
            self._reader.join(5.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            with self._cond:
                if not chunk:
                    self._prompts = -1  # EOF: ibsim has gone
                    self._cond.notify_all()
                    return
                parts = (self._partial + chunk).split(PROMPT)
                self._partial = parts.pop()
                self._prompts += len(parts)
                for reply in parts[1:] if self._prompts == len(parts) else parts:
                    if reply.startswith(b"#"):
                        self._errors.append(reply.decode(errors="replace").strip())
                self._cond.notify_all()

    def _wait_prompts(self, target: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._prompts < target:
                if self._prompts < 0:
                    raise LabError(f"ibsim exited during {what}: {procs.tail(self.log, 4)}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LabError(f"ibsim did not answer {what} within {timeout:.0f} s")
                self._cond.wait(left)


def set_links(
    sim: IbSim,
    action: str,
    targets: Sequence[tuple[Node, int | None]],
    names: Sequence[str],
    lab: str,
) -> list[str]:
    """Take links *action* ("down" or "up") in ibsim, one at a time, in order; what was
    done, e.g. ``cn0001 port 1 down``.

    Args:
        sim: the lab's ibsim.
        action: "down" or "up".
        targets: (node, port) per link; port None: every link of the node.
        names: how the caller named each node (for the messages).
        lab: the lab's name (for the messages).

    Raises:
        LabError: a bad port (nothing is sent), or ibsim refused one (those before it were
            done, those after it not tried).
    """
    lines = []
    for (node, port), name in zip(targets, names, strict=True):
        if port is not None and not 1 <= port <= node.nports:
            raise LabError(f"lab {lab}: {name} has ports 1-{node.nports}")
        what = f"{name}{'' if port is None else f' port {port}'} {action}"
        lines.append((what, link_line(action, node.id, port)))
    done: list[str] = []
    for what, line in lines:  # one at a time: a refusal then names its target
        errors = sim.command([line])
        if errors:
            raise LabError(
                f"lab {lab}: ibsim refused {what} ({line}): {errors[0].lstrip('# ')}"
                + (f"; done: {', '.join(done)}" if done else "")
            )
        done.append(what)
    return done
