"""The fabric a command is given on its command line: a fat tree to build (``--xgft
SPEC``, :mod:`ibqos.fabric.xgft`) or a recorded one (``--topology FILE``), one of the two.

``ibqos lab up``, ``ibqos simulate`` and ``ibqos characterize`` take their fabric so;
each builds what it needs from the answer (a lab's topology, the simulator's network, a
characterization's fabric), and words what it takes in the error: ``simulate`` also
needs the routes of a recorded fabric (``--lfts``).
"""

from __future__ import annotations

from pathlib import Path

from ibqos.errors import FabricChoiceError, TopologyError
from ibqos.fabric.xgft import XgftSpec, parse_xgft


def given_fabric(
    xgft: str | None,
    topology: Path | None,
    wanted: str,
    *,
    category: str = TopologyError.category,
) -> XgftSpec | Path:
    """The fat tree ``--xgft`` asks for, parsed, or the file ``--topology`` names (unread).

    Args:
        xgft: the ``--xgft`` value, if given.
        topology: the ``--topology`` value, if given.
        wanted: what the command takes, for the error (``give <wanted>``).
        category: the error's category, as the command's other input errors say it.

    Raises:
        FabricChoiceError: neither or both given.
        TopologyError: a bad XGFT spec.
    """
    if (xgft is None) == (topology is None):
        raise FabricChoiceError(f"give {wanted}", category=category)
    if xgft is not None:
        return parse_xgft(xgft)
    assert topology is not None
    return topology
