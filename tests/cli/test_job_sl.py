"""``ibqos job-sl``: the SL from a running agent; one line and exit 1 when there is none."""

from __future__ import annotations

import logging
import time

import pytest
from click.testing import CliRunner

from ibqos.agent.handoff import SlBoard, SlServer
from ibqos.cli import cli


def invoke(*args):
    return CliRunner().invoke(cli, ["job-sl", *args])


def one_line_error(result, text):
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert text in result.stderr


@pytest.fixture(autouse=True)
def agent_log_elsewhere():
    """The agent is another process: its log lines are not the command's stderr."""
    agent_log = logging.getLogger("ibqos.agent.handoff")
    elsewhere = logging.Filter("not the command's")  # passes no record of this logger
    agent_log.addFilter(elsewhere)
    yield
    agent_log.removeFilter(elsewhere)


@pytest.fixture
def agent(tmp_path):
    """An agent's SL server (the agent's loop is not needed: every read is done)."""
    board = SlBoard()
    board.publish({"1234": 6}, ["1234"])
    board.round_done(time.monotonic() + 3600)
    server = SlServer(board, tmp_path / "a.sock", ("127.0.0.1", 0))
    yield server
    server.close()


def test_prints_the_sl(agent) -> None:
    result = invoke("--socket", str(agent.socket_path), "1234")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "6\n", "")
    host, port = agent.tcp_address
    assert invoke("--server", f"{host}:{port}", "1234").stdout == "6\n"


def test_the_socket_comes_from_the_config(agent, tmp_path) -> None:
    conf = tmp_path / "ibqos.yaml"
    conf.write_text(f"agent:\n  socket: {agent.socket_path}\n")
    assert invoke("--config", str(conf), "1234").stdout == "6\n"


def test_an_unknown_job(agent) -> None:
    result = invoke("--socket", str(agent.socket_path), "99")
    one_line_error(result, "ibqos: job-sl: job 99 is not running (job source)")


def test_ibqos_not_running(tmp_path) -> None:
    result = invoke("--socket", str(tmp_path / "none.sock"), "1234")
    one_line_error(result, "ibqos: job-sl: ibqos is not running (nothing answers on")


def test_a_bad_job_id_names_the_input(tmp_path) -> None:
    result = invoke("--socket", str(tmp_path / "none.sock"), "12;rm")
    one_line_error(result, "ibqos: job-sl: JOB_ID: expected a job id")


def test_bad_server_and_conflicting_options(tmp_path) -> None:
    assert invoke("--server", "nohost", "1").exit_code == 2
    result = invoke("--server", "h:1", "--socket", str(tmp_path / "s"), "1")
    assert result.exit_code == 2 and "at most one of --socket and --server" in result.stderr


def test_an_sl_not_in_force_is_a_miss(tmp_path) -> None:
    board = SlBoard()
    board.publish({}, ["1234"], planned=["1234"])  # planned; OpenSM has not taken it
    board.round_done(time.monotonic() + 3600)
    server = SlServer(board, tmp_path / "a.sock")
    try:
        result = invoke("--socket", str(tmp_path / "a.sock"), "--timeout", "0.3", "1234")
        one_line_error(
            result,
            "ibqos: job-sl: the SL of job 1234 is not in force yet (OpenSM has not taken the plan)",
        )
    finally:
        server.close()
