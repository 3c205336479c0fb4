"""SL hand-off: the agent tells a job the SL it gave it, so the job's MPI stack can use it.

Most MPI traffic never asks OpenSM for a path: UCX, NCCL and Open MPI take a static SL from
their environment at launch.  So the agent answers one question, "which SL has job J?", on
a local UNIX socket (``agent.socket``, for ``ibqos job-sl``) and optionally on TCP
(``agent.sl_listen``, for TaskProlog scripts on compute nodes that have no ibqos).

Protocol, one line each way (ASCII, ``\\n``-terminated)::

    -> SL <job id> [<seconds the asker waits>]
    <- OK <sl>                 the job's SL
    <- UNKNOWN <text>          the job source does not run this job
    <- NOSL <text>             it runs, but none of its hosts is on the fabric
    <- TIMEOUT <text>          no answer within the asker's bound
    <- ERROR <text>            a malformed question

A question for a job the agent does not know makes it read its job source at once (an
squeue poll) and plan, so a job gets its SL at launch even before the next poll; the answer
waits for that read, never longer than the asker said.  Every answer that is not ``OK`` is
a *miss* (the job's tasks start on the default SL): it is logged once per job and counted
(``ibqos_job_sl_requests_total{result}``).

:class:`SlBoard` is the thread-safe meeting point of the agent's loop (which publishes the
SLs it plans) and the server's threads (which wait for them); :class:`SlServer` serves the
sockets; :func:`ask_sl` is the client.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import HandoffError

log = logging.getLogger(__name__)

__all__ = [
    "RESULTS",
    "Answer",
    "SlBoard",
    "SlServer",
    "ask_sl",
]
__all__ += ["check_job_id"]

#: answers, as counted; all but "ok" are misses
RESULTS = ("ok", "unknown", "no_sl", "timeout")
#: job ids as schedulers write them (Slurm: digits; files: any short token)
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
#: seconds the server waits at most, whatever the asker says it would
MAX_WAIT_S = 30.0
#: seconds the server waits when the asker gives no bound
DEFAULT_WAIT_S = 5.0
#: seconds a connection may take to send its question
_READ_TIMEOUT_S = 5.0
_MAX_LINE = 256
_MAX_LOGGED = 10000  # (job, result) pairs remembered for logging each miss once


def check_job_id(text: str, where: str = "job id") -> str:
    """Return *text* if it looks like a job id.

    Raises:
        HandoffError: it does not (``where`` names the input).
    """
    if not _JOB_ID.fullmatch(text):
        raise HandoffError(
            f"{where}: expected a job id (letters, digits, '_.+-', at most 64), got {text!r}"
        )
    return text


@dataclass(frozen=True)
class Answer:
    """What the agent answers: *result* is one of :data:`RESULTS`; *sl* is set for "ok"."""

    result: str
    sl: int | None = None
    text: str = ""

    def line(self) -> str:
        """The reply line (without the newline)."""
        if self.result == "ok":
            return f"OK {self.sl}"
        word = {"unknown": "UNKNOWN", "no_sl": "NOSL", "timeout": "TIMEOUT"}[self.result]
        return f"{word} {self.text}"


class SlBoard:
    """The SLs the agent planned, and the questions waiting for one (thread-safe).

    The agent's loop calls :meth:`publish` after each decision and :meth:`round_done` after
    it re-read its job source for waiting questions; server threads call :meth:`ask`.

    Args:
        wake: called when a question needs the agent's loop (sets its wake-up event).
        clock: monotonic seconds; the job source's ``read_at`` must use the same clock.
    """

    def __init__(
        self, wake: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.wake = wake
        self.clock = clock
        self.counts: Counter[str] = Counter({r: 0 for r in RESULTS})
        self._cond = threading.Condition()
        self._sl: dict[str, int] = {}
        self._running: frozenset[str] = frozenset()
        self._fresh_at = float("-inf")
        self._asked_at = float("-inf")
        self._waiting = 0
        self._logged: set[tuple[str, str]] = set()

    def publish(
        self, job_sl: Mapping[str, int], running: Collection[str], planned: Collection[str] = ()
    ) -> None:
        """The job -> SL in force and the ids of every job the source runs (mapped or not);
        *planned*: running jobs whose SL is not in force yet."""
        with self._cond:
            self._sl = dict(job_sl)
            self._running = frozenset(running)
            self._cond.notify_all()

    def round_done(self, read_at: float) -> None:
        """The job source was read (a read started at *read_at*) and planned on."""
        with self._cond:
            self._fresh_at = max(self._fresh_at, read_at)
            self._cond.notify_all()

    def pending(self) -> bool:
        """True if a question waits for a read of the job source newer than the last."""
        with self._cond:
            return self._waiting > 0 and self._asked_at > self._fresh_at

    def known(self, job_id: str) -> int | None:
        """The job's SL if planned, else None (never waits)."""
        with self._cond:
            return self._sl.get(job_id)

    def ask(self, job_id: str, wait_s: float) -> Answer:
        """The job's SL, waiting up to *wait_s* seconds for a fresh read of the jobs."""
        asked = self.clock()
        deadline = asked + max(0.0, min(wait_s, MAX_WAIT_S))
        with self._cond:
            answer = self._answer(job_id, asked)
            if answer is None:
                self._waiting += 1
                self._asked_at = max(self._asked_at, asked)
                try:
                    self.wake()
                    while answer is None:
                        left = deadline - self.clock()
                        if left <= 0:
                            answer = Answer("timeout", text=f"no SL for job {job_id} in time")
                            break
                        self._cond.wait(left)
                        answer = self._answer(job_id, asked)
                finally:
                    self._waiting -= 1
            self.counts[answer.result] += 1
            self._note(job_id, answer)
        return answer

    def _answer(self, job_id: str, asked: float) -> Answer | None:
        """The answer now, or None to wait for a read of the jobs started after *asked*."""
        sl = self._sl.get(job_id)
        if sl is not None:
            return Answer("ok", sl)
        if self._fresh_at < asked:
            return None
        if job_id in self._running:
            return Answer("no_sl", text=f"job {job_id} runs on no host of the fabric")
        return Answer("unknown", text=f"job {job_id} is not running (job source)")

    def _note(self, job_id: str, answer: Answer) -> None:
        if answer.result == "ok":
            return
        key = (job_id, answer.result)
        if key in self._logged:
            return
        if len(self._logged) >= _MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        log.warning("job-sl: %s; its tasks start on the default SL", answer.text)


