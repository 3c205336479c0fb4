"""The job-SL server: one event-loop thread, parked questions, bursts, and a socket path
that belongs to whoever bound it."""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from pathlib import Path

import pytest

from ibqos.agent import handoff, slserve
from ibqos.agent.handoff import SlBoard, SlServer, ask_sl
from ibqos.agent.slserve import BACKLOG, listen_backlog, parse_question
from ibqos.errors import HandoffError


def fresh_board(**kwargs) -> SlBoard:
    board = SlBoard()
    board.publish({"42": 4}, ["42"], **kwargs)
    board.round_done(time.monotonic() + 3600)  # every question is about a read already done
    return board


@pytest.fixture
def served(tmp_path):
    board = fresh_board(planned=["77"])
    server = SlServer(board, tmp_path / "s.sock", ("127.0.0.1", 0))
    yield board, server, tmp_path / "s.sock"
    server.close()


def serving_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "ibqos-sl"]


def test_one_thread_serves_both_sockets(served) -> None:
    _, server, path = served
    assert serving_threads() == ["ibqos-sl"]
    assert ask_sl("42", 2.0, socket_path=path) == 4
    assert ask_sl("42", 2.0, server=server.tcp_address) == 4
    server.close()
    assert serving_threads() == []
    assert not path.exists()


def test_a_pending_sl_is_a_miss_for_the_asker(served) -> None:
    board, server, _ = served
    t0 = time.monotonic()
    with pytest.raises(HandoffError, match=r"^the SL of job 77 is not in force yet \(OpenSM"):
        ask_sl("77", 0.5, server=server.tcp_address)
    assert 0.3 < time.monotonic() - t0 < 2.0  # it waited for the apply, within the bound
    assert board.counts["pending"] == 1


def test_a_parked_question_is_answered_when_the_sl_comes_into_force(served) -> None:
    board, _, path = served
    threading.Timer(0.3, lambda: board.publish({"42": 4, "77": 6}, ["42", "77"])).start()
    t0 = time.monotonic()
    assert ask_sl("77", 5.0, socket_path=path) == 6
    assert 0.2 < time.monotonic() - t0 < 2.0


def test_a_question_for_a_new_job_wakes_the_loop_and_waits_for_its_read(tmp_path) -> None:
    woken = threading.Event()
    board = SlBoard(wake=woken.set)

    def agent_loop() -> None:
        woken.wait(5)
        read_at = time.monotonic()
        board.publish({}, ["43"], planned=["43"])  # read and planned; the apply follows
        board.round_done(read_at)
        time.sleep(0.2)
        board.publish({"43": 2}, ["43"])

    server = SlServer(board, tmp_path / "s.sock")
    try:
        thread = threading.Thread(target=agent_loop)
        thread.start()
        assert ask_sl("43", 5.0, socket_path=tmp_path / "s.sock") == 2
        thread.join()
        with pytest.raises(HandoffError, match=r"^job 44 is not running \(job source\)$"):
            board.round_done(time.monotonic() + 60)
            ask_sl("44", 2.0, socket_path=tmp_path / "s.sock")
    finally:
        server.close()


def test_parked_questions_get_their_miss_when_the_server_stops(tmp_path) -> None:
    board = fresh_board(planned=["77"])
    server = SlServer(board, tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(str(tmp_path / "s.sock"))
        conn.sendall(b"SL 77 20\n")
        time.sleep(0.2)  # parked
        t0 = time.monotonic()
        server.close()
        assert conn.recv(256).startswith(b"PENDING the SL of job 77 is not in force yet")
        assert time.monotonic() - t0 < 2.0
    assert board.counts["pending"] == 1


def test_a_half_closed_question_and_an_overlong_line(served) -> None:
    _, _, path = served
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(str(path))
        conn.sendall(b"SL 42")
        conn.shutdown(socket.SHUT_WR)  # e.g. nc -N: the question ends with the stream
        assert conn.recv(256) == b"OK 4\n"
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(str(path))
        conn.sendall(b"SL " + b"9" * 400)
        assert conn.recv(256) == b"ERROR expected 'SL <job id> [<seconds>]'\n"


def test_a_silent_asker_is_dropped(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(slserve, "_IO_TIMEOUT_S", 0.2)
    server = SlServer(fresh_board(), tmp_path / "s.sock")
    try:
        with socket.socket(socket.AF_UNIX) as mute:
            mute.settimeout(5)
            mute.connect(str(tmp_path / "s.sock"))
            t0 = time.monotonic()
            assert mute.recv(256) == b""  # closed without a question
            assert time.monotonic() - t0 < 2.0
        assert ask_sl("42", 2.0, socket_path=tmp_path / "s.sock") == 4  # still serving
    finally:
        server.close()


def test_a_burst_of_questions_is_answered_at_once(served) -> None:
    """500 askers connect at once (non-blocking, as many TaskPrologs do): every one gets
    its answer, and well within the TaskProlog's 3 s."""
    _, server, _ = served
    sel = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    took: list[float] = []
    for _ in range(500):
        conn = socket.socket(socket.AF_INET)
        conn.setblocking(False)
        started[conn] = time.monotonic()
        assert conn.connect_ex(server.tcp_address) in (0, errno.EINPROGRESS)
        sel.register(conn, selectors.EVENT_WRITE)
    replies: list[bytes] = []
    end = time.monotonic() + 10
    while sel.get_map() and time.monotonic() < end:
        for key, mask in sel.select(1.0):
            conn = key.fileobj
            if mask & selectors.EVENT_WRITE:
                conn.send(b"SL 42 2.9\n")
                sel.modify(conn, selectors.EVENT_READ)
            else:
                replies.append(conn.recv(64))
                took.append(time.monotonic() - started[conn])
                sel.unregister(conn)
                conn.close()
    sel.close()
    for conn in started:
        conn.close()
    assert replies == [b"OK 4\n"] * 500
    assert max(took) < 3.0


def test_the_listen_queue_takes_a_burst() -> None:
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert listen_backlog() == min(BACKLOG, somaxconn) and BACKLOG == 65535


def test_out_of_file_descriptors_the_server_waits_and_goes_on(tmp_path, caplog) -> None:
    class Starved(socket.socket):
        """A listener whose first accept finds the process out of file descriptors."""

        failed = False

        def accept(self):
            if not Starved.failed:
                Starved.failed = True
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    listener = Starved(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "l.sock"))
    listener.listen(16)
    loop = slserve.ServeLoop(fresh_board(), [listener])
    loop.start()
    try:
        assert ask_sl("42", 3.0, socket_path=tmp_path / "l.sock") == 4
        assert Starved.failed
        assert "job-sl: cannot take more connections (Too many open files" in caplog.text
    finally:
        loop.stop()
        listener.close()


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("SL 42", ("42", 5.0)),
        ("SL 42 0.25", ("42", 0.25)),
        ("SL 42 3600", ("42", 30.0)),
        ("SL 42 -1", ("42", 0.0)),
        ("SL 42 nan", ("42", 0.0)),
        ("SL 42 x", "ERROR bad wait 'x': expected seconds"),
        ("GET /", "ERROR expected 'SL <job id> [<seconds>]'"),
    ],
)
def test_questions_are_parsed(line, parsed) -> None:
    assert parse_question(line) == parsed


