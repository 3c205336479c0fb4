"""SL hand-off: the agent tells a job the SL it gave it, so the job's MPI stack can use it.

Most MPI traffic never asks OpenSM for a path: UCX, NCCL and Open MPI take a static SL from
their environment at launch.  So the agent answers one question, "which SL has job J?", on
a local UNIX socket (``agent.socket``, for ``ibqos job-sl``) and optionally on TCP
(``agent.sl_listen``, for Prolog and TaskProlog scripts on compute nodes that have no ibqos).

Protocol, one line each way (ASCII, ``\\n``-terminated), one question per connection::

    -> SL <job id> [<seconds the asker waits>]
    -> SL "<job id>" [<seconds the asker waits>]     an id with spaces (``job 7``)
    <- OK <sl>                 the job's SL, in force: OpenSM serves it now
    <- PENDING <text>          the job has an SL in the plan, but OpenSM does not serve it
                               yet (the apply is pending, failed or deferred) and it did not
                               come into force within the asker's bound
    <- UNKNOWN <text>          the job source does not run this job
    <- NOSL <text>             it runs, but none of its hosts is on the fabric
    <- TIMEOUT <text>          no answer within the asker's bound
    <- ERROR <text>            a malformed question, or ``ERROR busy ...``: the asker's
                               peer (or the server) holds too many connections

Only SLs in force are handed out: an SL that OpenSM maps elsewhere would put the job's
traffic on a lane the policy never meant for it.  A question for a job the agent does not
know makes it read its job source at once (an squeue poll) and plan, so a job gets its SL
at launch even before the next poll; a question for a job whose SL is planned but not in
force waits for the apply.  Neither waits longer than the asker said.  Every answer that is
not ``OK`` is a *miss* (the job's tasks start on the default SL): it is counted
(``ibqos_job_sl_requests_total{result}``) and logged once per job, at most
:data:`MISS_LINES` lines a minute; past that, one line a minute says how many were not logged.

:class:`SlBoard` is the thread-safe meeting point of the agent's loop (which publishes the
SLs in force) and the server (which answers from it); :class:`SlServer` serves the sockets
from one thread (:mod:`ibqos.agent.slserve`); :func:`ask_sl` is the client.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from ibqos.agent.slserve import (
    MAX_LINE,
    MAX_WAIT_S,
    SPACED_JOB_ID,
    Limits,
    ServeLoop,
    ServerStats,
    listen_backlog,
    quote_job_id,
    raise_fd_limit,
)
from ibqos.errors import HandoffError

log = logging.getLogger(__name__)

__all__ = [
    "RESULTS",
    "SOCKET_PATH_MAX",
    "Answer",
    "SlBoard",
    "SlServer",
    "ask_sl",
]
__all__ += ["check_job_id"]

#: bytes a UNIX socket's path may have at most (``sun_path`` is 108 bytes with its NUL)
SOCKET_PATH_MAX = 107
#: answers, as counted; all but "ok" are misses
RESULTS = ("ok", "unknown", "no_sl", "timeout", "pending")
_WORDS = {"unknown": "UNKNOWN", "no_sl": "NOSL", "timeout": "TIMEOUT", "pending": "PENDING"}
_MAX_LOGGED = 10000  # (job, result) pairs remembered for logging each miss once
#: miss lines logged per :data:`MISS_WINDOW_S` at most: 3,000 questions for jobs nobody
#: runs (a script gone wrong, a scan) are 3,000 misses, counted, not 3,000 log lines
MISS_LINES = 10
MISS_WINDOW_S = 60.0


def check_job_id(text: str, where: str = "job id") -> str:
    """Return *text* if it looks like a job id.

    Raises:
        HandoffError: it does not (``where`` names the input).
    """
    if not SPACED_JOB_ID.fullmatch(text):
        raise HandoffError(
            f"{where}: expected a job id (letters, digits, '_.+-', single spaces between"
            f" words, at most 64), got {text!r}"
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
        return f"{_WORDS[self.result]} {self.text}"


class SlBoard:
    """The SLs in force, and the questions waiting for one (thread-safe).

    The agent's loop calls :meth:`publish` after each decision and apply, and
    :meth:`round_done` after it re-read its job source for waiting questions.  Threads may
    call :meth:`ask`, which waits; the server's event loop calls :meth:`open`,
    :meth:`again` and :meth:`expire`, which never wait, and learns of changes through
    :meth:`listen`.

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
        self._planned: frozenset[str] = frozenset()
        self._fresh_at = float("-inf")
        self._asked_at = float("-inf")
        self._waiting = 0
        self._logged: set[tuple[str, str]] = set()
        self._window_end = float("-inf")  # of the current MISS_WINDOW_S
        self._lines = 0  # miss lines logged in it
        self._unlogged: Counter[str] = Counter()  # misses not logged in it, by result
        self._listeners: list[Callable[[], None]] = []
        #: asked before an SL is handed out: False while OpenSM does not run (no SA serves
        #: any SL then); None: not asked (observe mode, dry run, no pid file)
        self.serving: Callable[[], bool] | None = None

    def publish(
        self,
        in_force: Mapping[str, int],
        running: Collection[str],
        planned: Collection[str] = (),
    ) -> None:
        """What OpenSM serves now and what the job source runs.

        Args:
            in_force: job -> SL that OpenSM serves now (applied and verified, or unchanged).
            running: the ids of every job the job source runs (with an SL or not).
            planned: running jobs with an SL in the plan that is not in force yet (the
                apply is pending, failed or deferred): questions for them wait.
        """
        with self._cond:
            self._sl = dict(in_force)
            self._running = frozenset(running)
            self._planned = frozenset(planned) - self._sl.keys()
            self._cond.notify_all()
        self._changed()

    def round_done(self, read_at: float) -> None:
        """The job source was read (a read started at *read_at*) and planned on."""
        with self._cond:
            self._fresh_at = max(self._fresh_at, read_at)
            self._cond.notify_all()
        self._changed()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call *callback* (from the publishing thread) after each publish or round."""
        with self._cond:
            self._listeners.append(callback)

    def unlisten(self, callback: Callable[[], None]) -> None:
        """Stop calling *callback*."""
        with self._cond:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def pending(self) -> bool:
        """True if a question waits for a read of the job source newer than the last."""
        with self._cond:
            return self._waiting > 0 and self._asked_at > self._fresh_at

    def known(self, job_id: str) -> int | None:
        """The job's SL if in force, else None (never waits)."""
        with self._cond:
            return self._sl.get(job_id)

    def ask(self, job_id: str, wait_s: float) -> Answer:
        """The job's SL, waiting up to *wait_s* seconds for a fresh read of the jobs or for
        its planned SL to come into force."""
        asked = self.clock()
        deadline = asked + max(0.0, min(wait_s, MAX_WAIT_S))
        with self._cond:
            answer = self._step(job_id, asked, first=True)
            while answer is None:
                left = deadline - self.clock()
                if left <= 0:
                    answer = self._expire(job_id)
                    break
                self._cond.wait(left)
                answer = self._step(job_id, asked, first=False)
        return answer

    def open(self, job_id: str, asked: float) -> Answer | None:
        """A new question asked at *asked* (board clock): its answer now, or None if it
        must wait (it is then counted as waiting until :meth:`again` answers it or
        :meth:`expire` ends it)."""
        with self._cond:
            return self._step(job_id, asked, first=True)

    def again(self, job_id: str, asked: float) -> Answer | None:
        """A waiting question after a change: its answer now, or None to keep waiting."""
        with self._cond:
            return self._step(job_id, asked, first=False)

    def expire(self, job_id: str) -> Answer:
        """A waiting question whose bound ran out: a "pending" or "timeout" miss."""
        with self._cond:
            return self._expire(job_id)

    def _step(self, job_id: str, asked: float, *, first: bool) -> Answer | None:
        answer = self._answer(job_id, asked)
        if answer is None:
            self._waiting += first
            # only a question about a job the agent does not know needs a read of the
            # jobs; one whose SL is planned waits for the apply, which the loop retries
            if job_id not in self._planned and self._asked_at < asked:
                self._asked_at = asked
                self.wake()
            return None
        self._waiting -= not first
        self._finish(job_id, answer)
        return answer

    def _expire(self, job_id: str) -> Answer:
        self._waiting -= 1
        if job_id in self._planned:
            text = f"the SL of job {job_id} is not in force yet (OpenSM has not taken the plan)"
            answer = Answer("pending", text=text)
        else:
            answer = Answer("timeout", text=f"no SL for job {job_id} in time")
        self._finish(job_id, answer)
        return answer

    def _answer(self, job_id: str, asked: float) -> Answer | None:
        """The answer now, or None to wait (for the job's SL to come into force, or for a
        read of the jobs started after *asked*)."""
        sl = self._sl.get(job_id)
        if sl is not None:
            if self.serving is not None and not self.serving():
                text = f"the SL of job {job_id} is not handed out while OpenSM is down"
                return Answer("pending", text=text)
            return Answer("ok", sl)
        if job_id in self._planned or self._fresh_at < asked:
            return None
        if job_id in self._running:
            return Answer("no_sl", text=f"job {job_id} runs on no host of the fabric")
        return Answer("unknown", text=f"job {job_id} is not running (job source)")

    def _finish(self, job_id: str, answer: Answer) -> None:
        self.counts[answer.result] += 1
        if answer.result == "ok":
            return
        key = (job_id, answer.result)
        if key in self._logged:
            return
        if len(self._logged) >= _MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        self._summarize()
        if self._lines >= MISS_LINES:
            self._unlogged[answer.result] += 1
            return
        self._lines += 1
        log.warning("job-sl: %s; its tasks start on the default SL", answer.text)

    def _summarize(self) -> None:
        """At the end of a window: one line for the misses it did not log; a new window."""
        now = self.clock()
        if now < self._window_end:
            return
        if self._unlogged:
            by_result = ", ".join(f"{n} {r}" for r, n in sorted(self._unlogged.items()))
            log.warning(
                "job-sl: %d more misses in the last %.0f s not logged one by one (%s);"
                " ibqos_job_sl_requests_total counts them all",
                sum(self._unlogged.values()),
                MISS_WINDOW_S,
                by_result,
            )
        self._unlogged.clear()
        self._lines = 0
        self._window_end = now + MISS_WINDOW_S

    def _changed(self) -> None:
        with self._cond:
            if self._unlogged:
                self._summarize()  # the window's summary, even if no miss follows
            listeners = list(self._listeners)
        for callback in listeners:
            callback()


