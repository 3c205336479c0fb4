"""No asker can take the agent down: connections bounded per peer and in all (below the
open-file limit), idle ones closed, errors that close one connection or restart the server,
a thread that ended started again, misses logged at a bounded rate, ids with spaces asked
whole, and every OSError in a cycle a soft failure."""

from __future__ import annotations

import errno
import logging
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ibqos.agent import handoff, slserve
from ibqos.agent.daemon import Agent
from ibqos.agent.handoff import SlBoard, SlServer, ask_sl
from ibqos.agent.parts import SlService
from ibqos.agent.slserve import FD_RESERVE, Limits, connection_cap, parse_question
from ibqos.config.load import load_config
from ibqos.config.models import AgentConfig
from ibqos.errors import HandoffError
from ibqos.metrics.slserver import SlServerHealth, sl_server_families
from tests.support.replay_agent import plan_now, replay_config


def fresh_board() -> SlBoard:
    board = SlBoard()
    board.publish({"42": 4, "job 7": 7, "job": 5}, ["42", "job 7", "job"])
    board.round_done(time.monotonic() + 3600)  # every question is about a read already done
    return board


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    """Factory: a server on ``tmp_path/s.sock`` (and TCP on 127.0.0.1) with *limits*."""
    servers: list[SlServer] = []

    def make(limits: Limits | None = None) -> SlServer:
        server = SlServer(fresh_board(), tmp_path / "s.sock", ("127.0.0.1", 0), limits)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def unfinished(path: Path, count: int) -> list[socket.socket]:
    """*count* connections to *path*, each with a question it never finishes."""
    conns = []
    for _ in range(count):
        conn = socket.socket(socket.AF_UNIX)
        conn.settimeout(5)
        conn.connect(str(path))
        conn.sendall(b"SL 4")
        conns.append(conn)
    return conns


def wait_for(what, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "not in time"
        time.sleep(0.01)


# -- bounded per peer and in all ---------------------------------------------------------


def test_a_peer_beyond_its_limit_is_refused_others_are_served(serve, tmp_path) -> None:
    server = serve(Limits(per_peer=3))
    held = unfinished(tmp_path / "s.sock", 3)
    try:
        wait_for(lambda: server.stats.open == 3)
        with socket.socket(socket.AF_UNIX) as extra:  # the same user: a 4th is refused
            extra.settimeout(5)
            extra.connect(str(tmp_path / "s.sock"))
            assert extra.recv(256) == b"ERROR busy: too many connections, ask again later\n"
        with pytest.raises(HandoffError, match=r"^busy: too many connections"):
            ask_sl("42", 2.0, socket_path=tmp_path / "s.sock")
        assert server.stats.refused == {"peer": 2, "total": 0}
        # another peer (an address over TCP) is served meanwhile
        assert server.tcp_address is not None
        assert ask_sl("42", 2.0, server=server.tcp_address) == 4
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: server.stats.open == 0)
    assert ask_sl("42", 2.0, socket_path=tmp_path / "s.sock") == 4


def test_the_total_limit_is_refused_at_once(serve, tmp_path) -> None:
    server = serve(Limits(total=2))
    held = unfinished(tmp_path / "s.sock", 2)
    try:
        wait_for(lambda: server.stats.open == 2)
        assert server.tcp_address is not None
        with pytest.raises(HandoffError, match=r"^busy"):
            ask_sl("42", 2.0, server=server.tcp_address)
        assert server.stats.refused == {"peer": 0, "total": 1}
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: server.stats.open == 0)
    assert ask_sl("42", 2.0, socket_path=tmp_path / "s.sock") == 4


def test_the_server_leaves_file_descriptors_for_the_cycle(monkeypatch) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for limit, want in ((400, 400 - FD_RESERVE), (1024, 1024 - FD_RESERVE), (200, 100)):
        monkeypatch.setattr(resource, "getrlimit", lambda _, limit=limit: (limit, hard))
        assert connection_cap(65536) == want
        assert connection_cap(10) == 10
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY, hard))
    assert connection_cap(65536) == 65536


def test_an_unfinished_question_is_closed_and_counted(serve, tmp_path) -> None:
    server = serve(Limits(idle_s=0.2))
    (conn,) = unfinished(tmp_path / "s.sock", 1)
    with conn:
        t0 = time.monotonic()
        assert conn.recv(256) == b""
        assert time.monotonic() - t0 < 2.0
    assert server.stats.timed_out == 1 and server.stats.open == 0