# -- the socket path belongs to whoever bound it -----------------------------------------


def test_a_second_agent_leaves_the_first_ones_socket_alone(tmp_path, caplog) -> None:
    path = tmp_path / "s.sock"
    first = SlServer(fresh_board(), path)
    try:
        for _ in range(2):
            with pytest.raises(HandoffError, match=r"another ibqos agent answers on .*s\.sock"):
                SlServer(SlBoard(), path)
        assert path.is_socket()
        assert ask_sl("42", 2.0, socket_path=path) == 4
    finally:
        first.close()
    assert not path.exists()


def test_an_agent_without_the_lock_keeps_its_socket(tmp_path) -> None:
    """A live socket whose owner holds no lock (an older agent) is probed, not removed."""
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen(1)
        with pytest.raises(HandoffError, match=r"another ibqos agent answers on .*s\.sock"):
            SlServer(SlBoard(), path)
        assert path.is_socket()


def test_a_live_socket_with_a_full_queue_is_not_taken_for_a_dead_one(tmp_path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as busy:
        busy.bind(str(path))
        busy.listen(0)
        queued = []
        for _ in range(8):  # fill its queue: a connect now gets EAGAIN, not ECONNREFUSED
            conn = socket.socket(socket.AF_UNIX)
            conn.setblocking(False)
            queued.append(conn)
            if conn.connect_ex(str(path)) == errno.EAGAIN:
                break
        try:
            with pytest.raises(HandoffError, match=r"s\.sock is in use \(.*\); not removing it"):
                SlServer(SlBoard(), path)
            assert path.is_socket()
        finally:
            for conn in queued:
                conn.close()


def test_a_socket_bound_by_someone_else_since_is_not_removed(tmp_path) -> None:
    path = tmp_path / "s.sock"
    server = SlServer(fresh_board(), path)
    path.unlink()  # e.g. removed by hand, and another process bound the path since
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        theirs = path.stat().st_ino
        server.close()
        assert path.is_socket() and path.stat().st_ino == theirs


def test_a_taken_tcp_port_leaves_the_unix_socket_clean(tmp_path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(
            HandoffError, match=rf"agent.sl_listen: cannot listen on 127.0.0.1:{port}"
        ):
            SlServer(SlBoard(), tmp_path / "s.sock", ("127.0.0.1", port))
    assert not (tmp_path / "s.sock").exists()
    assert serving_threads() == []


def test_a_failed_bind_removes_nothing(tmp_path, monkeypatch) -> None:
    """A bind refused (here: an older agent's live socket, the probe skipped) leaves the
    path to whoever holds it: the failed server never removes what it did not bind."""
    monkeypatch.setattr(handoff, "_clear_stale", lambda path: None)
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen(1)
        theirs = path.stat().st_ino
        with pytest.raises(HandoffError, match=r"cannot bind .*s\.sock: Address already in use"):
            SlServer(SlBoard(), path)
        assert path.is_socket() and path.stat().st_ino == theirs


@pytest.fixture(autouse=True)
def _no_stray_servers(caplog):
    caplog.set_level(logging.INFO)
    yield
    assert serving_threads() == []