class _Handler(socketserver.StreamRequestHandler):
    """One question, one answer."""

    server: _UnixServer | _TcpServer

    def handle(self) -> None:
        self.connection.settimeout(_READ_TIMEOUT_S)
        try:
            raw = self.rfile.readline(_MAX_LINE)
        except OSError:
            return
        reply = _reply(self.server.board, raw.decode("ascii", "replace"))
        with contextlib.suppress(OSError):  # the asker gave up: nothing to tell
            self.wfile.write((reply + "\n").encode())


def _reply(board: SlBoard, line: str) -> str:
    words = line.split()
    if len(words) not in (2, 3) or words[0] != "SL" or not _JOB_ID.fullmatch(words[1]):
        return "ERROR expected 'SL <job id> [<seconds>]'"
    wait = DEFAULT_WAIT_S
    if len(words) == 3:
        try:
            wait = float(words[2])
        except ValueError:
            return f"ERROR bad wait {words[2][:20]!r}: expected seconds"
    return board.ask(words[1], wait).line()


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    board: SlBoard


class _TcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    board: SlBoard


class SlServer:
    """Serves :class:`SlBoard` on a UNIX socket and/or TCP, each in a thread.

    Args:
        board: what to answer from.
        socket_path: the UNIX socket (created mode 0666: any user's TaskProlog may ask;
            the answer is no secret); None: none.
        listen: (host, port) for TCP; None: none.  Port 0 takes any free port
            (:attr:`tcp_address` has it).

    Raises:
        HandoffError: a socket cannot be bound (another ibqos answers there, the address
            is taken, the directory cannot be made).
    """

    def __init__(
        self,
        board: SlBoard,
        socket_path: Path | None,
        listen: tuple[str, int] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.tcp_address: tuple[str, int] | None = None
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        try:
            if socket_path is not None:
                _clear_stale(socket_path)
                unix = _UnixServer(str(socket_path), _Handler)
                unix.board = board
                self._servers.append(unix)
                # any user's TaskProlog may ask; an SL is no secret
                socket_path.chmod(0o666)
            if listen is not None:
                try:
                    tcp = _TcpServer(listen, _Handler)
                except OSError as err:
                    raise HandoffError(
                        f"agent.sl_listen: cannot listen on {listen[0]}:{listen[1]}"
                    ) from err
                tcp.board = board
                self._servers.append(tcp)
                host, port = tcp.server_address[:2]
                self.tcp_address = (str(host), int(port))
        except (HandoffError, OSError) as err:
            self.close()
            if isinstance(err, HandoffError):
                raise
            raise HandoffError(f"agent.socket: cannot serve on {socket_path}") from err
        for server in self._servers:
            # a short poll interval: close() (shutdown) waits up to one of them
            thread = threading.Thread(
                target=server.serve_forever, args=(0.1,), name="ibqos-sl", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        where = [str(socket_path)] if socket_path else []
        if self.tcp_address:
            where.append(f"{self.tcp_address[0]}:{self.tcp_address[1]}")
        log.info("answering job SL questions on %s", " and ".join(where))

    def close(self) -> None:
        """Stop serving and remove the socket file."""
        for server in self._servers:
            if self._threads:
                server.shutdown()
            server.server_close()
        self._servers, self._threads = [], []
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                if self.socket_path.is_socket():
                    self.socket_path.unlink()


def _clear_stale(path: Path) -> None:
    """Make way for the socket: remove a dead agent's socket, refuse a live one's."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_socket():
        raise HandoffError(f"agent.socket: {path} exists and is not a socket; not touching it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody answers: left by an agent that died
            return
    raise HandoffError(f"agent.socket: another ibqos agent answers on {path}")


def ask_sl(
    job_id: str,
    timeout_s: float,
    *,
    socket_path: Path | None = None,
    server: tuple[str, int] | None = None,
) -> int:
    """Ask the running agent for a job's SL (exactly one of *socket_path*, *server*).

    Args:
        job_id: the job (Slurm: ``SLURM_JOB_ID``).
        timeout_s: seconds to wait for the answer, connecting included; the agent is told
            so it gives up at the same time.

    Raises:
        HandoffError: one line saying why there is no SL (ibqos not running, job unknown,
            no answer in time).
    """
    check_job_id(job_id)
    if (socket_path is None) == (server is None):
        raise ValueError("ask_sl: give exactly one of socket_path and server")
    where = str(socket_path) if server is None else f"{server[0]}:{server[1]}"
    deadline = time.monotonic() + timeout_s
    try:
        if socket_path is not None:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(timeout_s)
            target: str | tuple[str, int] = str(socket_path)
        else:
            assert server is not None
            conn = socket.socket(_family(server[0]), socket.SOCK_STREAM)
            conn.settimeout(timeout_s)
            target = server
        with conn:
            try:
                conn.connect(target)
            except (FileNotFoundError, ConnectionRefusedError) as err:
                raise HandoffError(f"ibqos is not running (nothing answers on {where})") from err
            # the agent waits a little less than we do, so its answer still reaches us
            wait = max(0.0, deadline - time.monotonic() - 0.1)
            conn.sendall(f"SL {job_id} {wait:.3f}\n".encode())
            reply = _read_line(conn, deadline)
    except TimeoutError as err:
        raise HandoffError(f"no answer from ibqos on {where} within {timeout_s:g} s") from err
    except OSError as err:
        raise HandoffError(f"cannot ask ibqos on {where}") from err
    word, _, rest = reply.partition(" ")
    if word == "OK" and rest.isdigit() and 0 <= int(rest) <= 15:
        return int(rest)
    if word in ("UNKNOWN", "NOSL", "TIMEOUT", "ERROR") and rest:
        raise HandoffError(rest)
    raise HandoffError(f"ibqos on {where} answered {reply[:60]!r}, not an SL")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _read_line(conn: socket.socket, deadline: float) -> str:
    data = b""
    while b"\n" not in data and len(data) < _MAX_LINE:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.settimeout(left)
        chunk = conn.recv(_MAX_LINE)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()
