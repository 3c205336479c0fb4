"""How much ``ibqos`` logs, and the global options that set it.

A one-shot command (``plan``, ``collect --once``, ``run --once``, ``lab up``, ...) prints
its result and logs warnings and errors only: its INFO lines would bury the answer.  The
daemon, ``ibqos run`` without ``--once``, logs INFO: one line per state change is what an
admin reads in the journal.  ``-v`` raises any command to INFO, ``--debug`` to DEBUG (and
turns unexpected errors into tracebacks).

``--debug`` and ``-v`` are the root group's options, and every command and group takes them
too, so ``ibqos plan --debug`` means ``ibqos --debug plan``.  A command that hands its
arguments to another program (``lab run NAME -- CMD``) does not take them: every option
after its name belongs to that program (``ibqos --debug lab run ...`` debugs ibqos).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

log = logging.getLogger(__name__)

#: journald adds the time stamps
FORMAT = "%(levelname)s %(name)s: %(message)s"
#: ``ctx.obj`` keys
DEBUG, VERBOSE, DAEMON = "debug", "verbose", "daemon"


class _StderrHandler(logging.Handler):
    """Writes each record to the ``sys.stderr`` of the moment (not the one at start), so
    output captured around one command (click's test runner) gets its own log lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # logging must never end the program; report the record and go on
            self.handleError(record)


def start(ctx: click.Context, debug: bool, verbose: bool) -> None:
    """Set up logging for one invocation of the root group: a stderr handler on the root
    logger at the level the options ask, both undone when the invocation ends."""
    ctx.obj = {DEBUG: debug, VERBOSE: verbose, DAEMON: False}
    root = logging.root
    before = root.level
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(before)

    ctx.call_on_close(restore)
    _apply(ctx.obj)


def serving() -> None:
    """The command runs as a daemon: log INFO unless more was asked."""
    obj = _state()
    if obj is not None:
        obj[DAEMON] = True
        _apply(obj)


def level(obj: dict[str, Any]) -> int:
    """The log level *obj* (the root context's ``obj``) asks for."""
    if obj.get(DEBUG):
        return logging.DEBUG
    if obj.get(VERBOSE) or obj.get(DAEMON):
        return logging.INFO
    return logging.WARNING


def _apply(obj: dict[str, Any]) -> None:
    logging.root.setLevel(level(obj))


def _state() -> dict[str, Any] | None:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    obj = ctx.find_root().obj
    return obj if isinstance(obj, dict) else None


def _set(key: str) -> Any:
    """An option callback that turns *key* on when the flag is given after a command."""

    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        obj = ctx.find_root().obj
        if value and isinstance(obj, dict):
            obj[key] = True
            _apply(obj)

    return callback


DEBUG_HELP = "Log at debug level; tracebacks on errors."
VERBOSE_HELP = "Log at info level (otherwise only the daemon, ibqos run, does)."


def add_global_options(command: click.Command) -> None:
    """Give *command* (and, for a group, every command under it) ``--debug`` and ``-v``."""
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    passes_on = command.context_settings.get("ignore_unknown_options", False)
    if not passes_on and not {"--debug", "-v", "--verbose"} & names:
        command.params += [
            click.Option(
                ["--debug"],
                is_flag=True,
                expose_value=False,
                callback=_set(DEBUG),
                help=DEBUG_HELP,
            ),
            click.Option(
                ["-v", "--verbose"],
                is_flag=True,
                expose_value=False,
                callback=_set(VERBOSE),
                help=VERBOSE_HELP,
            ),
        ]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)
