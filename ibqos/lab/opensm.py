"""The lab's OpenSM: its configuration, and starting it under umad2sim until the subnet is up."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibqos.errors import LabError
from ibqos.fsio import atomic_write
from ibqos.lab import procs

MASTER_LINE = "Entering MASTER state"
SUBNET_UP_LINE = "SUBNET UP"
#: OpenSM's state lines (``osm_report_sm_state``), group 1 the state, and its sweeps' end
_STATE_OR_SWEEP = re.compile(r"Entering (NOTACTIVE|DISCOVERING|STANDBY|MASTER) state|SUBNET UP")
#: opensm.conf options of an OpenSM that may stand by: it polls the master every second
#: and takes over after 2 missed polls (about 3-6 s; OpenSM's defaults, 10 s and 4, make
#: a failover take about a minute)
FAST_FAILOVER: dict[str, str] = {"sminfo_polling_timeout": "1000", "polling_retry_number": "2"}
#: OpenSM options every lab sets; ``opensm_options`` may override them.
DEFAULT_OPTIONS: dict[str, str] = {
    "routing_engine": "ftree",
    "qos": "TRUE",
    "sweep_interval": "10",
    "force_log_flush": "TRUE",
    "daemon": "FALSE",
    "console": "off",
    "log_flags": "0x03",
}

#: A policy OpenSM accepts: the only mandatory part is a DEFAULT qos-level (docs/design.md §6.1).
MINIMAL_POLICY = """\
# qos-policy.conf of an ibqos lab; the agent rewrites it.
qos-levels
  qos-level
    name: DEFAULT
    sl: 0
  end-qos-level
