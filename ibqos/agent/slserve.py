"""The job-SL server's event loop: one thread, one selector, no thread per question.

A big job's start is a burst of questions (every task's TaskProlog may ask at once), so the
loop never blocks on one asker: it accepts in batches from listen queues as long as the
kernel allows (``net.core.somaxconn``), reads each question line, answers a job whose SL is known at
once, and parks a question that must wait (for a read of the jobs, or for the job's SL to
come into force) until the board changes (:meth:`ServeLoop.poke`, from the agent's loop)
or the asker's bound runs out.  A parked question holds only its socket.

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
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

__all__ = ["BACKLOG", "JOB_ID", "MAX_LINE", "MAX_WAIT_S", "ServeLoop", "listen_backlog"]
__all__ += ["parse_question", "raise_fd_limit"]

#: job ids as schedulers write them (Slurm: digits; files: any short token)
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
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
#: seconds a connection may take to send its question (or to take its answer)
_IO_TIMEOUT_S = 5.0
#: connections accepted per turn, so that answers go out during a burst
_ACCEPT_BATCH = 512
#: seconds to stop accepting when out of file descriptors (the kernel queues meanwhile)
_PAUSE_S = 0.1


def parse_question(line: str) -> tuple[str, float] | str:
    """A question line as (job id, seconds the server may wait), or the ``ERROR`` reply."""
    words = line.split()
    if len(words) not in (2, 3) or words[0] != "SL" or not JOB_ID.fullmatch(words[1]):
        return "ERROR expected 'SL <job id> [<seconds>]'"
    wait = DEFAULT_WAIT_S
    if len(words) == 3:
        try:
            wait = float(words[2])
        except ValueError:
            return f"ERROR bad wait {words[2][:20]!r}: expected seconds"
    if wait != wait:  # NaN: min() and max() would keep it
        wait = 0.0
    return words[1], max(0.0, min(wait, MAX_WAIT_S))


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
    """

    def __init__(self, board: Board, listeners: list[socket.socket]) -> None:
        self.board = board
        self._listeners = listeners
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        for lst in listeners:
            lst.setblocking(False)
            self._sel.register(lst, selectors.EVENT_READ, lst)
        self._open: set[_Conn] = set()
        self._parked: set[_Conn] = set()
        self._timers: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._paused_until: float | None = None
        self._warned_fds = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ibqos-sl", daemon=True)

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def poke(self) -> None:
        """The board changed: look at the parked questions again (any thread)."""
        with contextlib.suppress(OSError):  # full: a wake-up is on its way already
            self._wake_w.send(b"\0")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving: parked questions get their miss, connections close."""
        self._stop = True
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
                changed = False
                for key, mask in self._sel.select(self._timeout()):
                    if key.data is None:
                        self._drain()
                        changed = True
                    elif isinstance(key.data, socket.socket):
                        self._accept(key.data)
                    else:
                        self._ready(key.data, mask)
                if changed:
                    self._recheck()
                self._due()
        except Exception:  # a bug must not leave askers hanging: they get EOF at once
            log.exception("job-sl: the server stopped on an unexpected error")
        finally:
            self._wind_up()

    def _timeout(self) -> float | None:
        when = self._timers[0][0] if self._timers else None
        if self._paused_until is not None:
            when = self._paused_until if when is None else min(when, self._paused_until)
        return None if when is None else max(0.0, when - self.board.clock())

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(err)
                    return
                continue  # this asker gave up (ECONNABORTED): the next one
            sock.setblocking(False)
            conn = _Conn(sock, self.board.clock() + _IO_TIMEOUT_S)
            self._open.add(conn)
            # the question usually came with the connection: a known job's asker is then
            # answered and gone without the selector ever seeing its socket
            self._read(conn)

    def _pause(self, err: OSError) -> None:
        """Out of file descriptors: leave the askers in the kernel's queue for a moment."""
        for lst in self._listeners:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(lst)
        self._paused_until = self.board.clock() + _PAUSE_S
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
            for lst in self._listeners:
                self._sel.register(lst, selectors.EVENT_READ, lst)
        while self._timers and self._timers[0][0] <= now:
            when, _, conn = heapq.heappop(self._timers)
            if conn.closed or conn.due != when:
                continue  # answered, or due later
            if conn in self._parked:
                self._parked.discard(conn)
                self._reply(conn, self.board.expire(conn.job).line())
            else:
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
            conn.due = self.board.clock() + _IO_TIMEOUT_S
            self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
            self._timer(conn)

    def _timer(self, conn: _Conn) -> None:
        heapq.heappush(self._timers, (conn.due, next(self._seq), conn))

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._open.discard(conn)
        self._parked.discard(conn)
        if conn.registered:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(conn.sock)
        conn.sock.close()

    def _wind_up(self) -> None:
        """Stopping: every parked question gets its miss now, every connection closes."""
        for conn in list(self._parked):
            line = self.board.expire(conn.job).line()
            with contextlib.suppress(OSError):
                conn.sock.send((line + "\n").encode())
        for conn in list(self._open):
            self._close(conn)
        self._parked.clear()
        self._timers.clear()
