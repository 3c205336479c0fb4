"""A throwaway Prometheus server for tests, benchmarks and the demo.

``PrometheusServer`` writes a ``prometheus.yml`` into a directory the caller owns, checks
it with ``promtool``, starts ``prometheus`` on 127.0.0.1 with its data and log in that
directory, and waits until it is ready.  Query helpers talk to the HTTP API with the
standard library only.  The process is started through :func:`ibqos.lab.procs.spawn`
(it gets SIGTERM if its owner dies) and ended by pid; nothing is matched by name.

The flags used are checked against Prometheus 2.42 (Debian 12) and none was dropped in
3.x; the lifecycle and admin APIs stay off (their defaults).  Prometheus 2.42 applies
static targets only after a fixed 5 s discovery throttle, so the first scrape comes about
5 s after ``/-/ready`` whatever the scrape interval.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from ibqos.errors import LabError, PrometheusQueryError
from ibqos.lab import procs
from ibqos.tools import find_tool, run_tool

#: Samples older than this are dropped; a lab server lives for minutes, not days.
RETENTION = "1h"
#: Scrape-config keys ``PrometheusServer`` writes itself; ``scrape_extra`` may not set them.
OWN_SCRAPE_KEYS = frozenset({"job_name", "static_configs"})
_ADDR_IN_USE = "address already in use"

Result = list[dict[str, Any]]


def duration(seconds: float) -> str:
    """A Prometheus duration for *seconds* at millisecond resolution: 0.5 -> "500ms"."""
    if not math.isfinite(seconds) or round(seconds * 1000) <= 0:
        raise ValueError(f"duration must be at least 1 ms, got {seconds!r} s")
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def render_config(
    targets: Sequence[str],
    *,
    job: str = "ibqos",
    scrape_interval: float = 15.0,
    evaluation_interval: float = 15.0,
    rule_files: Sequence[Path] = (),
    scrape_extra: Mapping[str, Any] | None = None,
) -> str:
    """Text of a prometheus.yml with one static scrape job.

    Args:
        targets: "host:port" of each endpoint to scrape.
        job: the scrape job's name (the ``job`` label).
        scrape_interval: seconds between scrapes.
        evaluation_interval: seconds between rule evaluations.
        rule_files: rule files; written as absolute paths so the config works from anywhere.
        scrape_extra: more scrape-config keys (``scheme``, ``tls_config``, ``basic_auth``,
            ...), passed through unchecked; promtool judges them.
    """
    extra = dict(scrape_extra or {})
    clash = OWN_SCRAPE_KEYS & extra.keys()
    if clash:
        raise ValueError(f"scrape_extra may not set {', '.join(sorted(clash))}")
    scrape: dict[str, Any] = {"job_name": job, "static_configs": [{"targets": list(targets)}]}
    scrape.update(extra)
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": duration(scrape_interval),
            "evaluation_interval": duration(evaluation_interval),
        },
        "scrape_configs": [scrape],
    }
    if rule_files:
        config["rule_files"] = [str(Path(p).resolve()) for p in rule_files]
    header = "# prometheus.yml written by ibqos.lab.prometheus\n"
    return header + yaml.safe_dump(config, sort_keys=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrometheusServer:
    """One Prometheus process scraping fixed targets, its files all under *workdir*.

    Use as a context manager (``with PrometheusServer(tmp_path, [target]) as prom:``) or
    call :meth:`start` and :meth:`stop`.  Files: ``prometheus.yml``, ``prometheus.log``
    (its stdout and stderr) and ``data/`` (the TSDB).  ``data/`` is kept across a
    stop and a new start in the same *workdir*, as for a real restart; use a fresh
    directory for a fresh server.

    Args:
        workdir: an existing directory the caller owns (e.g. pytest's ``tmp_path``).
        targets: "host:port" of each endpoint to scrape.
        job: scrape job name.
        scrape_interval: seconds between scrapes (0.5 is fine).
        evaluation_interval: seconds between rule evaluations.
        rule_files: recording/alerting rule files to load.
        scrape_extra: extra scrape-config keys (``scheme``, ``tls_config``, ``basic_auth``).
        start_timeout: seconds to wait for ``/-/ready``.
        stop_timeout: seconds between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        job: str = "ibqos",
        scrape_interval: float = 15.0,
        evaluation_interval: float = 15.0,
        rule_files: Sequence[Path] = (),
        scrape_extra: Mapping[str, Any] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.config_text = render_config(
            targets,
            job=job,
            scrape_interval=scrape_interval,
            evaluation_interval=evaluation_interval,
            rule_files=rule_files,
            scrape_extra=scrape_extra,
        )
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        # No proxy: http_proxy in the environment must not capture requests to 127.0.0.1.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def config(self) -> Path:
        return self.workdir / "prometheus.yml"

    @property
    def log(self) -> Path:
        return self.workdir / "prometheus.log"

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:41234``."""
        if self.port is None:
            raise LabError("prometheus is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- process -------------------------------------------------------------------

    def start(self, attempts: int = 3) -> float:
        """Write and check the config, start Prometheus and wait until it is ready.

        Args:
            attempts: how many ports to try; a port picked free may be taken before
                Prometheus binds it.

        Returns:
            seconds it took.

        Raises:
            LabError: promtool rejected the config, Prometheus exited, or it was not ready
                within ``start_timeout`` seconds; the message carries promtool's output or
                the last lines of Prometheus's log.  No process is left running.
        """
        if self.proc is not None:
            raise LabError(f"prometheus already started (pid {self.proc.pid})")
        if not self.workdir.is_dir():
            raise LabError(f"prometheus working directory {self.workdir} does not exist")
        t0 = time.monotonic()
        self.config.write_text(self.config_text)
        self.check_config()
        try:
            for _ in range(attempts):
                if self._start_once(free_port()):
                    return time.monotonic() - t0
        except BaseException:
            self.stop()  # also on KeyboardInterrupt: never leave a server behind
            raise
        raise LabError(f"prometheus found its port taken {attempts} times: {self.last_lines()}")

    def check_config(self) -> None:
        """Run ``promtool check config`` (it also checks the rule files it names)."""
        promtool = find_tool("promtool")
        if promtool is None:
            raise LabError("promtool: not found on PATH (run 'make setup' to install it)")
        out = run_tool([promtool, "check", "config", str(self.config)], timeout_s=30)
        if out.cause is not None:
            raise LabError(f"promtool check config {self.config} failed to run") from out.cause
        if out.returncode != 0:
            text = " | ".join(
                line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()
            )
            raise LabError(f"promtool check config rejected {self.config}: {text}")

    def _start_once(self, port: int) -> bool:
        """Start on *port*; False if another process had taken it."""
        argv = [
            "prometheus",
            f"--config.file={self.config}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={self.data}",
            f"--storage.tsdb.retention.time={RETENTION}",
        ]
        log_start = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = procs.spawn(argv, env=os.environ, cwd=self.workdir, stdout=out)
        self.port = port
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._ready() and self._is_ours():
                return True
            code = self.proc.poll()
            if code is not None:
                self.proc, self.port = None, None
                if _ADDR_IN_USE in self._log_since(log_start):
                    return False
                raise LabError(
                    f"prometheus exited with status {code} before it was ready: {self.last_lines()}"
                )
            if time.monotonic() > deadline:
                raise LabError(
                    f"prometheus was not ready within {self.start_timeout:.0f} s: "
                    f"{self.last_lines()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """End Prometheus by pid (SIGTERM, SIGKILL after ``stop_timeout`` s) and reap it."""
        if self.proc is not None:
            procs.stop_child(self.proc, self.stop_timeout)
        self.proc = None
        self.port = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_lines(self, n: int = 5) -> str:
        """The last lines of Prometheus's log, joined with ' | '."""
        text = procs.tail(self.log, n)
        return " | ".join(line.strip() for line in text.splitlines()) or "(no log output)"

    def _log_since(self, offset: int) -> str:
        try:
            with self.log.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def _is_ours(self) -> bool:
        """True if the server on our port runs our config, not some other Prometheus."""
        try:
            flags = self._api("status/flags", {}, "status/flags")
        except PrometheusQueryError:
            return False
        return bool(flags.get("config.file") == str(self.config)) and self.running()

    def _ready(self) -> bool:
        try:
            with self._opener.open(f"{self.url}/-/ready", timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False  # not listening yet, or 503 while the TSDB loads

    # -- HTTP API ------------------------------------------------------------------

    def query(self, expr: str, time: float | None = None) -> Result:
        """Instant query.

        Args:
            expr: PromQL expression.
            time: evaluation time in seconds since the epoch; None means now.

        Returns:
            one ``{"metric": {label: value}, "value": [seconds, "text"]}`` per series; a
            scalar or string result comes back as one entry with empty ``metric``.
        """
        params = {"query": expr}
        if time is not None:
            params["time"] = _ts(time)
        data = self._api("query", params, expr)
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return list(result)

    def query_range(self, expr: str, start: float, end: float, step: float) -> Result:
        """Range query from *start* to *end* (seconds since the epoch), every *step* seconds.

        Returns:
            one ``{"metric": {...}, "values": [[seconds, "text"], ...]}`` per series.
        """
        params = {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        return list(self._api("query_range", params, expr)["result"])

    def series(
        self, match: str | Sequence[str], start: float | None = None, end: float | None = None
    ) -> list[dict[str, str]]:
        """Label sets of the series matching *match* (one selector or several).

        Args:
            match: series selector(s), e.g. ``'{job="ibqos"}'``.
            start: seconds since the epoch; None lets Prometheus choose (its whole range).
            end: seconds since the epoch; None means now.
        """
        matches = [match] if isinstance(match, str) else list(match)
        params: list[tuple[str, str]] = [("match[]", m) for m in matches]
        if start is not None:
            params.append(("start", _ts(start)))
        if end is not None:
            params.append(("end", _ts(end)))
        return list(self._api("series", params, " ".join(matches)))

    def targets(self) -> Result:
        """Active targets, each with ``labels``, ``scrapeUrl``, ``health`` ("up", "down",
        "unknown"), ``lastError`` and ``lastScrape``."""
        return list(self._api("targets", {"state": "active"}, "targets")["activeTargets"])

    def rules(self) -> Result:
        """Rule groups, each with ``name``, ``file`` and ``rules`` (with ``health``,
        ``lastError`` and, for recording rules, ``query``)."""
        return list(self._api("rules", {}, "rules")["groups"])

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[Result], bool],
        timeout: float,
        interval: float = 0.1,
    ) -> Result:
        """Poll ``query(expr)`` until *predicate* holds for its result, and return it.

        Args:
            expr: PromQL expression.
            predicate: called with each result.
            timeout: seconds to keep trying.
            interval: seconds between queries.

        Raises:
            PrometheusQueryError: the query itself fails (it will not fix itself).
            LabError: *timeout* passed (the message shows the last result), or Prometheus
                exited.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if not self.running():
                raise LabError(f"prometheus exited while waiting for {expr!r}: {self.last_lines()}")
            if time.monotonic() > deadline:
                raise LabError(
                    f"prometheus: {expr!r} did not satisfy the condition within {timeout:g} s; "
                    f"last result: {json.dumps(result)[:500]}"
                )
            time.sleep(interval)

    def _api(
        self, endpoint: str, params: Mapping[str, str] | Sequence[tuple[str, str]], what: str
    ) -> Any:
        """GET ``/api/v1/<endpoint>`` and return its ``data``, or raise with its error."""
        url = f"{self.url}/api/v1/{endpoint}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with self._opener.open(url, timeout=30.0) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            # 400/422/503 carry the JSON error envelope; keep it for the message.
            with err:
                body = err.read()
        except OSError as err:
            raise PrometheusQueryError(what, "", f"cannot reach {self.url}: {err}") from err
        try:
            reply = json.loads(body)
        except ValueError as err:
            raise PrometheusQueryError(what, "", f"not JSON: {body[:200]!r}") from err
        if reply.get("status") != "success":
            raise PrometheusQueryError(
                what, str(reply.get("errorType", "")), str(reply.get("error", reply))
            )
        return reply["data"]


def _ts(seconds: float) -> str:
    """A time or step for the API: seconds as a float, which Prometheus parses exactly."""
    return f"{seconds:.3f}"