def test_more_than_1023_connections_and_a_failing_setblocking(tmp_path, monkeypatch) -> None:
    """Past FD_SETSIZE (1024) the server goes on (epoll), and a connection whose setup
    fails (EINVAL from setblocking) is closed alone: the thread serves on."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * 1100 + 100:
        pytest.fail(f"the test needs 2300 open files, the soft limit is {soft}")

    class Refusing(socket.socket):
        def setblocking(self, flag: bool) -> None:
            raise OSError(errno.EINVAL, "Invalid argument")

    class Picky(socket.socket):
        """A listener whose accepted sockets refuse setblocking, while ``broken``."""

        broken = False

        def accept(self):
            sock, addr = super().accept()
            if Picky.broken:
                sock = Refusing(sock.family, sock.type, fileno=sock.detach())
            return sock, addr

    listener = Picky(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "l.sock"))
    listener.listen(4096)
    loop = slserve.ServeLoop(fresh_board(), [listener])
    loop.start()
    held = []
    try:
        held = unfinished(tmp_path / "l.sock", 1100)
        wait_for(lambda: loop.stats.open == 1100)
        assert max(c.fileno() for c in held) > 1023
        assert ask_sl("42", 3.0, socket_path=tmp_path / "l.sock") == 4
        Picky.broken = True
        with pytest.raises(HandoffError, match=r"ibqos on .*l\.sock"):  # EOF or reset
            ask_sl("42", 3.0, socket_path=tmp_path / "l.sock")
        Picky.broken = False
        assert ask_sl("42", 3.0, socket_path=tmp_path / "l.sock") == 4
        assert loop.alive() and loop.stats.up and loop.stats.restarts == 0
    finally:
        for conn in held:
            conn.close()
        loop.stop()
        listener.close()


def test_an_unexpected_error_restarts_the_loop(serve, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(slserve, "_RESTART_S", 0.05)
    server = serve()
    real_due = slserve.ServeLoop._due
    failed = threading.Event()

    def due_once(self) -> None:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("a bug")
        real_due(self)

    monkeypatch.setattr(slserve.ServeLoop, "_due", due_once)
    server.supervise()  # wakes the loop: its next turn fails
    wait_for(failed.is_set)
    wait_for(lambda: server.stats.restarts == 1)
    assert ask_sl("42", 2.0, socket_path=tmp_path / "s.sock") == 4
    assert server.stats.up
    assert "job-sl: the server restarts after an unexpected error" in caplog.text


# the thread is ended on purpose, by an exception nothing catches
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_ended_is_started_again(serve, tmp_path, monkeypatch) -> None:
    server = serve()

    def end(self) -> None:
        raise SystemExit  # not caught by the loop: the thread ends

    monkeypatch.setattr(slserve.ServeLoop, "_due", end)
    server.supervise()
    # the flag drops in the thread's last steps: wait for the thread itself to end
    wait_for(lambda: not server.stats.up and server._loop is not None and not server._loop.alive())
    monkeypatch.undo()
    health = SlService(lambda: None)
    assert health.health() is None  # not meant to serve
    server.board.publish({"42": 4}, ["42"])  # the next cycle's publish
    assert server.stats.up and server.stats.restarts == 1
    assert ask_sl("42", 2.0, socket_path=tmp_path / "s.sock") == 4


# -- health as metrics -------------------------------------------------------------------


def test_the_servers_health_is_exported(tmp_path) -> None:
    service = SlService(lambda: None)
    service.serve(AgentConfig(socket=tmp_path / "s.sock", sl_idle_s=1.0), observing=False)
    try:
        health = service.health()
        assert health is not None and health.up and health.cap > 0
        names = {m.name: m for m in sl_server_families(health)}
        assert set(names) == {
            "ibqos_sl_server_up",
            "ibqos_sl_connections",
            "ibqos_sl_connections_limit",
            "ibqos_sl_connections_refused",
            "ibqos_sl_connections_timed_out",
            "ibqos_sl_accept_pauses",
            "ibqos_sl_server_restarts",
        }
        assert names["ibqos_sl_server_up"].samples[0].value == 1
        refused = {
            s.labels["reason"]: s.value for s in names["ibqos_sl_connections_refused"].samples
        }
        assert refused == {"peer": 0, "total": 0}
    finally:
        service.close()
    assert service.health() is None
    assert list(sl_server_families(None)) == []
    down = {m.name: m for m in sl_server_families(SlServerHealth(up=False))}
    assert down["ibqos_sl_server_up"].samples[0].value == 0


# -- misses logged at a bounded rate -----------------------------------------------------


def test_misses_for_unknown_ids_are_counted_and_logged_at_a_bounded_rate(caplog) -> None:
    now = [1000.0]
    board = SlBoard(clock=lambda: now[0])
    board.publish({}, [])
    board.round_done(now[0])
    with caplog.at_level(logging.WARNING, logger="ibqos.agent.handoff"):
        for n in range(3000):
            assert board.ask(f"x{n}", 0.0).result == "unknown"
        assert board.counts["unknown"] == 3000
        lines = [r for r in caplog.records if r.name == "ibqos.agent.handoff"]
        assert len(lines) == handoff.MISS_LINES
        now[0] += handoff.MISS_WINDOW_S + 1
        board.round_done(now[0])  # the agent's loop: the window's summary, with no new miss
    lines = [r.getMessage() for r in caplog.records if r.name == "ibqos.agent.handoff"]
    assert len(lines) == handoff.MISS_LINES + 1
    assert lines[-1].startswith(
        f"job-sl: 2990 more misses in the last {handoff.MISS_WINDOW_S:.0f} s"
    )
    assert "(2990 unknown)" in lines[-1]
    caplog.clear()
    assert board.ask("y", 0.0).result == "unknown"  # a new window logs again
    assert "job y is not running" in caplog.text


# -- an id with a space ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ('SL "job 7"', ("job 7", 5.0)),
        ('SL "job 7" 2.5', ("job 7", 2.5)),
        ('SL "42" 1', ("42", 1.0)),
        ("SL job 7", ("job", 7.0)),  # a bare id is one word, as it always was
        ("SL job 7 2.5", "ERROR expected 'SL <job id> [<seconds>]'"),
        ('SL "job  7"', "ERROR expected 'SL <job id> [<seconds>]'"),
        ('SL "job 7', "ERROR expected 'SL <job id> [<seconds>]'"),
        ('SL ""', "ERROR expected 'SL <job id> [<seconds>]'"),
        ('SL "a"b', "ERROR expected 'SL <job id> [<seconds>]'"),
    ],
)
def test_a_quoted_id_is_one(line, parsed) -> None:
    assert parse_question(line) == parsed


def test_an_id_with_a_space_is_asked_whole(serve, tmp_path) -> None:
    server = serve()
    assert ask_sl("job 7", 2.0, socket_path=tmp_path / "s.sock") == 7
    assert server.tcp_address is not None
    assert ask_sl("job 7", 2.0, server=server.tcp_address) == 7
    with socket.socket(socket.AF_UNIX) as conn:  # an old client's bare question
        conn.settimeout(5)
        conn.connect(str(tmp_path / "s.sock"))
        conn.sendall(b"SL job 7\n")
        assert conn.recv(256) == b"OK 5\n"


# -- every OSError in a cycle is a soft failure ------------------------------------------


def test_an_oserror_in_a_cycle_is_a_soft_failure(tmp_path, monkeypatch) -> None:
    path, doc = replay_config(tmp_path)
    doc["opensm"]["reload_command"] = ["sh", "-c", f"echo 'SUBNET UP' >> {tmp_path}/opensm.log"]
    path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(path), path)
    try:

        def starved(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EMFILE, "Too many open files", str(tmp_path / "etc/opensm.conf"))

        monkeypatch.setattr("ibqos.agent.cycle.render_checked", starved)
        assert not plan_now(agent)
        assert not plan_now(agent)
        counters = agent.telemetry.counters
        assert counters.failures == 2
        assert counters.last_error.startswith("system: [Errno 24] Too many open files")
        monkeypatch.undo()
        assert plan_now(agent)  # the next cycle goes on
        assert agent.sl.board.known("A") is not None
    finally:
        agent.close()


def test_a_stop_before_an_apply_began_is_no_failure(tmp_path, caplog) -> None:
    """SIGTERM between a cycle's decision and its apply: nothing is written, and the cycle
    ends without an error line or a failure counted (the next start applies the plan)."""
    path, doc = replay_config(tmp_path)
    doc["opensm"]["reload_command"] = ["sh", "-c", f"echo 'SUBNET UP' >> {tmp_path}/opensm.log"]
    path.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(path), path)
    try:
        agent.request_stop()
        with caplog.at_level(logging.INFO):
            assert not plan_now(agent)
        assert agent.telemetry.counters.failures == 0
        assert "cycle ended: not applied: ibqos is stopping" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        agent.close()
