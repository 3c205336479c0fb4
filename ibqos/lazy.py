"""A package's public names, imported the first time one is read (PEP 562).

A package's ``__init__`` hands on names from its modules (``from ibqos.agent import
Agent``).  Imported eagerly, those lines run every module of the package, and the modules
theirs: ``import ibqos.agent.lock`` ran the daemon, the planner, pandas and the simulator
behind it, over a second, for a lock file.  With :func:`attach`, the ``__init__`` names
each public name's module instead, and the module is imported when the name is first
read; until then the package costs a few lines.  A command then pays, at start, for the
modules it uses: ``ibqos job-sl``, run by Slurm's prolog for every job, starts in a
fraction of the time.

The ``__init__`` imports the same names under ``TYPE_CHECKING``, for mypy and for the
reader: those lines say where each name comes from, as the eager imports did::

    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from ibqos.agent.lock import AgentLock, holder
    else:
        __getattr__, __dir__ = attach(__name__, {".lock": ("AgentLock", "holder")})
    __all__ = ["AgentLock", "holder"]
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["attach"]


def attach(
    package: str, names: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of *package* for *names*.

    A name read is imported from its module once, then kept in the package's namespace:
    later reads find it there without a call.

    Args:
        package: the package's ``__name__``.
        names: module (absolute, or relative to *package*, as ``".lock"``) -> the names
            the package hands on from it.
    """
    module_of = {name: module for module, names_ in names.items() for name in names_}

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__
