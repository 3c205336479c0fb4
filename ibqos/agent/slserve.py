"""The job-SL server's event loop: one thread, one selector, no thread per question.

A big job's start is a burst of questions (every task's TaskProlog may ask at once), so the
loop never blocks on one asker: it accepts in batches from listen queues as long as the
kernel allows (``net.core.somaxconn``), reads each question line, answers a job whose SL is known at
once, and parks a question that must wait (for a read of the jobs, or for the job's SL to
come into force) until the board changes (:meth:`ServeLoop.poke`, from the agent's loop)
or the asker's bound runs out.  A parked question holds only its socket.

No asker can take the agent down (docs/reliability.md): connections are bounded per peer
(a UNIX socket's peer is its user, from ``SO_PEERCRED``; TCP's is its address) and in all
(:class:`Limits`), the whole never near the process's limit of open files, so that a cycle
always finds the descriptors it needs; a connection that sends no whole question in time is
closed.  An error in one connection closes that connection, an unexpected one restarts the
loop, and the server's owner restarts a thread that ended anyway
(:meth:`ibqos.agent.handoff.SlServer.supervise`); :class:`ServerStats` counts all of it.

The protocol is in :mod:`ibqos.agent.handoff`, which owns the sockets and the board.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import itertools
import logging
import re
import resource
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ibqos.metrics.slserver import SlServerHealth

log = logging.getLogger(__name__)

__all__ = ["BACKLOG", "JOB_ID", "MAX_LINE", "MAX_WAIT_S", "ServeLoop", "listen_backlog"]
__all__ += ["FD_RESERVE", "SPACED_JOB_ID", "Limits", "ServerStats", "connection_cap"]
__all__ += ["parse_question", "quote_job_id", "raise_fd_limit"]

#: job ids as schedulers write them (Slurm: digits; files: any short token), sent bare
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
#: job ids with single spaces between words too (a job file's ``job 7``), at most 64
#: characters; one with a space is sent in double quotes (:func:`quote_job_id`)
SPACED_JOB_ID = re.compile(r"(?=[^\n]{1,64}\Z)[A-Za-z0-9][A-Za-z0-9_.+-]*(?: [A-Za-z0-9_.+-]+)*")
#: the question: ``SL <id> [<seconds>]``, the id bare or in double quotes
_QUESTION = re.compile(r'SL[ \t]+(?:"(?P<quoted>[^"]*)"|(?P<bare>[^\s"]+))(?:[ \t]+(?P<wait>\S+))?')
#: seconds the server waits at most, whatever the asker says it would
MAX_WAIT_S = 30.0
#: seconds the server waits when the asker gives no bound
DEFAULT_WAIT_S = 5.0
#: bytes of a question line, at most
MAX_LINE = 256
#: connections the kernel may queue for accept, asked for; the kernel caps it at
#: net.core.somaxconn (4096 by default since Linux 5.4).  socketserver's default of 5
#: drops a burst's connections, and each dropped TCP SYN costs its asker 1 s or more
BACKLOG = 65535
#: open files the agent asks for (soft limit, up to the hard one): one per parked question
FD_LIMIT = 65536
#: open files the SL server leaves to the rest of the agent: a cycle reads and writes
#: OpenSM's files and their backups, runs squeue/saquery (3 pipes each), holds its MAD
#: device, its locks, its log and the metrics endpoint's connections; ~40 at most on the lab
FD_RESERVE = 128
#: seconds a connection may take to send its question (or to take its answer), by default
_IO_TIMEOUT_S = 5.0
#: connections at once, in all and per peer (user or address), by default (as the
#: defaults of agent.sl_max_connections and agent.sl_max_per_peer)
MAX_CONNECTIONS = 65536
MAX_PER_PEER = 4096
#: connections accepted per turn, so that answers go out during a burst
_ACCEPT_BATCH = 512
#: seconds to stop accepting when out of file descriptors (the kernel queues meanwhile)
_PAUSE_S = 0.1
#: seconds between two log lines about connections refused or errors (counted meanwhile)
_LOG_EVERY_S = 60.0
#: seconds the loop waits before serving again after an unexpected error
_RESTART_S = 1.0
_UCRED = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
_EXPECTED = "ERROR expected 'SL <job id> [<seconds>]'"


def quote_job_id(job_id: str) -> str:
    """*job_id* as a question carries it: bare, or in double quotes if it has a space (an
    agent older than quoting answers those with ``ERROR``, never for another job)."""
    return job_id if JOB_ID.fullmatch(job_id) else f'"{job_id}"'


def parse_question(line: str) -> tuple[str, float] | str:
    """A question line as (job id, seconds the server may wait), or the ``ERROR`` reply.

    The id is bare (``SL 42 2.5``) or, when it has spaces, in double quotes
    (``SL "job 7" 2.5``).  A bare id is one word: ``SL job 7`` still asks for job ``job``,
    waiting 7 s, as it always did.
    """
    match = _QUESTION.fullmatch(line.strip())
    if match is None:
        return _EXPECTED
    quoted = match["quoted"] is not None
    job = match["quoted"] if quoted else match["bare"]
    if not (SPACED_JOB_ID if quoted else JOB_ID).fullmatch(job):
        return _EXPECTED
    wait = DEFAULT_WAIT_S
    if match["wait"] is not None:
        try:
            wait = float(match["wait"])
        except ValueError:
            return f"ERROR bad wait {match['wait'][:20]!r}: expected seconds"
    if wait != wait:  # NaN: min() and max() would keep it
        wait = 0.0
    return job, max(0.0, min(wait, MAX_WAIT_S))


def listen_backlog() -> int:
    """:data:`BACKLOG`, or ``net.core.somaxconn`` if lower (the kernel would cap it)."""
    try:
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        somaxconn = socket.SOMAXCONN
    return max(1, min(BACKLOG, somaxconn))


def raise_fd_limit() -> None:
    """Raise the soft limit of open files to :data:`FD_LIMIT` (at most the hard limit):
    systemd's default soft limit of 1024 would refuse a burst's parked questions."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FD_LIMIT if hard == resource.RLIM_INFINITY else min(hard, FD_LIMIT)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            log.debug("open files: soft limit raised from %d to %d", soft, want)


