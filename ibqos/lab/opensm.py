"""The lab's OpenSM: its configuration, and starting it under umad2sim until the subnet is up."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import LabError
from ibqos.lab import procs

MASTER_LINE = "Entering MASTER state"
SUBNET_UP_LINE = "SUBNET UP"
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

#: A policy OpenSM accepts: the only mandatory part is a DEFAULT qos-level (reference A.1).
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

    def start(self, timeout: float) -> float:
        """Start OpenSM and wait until it is MASTER and the subnet is up (routed).

        Returns:
            seconds it took.

        Raises:
            LabError: OpenSM exited or did not get there within *timeout* seconds; the
                message carries the last lines of its log.
        """
        t0 = time.monotonic()
        self.files.cache.mkdir(parents=True, exist_ok=True)
        with self.files.stdout.open("ab") as out:
            self.proc = procs.spawn(
                ["opensm", "-F", str(self.files.conf)], env=self.env, cwd=self.workdir, stdout=out
            )
        self.files.pid.write_text(f"{self.proc.pid}\n")
        deadline = t0 + timeout
        while True:
            text = self._log_text()
            if MASTER_LINE in text and SUBNET_UP_LINE in text:
                return time.monotonic() - t0
            code = self.proc.poll()
            if code is not None:
                raise LabError(
                    f"OpenSM exited with status {code} before the subnet was up: "
                    f"{self.last_lines()}"
                )
            if time.monotonic() > deadline:
                raise LabError(
                    f"OpenSM did not bring the subnet up within {timeout:.0f} s: "
                    f"{self.last_lines()}"
                )
            time.sleep(0.1)

    def last_lines(self, n: int = 5) -> str:
        """The last log lines (or stdout lines when the log is empty), joined with ' | '."""
        text = procs.tail(self.files.log, n) or procs.tail(self.files.stdout, n)
        return " | ".join(line.strip() for line in text.splitlines()) or "(no log output)"

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop_child(self.proc)
        self.files.pid.unlink(missing_ok=True)

    def _log_text(self) -> str:
        try:
            return self.files.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