end-qos-levels
"""


@dataclass(frozen=True)
class OpenSMFiles:
    """Where one OpenSM instance keeps its files (all inside the lab directory)."""

    dir: Path

    @property
    def conf(self) -> Path:
        return self.dir / "opensm.conf"

    @property
    def policy(self) -> Path:
        return self.dir / "qos-policy.conf"

    @property
    def log(self) -> Path:
        return self.dir / "opensm.log"

    @property
    def pid(self) -> Path:
        return self.dir / "opensm.pid"

    @property
    def stdout(self) -> Path:
        return self.dir / "opensm.stdout"

    @property
    def lfts_dump(self) -> Path:
        return self.dir / "opensm-lfts.dump"

    @property
    def per_module_logging(self) -> Path:
        return self.dir / "per-module-logging.conf"

    @property
    def cache(self) -> Path:
        return self.dir / "cache"


def render_conf(files: OpenSMFiles, options: Mapping[str, str], header: str) -> str:
    """opensm.conf text: lab defaults, the lab's paths, then *options* over them.

    Every path OpenSM would otherwise take from /etc or /var points into the lab, so
    labs never touch the host's OpenSM and several run side by side.
    """
    values = dict(DEFAULT_OPTIONS)
    values.update(
        qos_policy_file=str(files.policy),
        log_file=str(files.log),
        dump_files_dir=f"{files.dir}/",
        partition_config_file=str(files.dir / "partitions.conf"),
        per_module_logging_file=str(files.per_module_logging),
        prefix_routes_file=str(files.dir / "prefix-routes.conf"),
        torus_config=str(files.dir / "torus-2QoS.conf"),
    )
    values.update(options)
    lines = [f"# {header}", "# key<space>value, one per line (opensm.conf syntax)"]
    lines += [f"{key} {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


#: The ROUTING flag (0x40) for the dump module only: OpenSM then writes opensm-lfts.dump
#: after each heavy sweep without flooding its log with routing details.
PER_MODULE_LOGGING = """\
# per-module log flags of an ibqos lab: ERROR|INFO|ROUTING for osm_dump.c only
osm_dump.c 0x43
"""


class OpenSM:
    """OpenSM started against a lab's ibsim, attached to the SM host's HCA."""

    def __init__(self, files: OpenSMFiles, env: Mapping[str, str], workdir: Path) -> None:
        self.files = files
        self.env = dict(env, OSM_CACHE_DIR=str(files.cache), OSM_TMP_DIR=str(files.cache))
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        #: (inode, size) of the log when OpenSM was last started
        self._log_from = (0, 0)
        #: what last happened to it, for 'lab status'
        self.note = "not started"

    @property
    def running(self) -> bool:
        """True while the OpenSM this object started has not exited (reaps it if it has)."""
        return self.proc is not None and self.proc.poll() is None

    def info(self) -> dict[str, Any]:
        """``running``, ``pid`` (None when not running) and ``note``."""
        running = self.running
        pid = self.proc.pid if running and self.proc is not None else None
        return {"running": running, "pid": pid, "note": self.note}

    def reap(self) -> int | None:
        """Notice an OpenSM that exited on its own (killed, crashed): reap it, drop its pid
        file, note it.

        Returns:
            its exit status if it was found gone just now, else None.
        """
        if self.proc is None or not self.note.startswith("up"):
            return None
        code = self.proc.poll()
        if code is not None:
            self.files.pid.unlink(missing_ok=True)
            self._clean(self.proc.pid)
            self.note = f"exited on its own, status {code}"
        return code

    def _clean(self, pid: int) -> None:
        """Remove the fake sysfs umad2sim made for *pid* (it does so itself only on a
        clean exit, so a killed OpenSM leaves it in the work directory)."""
        shutil.rmtree(self.workdir / f"sys-{pid}", ignore_errors=True)

    def start(self, timeout: float, abort: Callable[[], bool] | None = None) -> float:
        """Start OpenSM and wait until it is MASTER and the subnet is up (routed).

        Returns:
            seconds it took.

        Raises:
            LabError: OpenSM exited or did not get there within *timeout* seconds; the
                message carries the last lines of its log.
        """
        t0 = time.monotonic()
        self.spawn()
        self.wait_up(timeout, abort)
        return time.monotonic() - t0

    def spawn(self) -> int:
        """Start OpenSM (same files, pid file, log and environment every time); its pid.

        OpenSM appends to its log (``accum_log_file`` defaults to TRUE), so where the log
        ends now is remembered: :meth:`wait_up` looks for this start's lines only.
        """
        if self.proc is not None and self.running:
            raise LabError(f"OpenSM already runs (pid {self.proc.pid})")
        self.files.cache.mkdir(parents=True, exist_ok=True)
        self._log_from = self._log_end()
        with self.files.stdout.open("ab") as out:
            self.proc = procs.spawn(
                ["opensm", "-F", str(self.files.conf)], env=self.env, cwd=self.workdir, stdout=out
            )
        atomic_write(self.files.pid, f"{self.proc.pid}\n")
        self.note = "starting"
        return self.proc.pid

    def wait_up(self, timeout: float, abort: Callable[[], bool] | None = None) -> None:
        """Wait until the OpenSM last spawned logs MASTER and SUBNET UP.

        Args:
            timeout: seconds.
            abort: polled every 0.1 s; True gives up (the lab is being taken down).

        Raises:
            LabError: OpenSM exited, did not get there in time, or *abort* said so.
        """

        def up() -> str | None:
            text = self._log_text()
            return "up" if MASTER_LINE in text and SUBNET_UP_LINE in text else None

        self.note = self._wait(
            up,
            timeout,
            abort,
            exited=" before the subnet was up",
            late=lambda: f"OpenSM did not bring the subnet up within {timeout:.0f} s",
        )

    def role(self) -> str | None:
        """What the OpenSM last spawned is, from its log since: ``master`` once it entered
        MASTER state and a heavy sweep ended after that (``sweeping`` before), ``standby``,
        ``discovering``, ``not active``; None: nothing logged."""
        state, swept = None, False
        for m in _STATE_OR_SWEEP.finditer(self._log_text()):
            if m.group(1) is None:
                swept = True
            else:
                state, swept = m.group(1), False
        if state is None:
            return None
        if state == "MASTER":
            return "master" if swept else "sweeping"
        return "not active" if state == "NOTACTIVE" else state.lower()

    def wait_role(
        self,
        roles: tuple[str, ...] = ("master", "standby"),
        timeout: float = 60.0,
        abort: Callable[[], bool] | None = None,
    ) -> str:
        """Wait until the OpenSM last spawned is in one of *roles* (:meth:`role`); the role.

        Raises:
            LabError: it exited, did not get there within *timeout* seconds, or *abort*
                said so.
        """

        def arrived() -> str | None:
            role = self.role()
            return role if role in roles else None

        role = self._wait(
            arrived,
            timeout,
            abort,
            exited="",
            late=lambda: (
                f"OpenSM was not {' or '.join(roles)} within {timeout:.0f} s"
                f" (it is {self.role() or 'silent'})"
            ),
        )
        self.note = "up" if role == "master" else f"up, {role}"
        return role

    def _wait(
        self,
        reached: Callable[[], str | None],
        timeout: float,
        abort: Callable[[], bool] | None,
        *,
        exited: str,
        late: Callable[[], str],
    ) -> str:
        """Poll every 0.1 s until *reached* gives a value, and return it.

        Args:
            reached: what is awaited (None: not yet).
            timeout: seconds.
            abort: True gives up (the lab is being taken down).
            exited: what the message says after OpenSM's exit status when it exited.
            late: the message when *timeout* passed.

        Raises:
            LabError: OpenSM exited, did not get there in time, or *abort* said so; the
                message ends with its last log lines.
        """
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            got = reached()
            if got is not None:
                return got
            code = self.proc.poll()
            if code is not None:
                raise LabError(f"OpenSM exited with status {code}{exited}: {self.last_lines()}")
            if time.monotonic() > deadline:
                raise LabError(f"{late()}: {self.last_lines()}")
            if abort is not None and abort():
                raise LabError("OpenSM start given up: the lab is stopping")
            time.sleep(0.1)

    def last_lines(self, n: int = 5) -> str:
        """The last log lines (or stdout lines when the log is empty), joined with ' | '."""
        text = procs.tail(self.files.log, n) or procs.tail(self.files.stdout, n)
        return " | ".join(line.strip() for line in text.splitlines()) or "(no log output)"

    def stop(self) -> int | None:
        """End OpenSM (SIGTERM, then SIGKILL), reap it and remove its pid file.

        Returns:
            its exit status, or None if none was started.
        """
        self.files.pid.unlink(missing_ok=True)
        if self.proc is None:
            return None
        if self.running:
            procs.stop_child(self.proc)
            self.note = f"stopped, exit status {self.proc.returncode}"
        self._clean(self.proc.pid)
        return self.proc.returncode

    def _log_end(self) -> tuple[int, int]:
        """(inode, size) of the log now; (0, 0) when there is none."""
        try:
            st = self.files.log.stat()
        except OSError:
            return (0, 0)
        return (st.st_ino, st.st_size)

    def _log_text(self) -> str:
        """What OpenSM logged since the last :meth:`spawn`.

        A log replaced since (renamed away, rotated) is read from its start.
        """
        inode, offset = self._log_from
        try:
            with self.files.log.open("rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_ino == inode and st.st_size >= offset:
                    fh.seek(offset)
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