def connection_cap(wanted: int) -> int:
    """Connections the server may hold at once: *wanted*, but never so many that the
    process's soft limit of open files has less than :data:`FD_RESERVE` left (or half of
    it, under a very low limit): the cycle must find the descriptors it needs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, max(soft - FD_RESERVE, soft // 2)))


@dataclass(frozen=True)
class Limits:
    """What one server takes at most (``agent.sl_*``, docs/slurm.md).

    Attributes:
        total: connections at once, in all (capped by :func:`connection_cap`).
        per_peer: connections at once from one peer: one user on the UNIX socket, one
            address over TCP.
        idle_s: seconds a connection may take to send its whole question (or to take its
            answer); then it is closed.
    """

    total: int = MAX_CONNECTIONS
    per_peer: int = MAX_PER_PEER
    idle_s: float = field(default_factory=lambda: _IO_TIMEOUT_S)


#: what the server counts since the agent started (only the server's threads write it; the
#: metrics' scrape reads a copy: :meth:`ibqos.agent.parts.SlService.health`)
ServerStats = SlServerHealth


class _Throttle:
    """Logs a kind of event once per :data:`_LOG_EVERY_S`, with how many came meanwhile."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._next: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def warn(self, kind: str, message: str, *args: object, exc: bool = False) -> None:
        now = self._clock()
        if now < self._next.get(kind, float("-inf")):
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            return
        self._next[kind] = now + _LOG_EVERY_S
        more = self._quiet.pop(kind, 0)
        if more:
            message += f" ({more} more since the last such line)"
        log.warning(message, *args, exc_info=exc)


class Reply(Protocol):
    """An answer of the board."""

    def line(self) -> str:
        """The reply line (without the newline)."""
        ...


class Board(Protocol):
    """What the loop answers from (:class:`ibqos.agent.handoff.SlBoard`); never waits."""

    clock: Callable[[], float]

    def open(self, job_id: str, asked: float) -> Reply | None:
        """A new question's answer, or None: it waits."""
        ...

    def again(self, job_id: str, asked: float) -> Reply | None:
        """A waiting question's answer after a change, or None: it keeps waiting."""
        ...

    def expire(self, job_id: str) -> Reply:
        """A waiting question whose bound ran out."""
        ...


@dataclass(eq=False)
class _Conn:
    """One asker's connection.  ``due`` (board clock): when it is dropped (no question or
    answer taken in time) or, while parked, when its question expires."""

    sock: socket.socket
    due: float
    peer: object = None
    buf: bytes = b""
    job: str = ""
    asked: float = 0.0
    out: bytes = b""
    registered: bool = False
    writing: bool = False
    closed: bool = False