class SlServer:
    """Serves :class:`SlBoard` on a UNIX socket and/or TCP, from one thread.

    Args:
        board: what to answer from.
        socket_path: the UNIX socket (created mode 0666: any user's TaskProlog may ask;
            the answer is no secret); None: none.  The server holds an flock(2) on
            ``<socket_path>.lock`` while it serves, and removes the socket file when it
            closes only if it is still the one it bound.
        listen: (host, port) for TCP; None: none.  Port 0 takes any free port
            (:attr:`tcp_address` has it).
        limits: connections it takes at most, in all and per peer, and how long each may
            take to ask (None: :class:`ibqos.agent.slserve.Limits`' defaults).

    Attributes:
        stats: what the server counts (connections open, refused, timed out; restarts).

    Raises:
        HandoffError: a socket cannot be bound (another ibqos answers there, the address
            is taken, the directory cannot be made).
    """

    def __init__(
        self,
        board: SlBoard,
        socket_path: Path | None,
        listen: tuple[str, int] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.board = board
        self.socket_path = socket_path
        self.limits = limits if limits is not None else Limits()
        self.stats = ServerStats()
        self.tcp_address: tuple[str, int] | None = None
        self._socks: list[socket.socket] = []
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket we made
        self._lock_fd: int | None = None
        self._loop: ServeLoop | None = None
        backlog = listen_backlog()
        try:
            if socket_path is not None:
                self._bind_unix(socket_path, backlog)
            if listen is not None:
                self._bind_tcp(listen, backlog)
        except HandoffError:
            self.close()
            raise
        except OSError as err:
            self.close()
            raise HandoffError(f"agent.socket: cannot serve on {socket_path}: {err}") from err
        raise_fd_limit()
        self._loop = ServeLoop(board, self._socks, self.limits, self.stats)
        board.listen(self.supervise)
        self._loop.start()
        where = [str(socket_path)] if socket_path else []
        if self.tcp_address:
            where.append(f"{self.tcp_address[0]}:{self.tcp_address[1]}")
        log.info(
            "answering job SL questions on %s (backlog %d, at most %d connections, %d per peer)",
            " and ".join(where),
            backlog,
            self.stats.cap,
            self.limits.per_peer,
        )

    def supervise(self) -> None:
        """Tell the loop that the board changed, and start its thread again if it ended
        (it never should: its loop survives errors; called after every publish)."""
        loop = self._loop
        if loop is None:
            return
        if loop.alive():
            loop.poke()
            return
        log.error("job-sl: the server's thread had ended; starting it again")
        loop.stop(0.0)
        try:
            self._loop = ServeLoop(self.board, self._socks, self.limits, self.stats)
        except OSError as err:  # out of descriptors for its wake-up pair: the next time
            log.error("job-sl: cannot start the server again: %s", err)
            return
        self.stats.restarts += 1
        self._loop.start()

    def _bind_unix(self, path: Path, backlog: int) -> None:
        try:
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as err:
            raise HandoffError(f"agent.socket: cannot make {path.parent}: {err.strerror}") from err
        self._lock_fd = _lock_beside(path)
        _clear_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
        except OSError as err:
            sock.close()  # and the path is not ours: close() leaves it alone
            raise HandoffError(f"agent.socket: cannot bind {path}: {err.strerror}") from err
        self._socks.append(sock)
        made = os.lstat(path)
        self._bound = (made.st_dev, made.st_ino)
        # any user's TaskProlog may ask; an SL is no secret
        path.chmod(0o666)
        sock.listen(backlog)

    def _bind_tcp(self, listen: tuple[str, int], backlog: int) -> None:
        host, port = listen
        try:
            sock = socket.create_server(listen, family=_family(host), backlog=backlog)
        except OSError as err:
            raise HandoffError(
                f"agent.sl_listen: cannot listen on {host}:{port}: {err.strerror or err}"
            ) from err
        self._socks.append(sock)
        bound_host, bound_port = sock.getsockname()[:2]
        self.tcp_address = (str(bound_host), int(bound_port))

    def close(self) -> None:
        """Stop serving; remove the socket file if it is still the one this server bound."""
        if self._loop is not None:
            self.board.unlisten(self.supervise)
            self._loop.stop()
            self._loop = None
        for sock in self._socks:
            sock.close()
        self._socks = []
        if self._bound is not None and self.socket_path is not None:
            # another agent may have bound the path since (after a restart, or one that
            # removed ours): its socket is not ours to remove
            with contextlib.suppress(OSError):
                now = os.lstat(self.socket_path)
                if (now.st_dev, now.st_ino) == self._bound:
                    self.socket_path.unlink()
        self._bound = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # after the unlink: the next agent finds the path free
            self._lock_fd = None


def _lock_beside(path: Path) -> int:
    """Hold ``<path>.lock`` (flock): two agents starting at once must not both clear and
    bind the socket.  The file stays (removing it would let two holders in)."""
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise HandoffError(f"agent.socket: cannot open {lock}: {err.strerror}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise HandoffError(f"agent.socket: another ibqos agent answers on {path}") from None
        raise HandoffError(f"agent.socket: cannot lock {lock}: {err.strerror}") from err
    return fd


def _clear_stale(path: Path) -> None:
    """Make way for the socket: remove a dead agent's socket, refuse a live one's.

    Only a refused connection proves that nobody listens; a full queue or a slow agent
    (EAGAIN, a timeout) is a live agent, whose socket stays.
    """
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_socket():
        raise HandoffError(f"agent.socket: {path} exists and is not a socket; not touching it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except FileNotFoundError:
            return  # gone meanwhile
        except ConnectionRefusedError:
            path.unlink()  # nobody listens: left by an agent that died
            return
        except OSError as err:
            why = err.strerror or "no answer within 1 s"
            raise HandoffError(f"agent.socket: {path} is in use ({why}); not removing it") from None
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
            its SL not in force yet, no answer in time).
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
            try:
                conn.sendall(f"SL {quote_job_id(job_id)} {wait:.3f}\n".encode())
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused at once ("ERROR busy"): its reason may be there to read
            reply = _read_line(conn, deadline)
    except TimeoutError as err:
        raise HandoffError(f"no answer from ibqos on {where} within {timeout_s:g} s") from err
    except OSError as err:
        raise HandoffError(f"cannot ask ibqos on {where}") from err
    word, _, rest = reply.partition(" ")
    if word == "OK" and rest.isdigit() and 0 <= int(rest) <= 15:
        return int(rest)
    if word in ("PENDING", "UNKNOWN", "NOSL", "TIMEOUT", "ERROR") and rest:
        raise HandoffError(rest)
    if not reply:
        raise HandoffError(f"ibqos on {where} closed the connection without an answer")
    raise HandoffError(f"ibqos on {where} answered {reply[:60]!r}, not an SL")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _read_line(conn: socket.socket, deadline: float) -> str:
    data = b""
    while b"\n" not in data and len(data) < MAX_LINE:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.settimeout(left)
        chunk = conn.recv(MAX_LINE)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()
