"""SL hand-off: the board's answers, and the socket protocol over a real UNIX socket and TCP."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ibqos.agent.handoff import Answer, SlBoard, SlServer, ask_sl, check_job_id
from ibqos.errors import HandoffError


def test_a_planned_job_is_answered_at_once() -> None:
    board = SlBoard()
    board.publish({"42": 3}, ["42"])
    assert board.ask("42", 0.0) == Answer("ok", 3)
    assert board.counts["ok"] == 1


def test_a_new_job_waits_for_the_next_read_of_the_jobs() -> None:
    woken = threading.Event()
    board = SlBoard(wake=woken.set)

    def agent_loop() -> None:  # what Agent._answer_questions does
        woken.wait(5)
        read_at = time.monotonic()
        board.publish({"42": 5}, ["42"])
        board.round_done(read_at)

    thread = threading.Thread(target=agent_loop)
    thread.start()
    assert board.ask("42", 5.0) == Answer("ok", 5)
    thread.join()


def test_a_job_the_source_does_not_run_is_unknown_after_a_fresh_read() -> None:
    board = SlBoard()
    board.round_done(time.monotonic() - 10)  # an old read does not answer a new question
    woken = threading.Event()
    board.wake = woken.set
    result: list[Answer] = []
    thread = threading.Thread(target=lambda: result.append(board.ask("7", 5.0)))
    thread.start()
    assert woken.wait(5) and board.pending()
    board.publish({"42": 5}, ["42", "8"])
    board.round_done(time.monotonic())
    thread.join()
    assert result == [Answer("unknown", text="job 7 is not running (job source)")]
    assert not board.pending()
    # a job that runs but has no host on the fabric gets no SL either (once a read of the
    # jobs newer than the question is done; here one stamped ahead of it)
    board.round_done(time.monotonic() + 60)
    assert board.ask("8", 1.0) == Answer("no_sl", text="job 8 runs on no host of the fabric")


def test_no_answer_in_time_is_a_counted_and_logged_miss(caplog) -> None:
    board = SlBoard()
    assert board.ask("9", 0.05).result == "timeout"
    assert board.ask("9", 0.05).result == "timeout"
    assert board.counts == {"ok": 0, "unknown": 0, "no_sl": 0, "timeout": 2, "pending": 0}
    # logged once per job, not once per task asking
    assert caplog.text.count("job-sl: no SL for job 9 in time; its tasks start on the") == 1


@pytest.fixture
def served(tmp_path):
    board = SlBoard()
    board.publish({"42": 4}, ["42"])
    board.round_done(time.monotonic() + 3600)  # every question is about a read already done
    server = SlServer(board, tmp_path / "s.sock", ("127.0.0.1", 0))
    yield board, server, tmp_path / "s.sock"
    server.close()


def test_ask_over_the_socket_and_tcp(served) -> None:
    _, server, path = served
    assert ask_sl("42", 2.0, socket_path=path) == 4
    assert ask_sl("42", 2.0, server=server.tcp_address) == 4
    with pytest.raises(HandoffError, match=r"^job 43 is not running \(job source\)$"):
        ask_sl("43", 2.0, socket_path=path)
    assert oct(path.stat().st_mode & 0o777) == "0o666"  # any user's TaskProlog may ask


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (b"SL 42\n", b"OK 4\n"),
        (b"SL 42 0.5\n", b"OK 4\n"),
        (b"HELLO\n", b"ERROR expected 'SL <job id> [<seconds>]'\n"),
        (b"SL 42 soon\n", b"ERROR bad wait 'soon': expected seconds\n"),
        (b"SL ../etc\n", b"ERROR expected 'SL <job id> [<seconds>]'\n"),
    ],
)
def test_the_protocol(served, line, reply) -> None:
    _, _, path = served
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(str(path))
        conn.sendall(line)
        assert conn.recv(256) == reply


def test_the_socket_file_goes_with_the_server_and_a_stale_one_is_replaced(tmp_path) -> None:
    path = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # bound, never listening: what a killed agent leaves
    stale.close()
    server = SlServer(SlBoard(), path)
    with pytest.raises(HandoffError, match=r"another ibqos agent answers on .*s\.sock"):
        SlServer(SlBoard(), path)
    server.close()
    assert not path.exists()


def test_a_file_in_the_way_is_not_touched(tmp_path) -> None:
    (tmp_path / "s.sock").write_text("mine")
    with pytest.raises(HandoffError, match=r"s\.sock exists and is not a socket; not touching it"):
        SlServer(SlBoard(), tmp_path / "s.sock")
    assert (tmp_path / "s.sock").read_text() == "mine"


def test_nothing_listening_means_ibqos_is_not_running(tmp_path) -> None:
    message = r"^ibqos is not running \(nothing answers on .*x\.sock\)"
    with pytest.raises(HandoffError, match=message):
        ask_sl("1", 1.0, socket_path=tmp_path / "x.sock")


def test_a_silent_agent_is_a_timeout(tmp_path) -> None:
    with socket.socket(socket.AF_UNIX) as mute:
        mute.bind(str(tmp_path / "m.sock"))
        mute.listen()
        t0 = time.monotonic()
        with pytest.raises(HandoffError, match=r"no answer from ibqos on .*m\.sock within 0\.3 s"):
            ask_sl("1", 0.3, socket_path=tmp_path / "m.sock")
        assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize(
    "bad", ["", "a  b", "a b ", " a", "a\tb", 'a "b', "../x", "x" * 65, "x" * 60 + " yyyy", "-1"]
)
def test_job_ids_are_checked(bad) -> None:
    with pytest.raises(HandoffError, match="JOB_ID: expected a job id"):
        check_job_id(bad, "JOB_ID")


@pytest.mark.parametrize("good", ["42", "123+0", "job 7", "a b.c d-e"])
def test_a_job_id_with_single_spaces_is_one(good) -> None:
    assert check_job_id(good) == good


# -- only SLs in force are handed out ---------------------------------------------------


def test_a_planned_sl_is_handed_out_once_it_is_in_force() -> None:
    board = SlBoard()
    board.publish({}, ["42"], planned=["42"])  # planned, the apply still pending
    assert board.known("42") is None
    result: list[Answer] = []
    thread = threading.Thread(target=lambda: result.append(board.ask("42", 5.0)))
    thread.start()
    time.sleep(0.1)
    assert result == [] and not board.pending()  # it waits for the apply, not for a read
    board.publish({"42": 5}, ["42"])  # applied and verified
    thread.join(5)
    assert result == [Answer("ok", 5)]


def test_a_planned_sl_not_in_force_in_time_is_a_pending_miss(caplog) -> None:
    woken = threading.Event()
    board = SlBoard(wake=woken.set)
    board.publish({"1": 2}, ["1", "42"], planned=["42"])  # e.g. the apply failed
    t0 = time.monotonic()
    answer = board.ask("42", 0.2)
    assert time.monotonic() - t0 >= 0.2
    text = "the SL of job 42 is not in force yet (OpenSM has not taken the plan)"
    assert answer == Answer("pending", text=text)
    assert answer.line() == f"PENDING {text}"
    assert board.ask("42", 0.0).result == "pending"
    assert board.counts["pending"] == 2 and board.counts["timeout"] == 0
    assert caplog.text.count(f"job-sl: {text}; its tasks start on the default SL") == 1
    assert not woken.is_set()  # the loop retries the apply on its own; no read needed


def test_an_sl_in_force_wins_over_a_planned_change_and_old_callers_publish_in_force() -> None:
    board = SlBoard()
    board.publish({"7": 3}, ["7"], planned=["7"])
    assert board.ask("7", 0.0) == Answer("ok", 3)
    board.publish({"8": 1}, ["8"])  # planned defaults to none
    assert board.ask("8", 0.0) == Answer("ok", 1)


def test_the_event_loop_side_never_waits() -> None:
    woken = threading.Event()
    board = SlBoard(wake=woken.set)
    changes: list[int] = []
    board.listen(lambda: changes.append(1))
    asked = board.clock()
    assert board.open("5", asked) is None and woken.is_set() and board.pending()
    board.publish({}, ["5"], planned=["5"])
    board.round_done(asked)
    assert board.again("5", asked) is None and not board.pending()  # now waits for the apply
    assert board.expire("5").result == "pending"
    assert changes == [1, 1]
    assert board.open("6", asked + 1) is None
    board.publish({"6": 4}, ["6"])
    assert board.again("6", asked + 1) == Answer("ok", 4)
    assert board.counts["ok"] == 1 and board.counts["pending"] == 1
    assert not board.pending()  # nothing waits any more


def test_a_waiting_question_whose_job_left_the_plan_asks_for_a_read() -> None:
    woken = threading.Event()
    board = SlBoard(wake=woken.set)
    board.publish({}, ["5"], planned=["5"])
    asked = board.clock()
    assert board.open("5", asked) is None and not woken.is_set()
    board.publish({}, [])  # the job ended before its SL came into force
    assert board.again("5", asked) is None and woken.is_set() and board.pending()
    board.round_done(asked)
    assert board.again("5", asked) == Answer("unknown", text="job 5 is not running (job source)")


def test_no_sl_is_handed_out_while_opensm_does_not_run() -> None:
    board = SlBoard()
    board.publish({"7": 3}, ["7"])
    board.round_done(time.monotonic())
    runs = [False]
    board.serving = lambda: runs[0]
    answer = board.ask("7", 0.0)
    assert answer.result == "pending" and "OpenSM is down" in answer.text
    runs[0] = True
    assert board.ask("7", 0.0) == Answer("ok", 3)