class ServeLoop:
    """Answers questions on *listeners* from *board*, in a thread of its own.

    The listeners stay the caller's (it binds and closes them); the loop only accepts.

    Args:
        board: what to answer from.
        listeners: the bound, listening sockets.
        limits: what it takes at most (None: the defaults).
        stats: where it counts (shared with the loop it replaces, if any).
    """

    def __init__(
        self,
        board: Board,
        listeners: list[socket.socket],
        limits: Limits | None = None,
        stats: ServerStats | None = None,
    ) -> None:
        self.board = board
        self.limits = limits if limits is not None else Limits()
        self.stats = stats if stats is not None else ServerStats()
        self.stats.cap = connection_cap(self.limits.total)
        self._listeners = listeners
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        for lst in listeners:
            lst.setblocking(False)
        self._accepting = False
        self._listen(True)
        self._open: set[_Conn] = set()
        self._parked: set[_Conn] = set()
        self._peers: dict[object, int] = {}
        self._timers: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._paused_until: float | None = None
        self._warned_fds = False
        self._throttle = _Throttle(board.clock)
        self._stop = False
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ibqos-sl", daemon=True)

    def start(self) -> None:
        """Start serving."""
        self.stats.up = True
        self._thread.start()

    def alive(self) -> bool:
        """Whether its thread runs (or has not started yet)."""
        return self._thread.ident is None or self._thread.is_alive()

    def poke(self) -> None:
        """The board changed: look at the parked questions again (any thread)."""
        with contextlib.suppress(OSError):  # full: a wake-up is on its way already
            self._wake_w.send(b"\0")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving: parked questions get their miss, connections close."""
        self._stop = True
        self._halt.set()
        self.poke()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run(self) -> None:
        try:
            while not self._stop:
                try:
                    self._serve()
                except Exception:  # a bug: askers get EOF at once, and serving goes on
                    self.stats.restarts += 1
                    self._throttle.warn(
                        "loop", "job-sl: the server restarts after an unexpected error", exc=True
                    )
                    self._wind_up()
                    self._halt.wait(_RESTART_S)
        finally:
            self.stats.up = False
            self._wind_up()

    def _serve(self) -> None:
        while not self._stop:
            changed = False
            for key, mask in self._sel.select(self._timeout()):
                if key.data is None:
                    self._drain()
                    changed = True
                elif isinstance(key.data, socket.socket):
                    self._accept(key.data)
                else:
                    conn = key.data
                    try:
                        self._ready(conn, mask)
                    except Exception:  # this connection's, not the server's
                        self._throttle.warn(
                            "conn", "job-sl: a connection failed unexpectedly", exc=True
                        )
                        self._close(conn)
            if changed:
                self._recheck()
            self._due()

    def _timeout(self) -> float | None:
        when = self._timers[0][0] if self._timers else None
        if self._paused_until is not None:
            when = self._paused_until if when is None else min(when, self._paused_until)
        return None if when is None else max(0.0, when - self.board.clock())

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    def _listen(self, on: bool) -> None:
        """Accept (the listeners in the selector) or not (askers wait in the kernel's
        queue, which costs the process no file descriptor)."""
        if on == self._accepting:
            return
        self._accepting = on
        for lst in self._listeners:
            with contextlib.suppress(KeyError, ValueError, OSError):
                if on:
                    self._sel.register(lst, selectors.EVENT_READ, lst)
                else:
                    self._sel.unregister(lst)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, addr = listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(err)
                    return
                continue  # this asker gave up (ECONNABORTED): the next one
            try:
                self._take(sock, addr)
            except Exception:  # e.g. EINVAL from setblocking: this asker only
                self._throttle.warn("take", "job-sl: a new connection failed", exc=True)
                with contextlib.suppress(OSError):
                    sock.close()

    def _take(self, sock: socket.socket, addr: object) -> None:
        """A new connection: refused if its peer or the server is at the limit, else read."""
        peer = _peer(sock, addr)
        held = self._peers.get(peer, 0)
        why = ""
        if len(self._open) >= self.stats.cap:
            why = "total"
        elif held >= self.limits.per_peer:
            why = "peer"
        if why:
            self.stats.refused[why] += 1
            self._throttle.warn(
                why,
                "job-sl: refusing connections (%s): %d open, %d from this peer",
                "the server's limit" if why == "total" else "agent.sl_max_per_peer",
                len(self._open),
                held,
            )
            with contextlib.suppress(OSError):
                sock.send(b"ERROR busy: too many connections, ask again later\n", _DONTWAIT)
            sock.close()
            return
        conn = _Conn(sock, self.board.clock() + self.limits.idle_s, peer)
        self._open.add(conn)
        self._peers[peer] = held + 1
        self.stats.open = len(self._open)
        try:
            sock.setblocking(False)
            # the question usually came with the connection: a known job's asker is then
            # answered and gone without the selector ever seeing its socket
            self._read(conn)
        except Exception:
            self._close(conn)
            raise

    def _pause(self, err: OSError) -> None:
        """Out of file descriptors: leave the askers in the kernel's queue for a moment."""
        self._listen(False)
        self._paused_until = self.board.clock() + _PAUSE_S
        self.stats.fd_pauses += 1
        if not self._warned_fds:
            self._warned_fds = True
            log.warning(
                "job-sl: cannot take more connections (%s, %d open); askers wait in the queue",
                err.strerror,
                len(self._open),
            )

    def _ready(self, conn: _Conn, mask: int) -> None:
        if conn.writing:
            self._flush(conn)
        elif mask & selectors.EVENT_READ:
            self._read(conn)

    def _read(self, conn: _Conn) -> None:
        data: bytes | None
        try:
            data = conn.sock.recv(MAX_LINE)
        except BlockingIOError:
            data = None
        except OSError:
            self._close(conn)
            return
        conn.buf += data or b""
        if data is None or (data and b"\n" not in conn.buf and len(conn.buf) < MAX_LINE):
            if not conn.registered:  # more to come
                conn.registered = True
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._timer(conn)
            return
        if not conn.buf:
            self._close(conn)  # gone without a question
            return
        if conn.registered:  # one question per connection
            conn.registered = False
            self._sel.unregister(conn.sock)
        line = conn.buf.split(b"\n", 1)[0][:MAX_LINE].decode("ascii", "replace")
        question = parse_question(line)
        if isinstance(question, str):
            self._reply(conn, question)
            return
        job, wait = question
        asked = self.board.clock()
        answer = self.board.open(job, asked)
        if answer is not None:
            self._reply(conn, answer.line())
            return
        conn.job, conn.asked, conn.due = job, asked, asked + wait
        self._parked.add(conn)
        self._timer(conn)

    def _recheck(self) -> None:
        for conn in list(self._parked):
            answer = self.board.again(conn.job, conn.asked)
            if answer is not None:
                self._parked.discard(conn)
                self._reply(conn, answer.line())

    def _due(self) -> None:
        now = self.board.clock()
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._listen(True)
        while self._timers and self._timers[0][0] <= now:
            when, _, conn = heapq.heappop(self._timers)
            if conn.closed or conn.due != when:
                continue  # answered, or due later
            if conn in self._parked:
                self._parked.discard(conn)
                self._reply(conn, self.board.expire(conn.job).line())
            else:
                self.stats.timed_out += 1
                self._close(conn)  # no question, or the answer not taken, in time

    def _reply(self, conn: _Conn, line: str) -> None:
        conn.out = (line + "\n").encode()
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            sent = 0
        except OSError:  # the asker gave up: nothing to tell
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            self._close(conn)
        elif not conn.writing:
            conn.writing = conn.registered = True
            conn.due = self.board.clock() + self.limits.idle_s
            self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
            self._timer(conn)

    def _timer(self, conn: _Conn) -> None:
        heapq.heappush(self._timers, (conn.due, next(self._seq), conn))

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn in self._open:
            self._open.discard(conn)
            left = self._peers.pop(conn.peer, 1) - 1
            if left > 0:
                self._peers[conn.peer] = left
            self.stats.open = len(self._open)
        self._parked.discard(conn)
        if conn.registered:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _wind_up(self) -> None:
        """Stopping (or restarting): every parked question gets its miss now, every
        connection closes."""
        for conn in list(self._parked):
            line = self.board.expire(conn.job).line()
            with contextlib.suppress(OSError):
                conn.sock.send((line + "\n").encode())
        for conn in list(self._open):
            self._close(conn)
        self._parked.clear()
        self._timers.clear()
        self._peers.clear()
        self.stats.open = 0


_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


def _peer(sock: socket.socket, addr: object) -> object:
    """Who is at the other end: ("uid", n) on a UNIX socket (its user, from SO_PEERCRED),
    ("ip", address) over TCP."""
    if sock.family == socket.AF_UNIX:
        try:
            cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        except OSError:
            return ("uid", None)  # not told: such askers share one bound
        return ("uid", _UCRED.unpack(cred)[1])
    host = addr[0] if isinstance(addr, tuple) and addr else addr
    return ("ip", host)
