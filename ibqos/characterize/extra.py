"""The libraries of the ``characterize`` extra (``pip install 'ibqos[characterize]'``):
matplotlib for the plots, otf2 for Score-P traces.

The agent needs neither, so an install for an SM host may leave them out.  The modules
that need one import it through :func:`extra_module` where they use it, which turns its
absence into one line that says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ibqos.errors import ExtraMissing

#: the extra that brings them
EXTRA = "characterize"


def extra_module(name: str, needed_for: str) -> ModuleType:
    """Import the extra's library *name* (``"matplotlib"``, ``"otf2"``).

    Args:
        name: the module.
        needed_for: what needs it, for the message (``"the plots"``).

    Raises:
        ExtraMissing: it is not installed.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        raise ExtraMissing(f"{needed_for} need {name}: pip install 'ibqos[{EXTRA}]'") from None
