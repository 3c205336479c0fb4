"""An agent on a lab: ``ibqos run`` against a lab, from its config to its exit status.

The lab tests, the closed-loop benchmark and the demo run the agent the same way, and this
module is that way:

- :func:`write_jobs` writes a job file, which the lab's traffic model and the agent read;
- :func:`agent_config` writes the agent's config: the lab's ``ibqos.yaml`` with sections
  merged into it;
- :class:`AgentRun` starts ``ibqos run`` attached to the lab (the lab's environment and run
  directory), its stderr in a log file; finds its metrics endpoint in that log (an agent
  given ``metrics.listen: 127.0.0.1:0`` listens on any free port, so that agents run side
  by side never collide, and logs the URL); scrapes it; and ends the agent by its pid:
  SIGTERM, on which it finishes its cycle and exits 0, and SIGKILL if it is still there
  after :data:`STOP_TIMEOUT_S`.  As a context manager it starts on entry and stops on exit.

The agent is started through :func:`ibqos.lab.procs.spawn`, so that it gets SIGTERM if its
owner dies; nothing is matched by name.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from ibqos.errors import LabError
from ibqos.fsio import atomic_write
from ibqos.lab import procs
from ibqos.lab.lab import Lab

__all__ = [
    "METRICS_LINE",
    "STOP_TIMEOUT_S",
    "AgentRun",
    "Samples",
    "Sections",
    "agent_config",
    "metrics_url",
    "read_state",
    "samples",
    "scrape",
    "write_jobs",
]

#: The agent's log line that names its endpoint (:mod:`ibqos.metrics.server` logs it once
#: it listens); the lab's agents serve plain HTTP.
METRICS_LINE = re.compile(r"metrics on (http://\S+/metrics)")
#: Seconds between SIGTERM and SIGKILL when an agent is stopped: its cycle (a sweep, a
#: plan, an OpenSM reload) ends well within this on a lab.
STOP_TIMEOUT_S = 30.0

#: Config sections by name, each a mapping of keys to merge (``{"collect": {...}}``).
Sections = Mapping[str, Mapping[str, Any]]
#: Every sample of a scrape: (name, sorted (label, value) pairs) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def steady_job(
    job_id: str, nodes: str, rate: float = 1.0e8, pattern: str = "ring"
) -> dict[str, Any]:
    """A job of the lab's traffic model that sends all the time (duty 1, 0.1 s periods),
    named ``app<id>``.

    Args:
        job_id: its id.
        nodes: its hosts (a Slurm host list).
        rate: bytes per second each of its ranks sends.
        pattern: its traffic pattern (``ring``, ``all-to-all``, ...).
    """
    return {
        "id": job_id,
        "name": f"app{job_id}",
        "nodes": nodes,
        "pattern": pattern,
        "rate_bytes_per_s": rate,
        "duty": 1.0,
        "period_s": 0.1,
    }


def write_jobs(path: Path, jobs: Iterable[Mapping[str, Any]]) -> None:
    """Write a job file (``jobs:``, each job's keys in the order given) in one step, so
    that neither the lab nor the agent ever reads half of it.

    Args:
        path: the job file (e.g. the lab's ``paths.jobs``).
        jobs: the jobs, as the traffic model reads them (``id``, ``nodes``, ``pattern``,
            ``rate_bytes_per_s``, ...).
    """
    atomic_write(path, yaml.safe_dump({"jobs": [dict(j) for j in jobs]}, sort_keys=False))


def agent_config(base: Path, path: Path, *layers: Sections, sort_keys: bool = True) -> Path:
    """Write an agent's config: *base* with the sections of each layer merged in, in order.

    A layer's section updates the section of that name key by key (one level deep), so a
    layer may set ``metrics.listen`` and keep the lab's ``metrics.fabric``; later layers
    win.

    Args:
        base: the config to start from (a lab's ``paths.config``).
        path: where to write the agent's config.
        layers: sections to merge, e.g. a caller's defaults, then a test's own.
        sort_keys: write the keys sorted (False: the base's order, new sections last).

    Returns:
        *path*.
    """
    doc: dict[str, Any] = yaml.safe_load(base.read_text()) or {}
    for layer in layers:
        for key, value in layer.items():
            doc.setdefault(key, {}).update(value)
    path.write_text(yaml.safe_dump(doc, sort_keys=sort_keys))
    return path


def metrics_url(log_text: str) -> str | None:
    """The metrics URL an agent logged (the first), or None before it listens."""
    m = METRICS_LINE.search(log_text)
    return None if m is None else m.group(1)


def scrape(url: str, timeout_s: float = 10.0) -> bytes:
    """One GET of a metrics endpoint: the exposition text, as served."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (an agent's http URL)
        body: bytes = resp.read()
    return body


def samples(text: str) -> Samples:
    """Every sample of an exposition text: (name, sorted labels) -> value.

    The unlabelled ones of a name are at ``(name, ())``.
    """
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def read_state(state_dir: Path) -> dict[str, Any]:
    """The agent's ``state.json`` in *state_dir*; {} while there is none to read (the agent
    writes it in one step, but not before its first cycle)."""
    try:
        doc = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return dict(doc)


class AgentRun:
    """One ``ibqos run`` process, started and ended by this process.

    Use :meth:`on` for an agent attached to a lab; the constructor takes the environment
    and working directory itself (a test may run another program in its place).  Call
    :meth:`start` and :meth:`stop`, or use it as a context manager.

    Args:
        config: the agent's config (``--config``).
        log: the file its stderr (its log) goes to, truncated at the start.
        args: more arguments of ``ibqos run`` (e.g. ``--once``).
        env: its whole environment.
        cwd: its working directory.
        prefix: a command it runs under (e.g. ``setpriv`` dropping capabilities).
        program: the program to run, found on *env*'s PATH (``ibqos``).
    """

    def __init__(
        self,
        config: Path,
        log: Path,
        *args: str,
        env: Mapping[str, str],
        cwd: Path,
        prefix: Sequence[str] = (),
        program: str = "ibqos",
    ) -> None:
        self.config = config
        self.log = log
        self.argv = [*prefix, program, "run", "--config", str(config), *args]
        self.env = dict(env)
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def on(
        cls,
        lab: Lab,
        config: Path,
        log: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> AgentRun:
        """An agent attached to *lab*: the lab's environment (its MAD clients reach the
        simulated fabric) with *env* over it, in the lab's run directory.

        Args:
            lab: the lab (up: in this process, or in its supervisor).
            config: the agent's config.
            log: its log file.
            args: more arguments of ``ibqos run``.
            env: variables to set over the lab's.
            prefix: a command it runs under.
        """
        return cls(
            config,
            log,
            *args,
            env=lab.env() | dict(env or {}),
            cwd=lab.paths.run,
            prefix=prefix,
        )

    def __enter__(self) -> AgentRun:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- the process -----------------------------------------------------------------

    def start(self) -> AgentRun:
        """Start the agent; return self.

        Raises:
            LabError: it is started already, or its program is not found or cannot run.
        """
        if self.proc is not None:
            raise LabError(f"the agent is started already (pid {self.proc.pid})")
        with self.log.open("w") as err:  # the child keeps its own descriptor
            self.proc = procs.spawn(self.argv, env=self.env, cwd=self.cwd, stderr=err)
        return self

    @property
    def pid(self) -> int:
        return self._proc().pid

    def poll(self) -> int | None:
        """Its exit status, or None while it runs."""
        return self._proc().poll()

    def send_signal(self, sig: int) -> None:
        """Send *sig* to the agent by its pid (e.g. SIGHUP: re-read the config)."""
        self._proc().send_signal(sig)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """End the agent by its pid and reap it; its exit status.

        SIGTERM, on which the agent finishes its cycle and exits 0; SIGKILL if it is still
        there after *timeout_s* seconds (the status is then ``-SIGKILL``).  Stopping an
        agent that has exited returns its status; one never started, LabError.
        """
        proc = self._proc()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def _proc(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise LabError("the agent was not started")
        return self.proc

    # -- what it says ----------------------------------------------------------------

    def log_text(self) -> str:
        """Its log so far ("" before it wrote any)."""
        try:
            return self.log.read_text()
        except FileNotFoundError:
            return ""

    def metrics_url(self) -> str | None:
        """Its metrics URL, once it logged it."""
        return metrics_url(self.log_text())

    def wait_metrics_url(
        self,
        timeout_s: float = 30.0,
        *,
        step: Callable[[], None] | None = None,
        interval_s: float = 0.1,
    ) -> str:
        """Wait until the agent logs its metrics URL, and return it.

        Args:
            timeout_s: seconds to wait.
            step: called between two looks at the log (an in-process lab ticks there);
                None: sleep *interval_s*.
            interval_s: seconds between two looks when there is no *step*.

        Raises:
            LabError: the agent exited, or logged no URL within *timeout_s* (the message
                has the last lines of its log).
        """
        deadline = time.monotonic() + timeout_s
        while (url := self.metrics_url()) is None:
            code = self.poll()
            if code is not None:
                raise LabError(f"the agent exited ({code}): {procs.tail(self.log)}")
            if time.monotonic() > deadline:
                raise LabError(
                    f"the agent logged no metrics URL within {timeout_s:g} s: "
                    f"{procs.tail(self.log)}"
                )
            if step is None:
                time.sleep(interval_s)
            else:
                step()
        return url

    def scrape(self) -> bytes:
        """Its metrics, as served.

        Raises:
            LabError: it has not logged its metrics URL yet.
        """
        url = self.metrics_url()
        if url is None:
            raise LabError(f"the agent serves no metrics (yet): {self.log}")
        return scrape(url)

    def samples(self) -> Samples:
        """Every sample of its metrics: (name, sorted labels) -> value."""
        return samples(self.scrape().decode())
