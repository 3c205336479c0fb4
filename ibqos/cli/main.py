"""The ``ibqos`` group under a second import path: ``from ibqos.cli.main import cli`` is
:data:`ibqos.cli.cli`.

It re-exports the group only.  Loading this module makes the package attribute
``ibqos.cli.main`` this module rather than the console-script function, which is why the
entry point and ``python -m ibqos`` import ``main`` from :mod:`ibqos.cli` directly.
"""

from __future__ import annotations

from ibqos.cli import cli

__all__ = ["cli"]
