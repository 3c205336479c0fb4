"""The fabric the configuration's ``fabric`` section names, discovered or read.

Beside :func:`ibqos.collect.routes.route_source` (the same section's forwarding tables):
both are how ibqos comes by what it sweeps and attributes by, whether for the agent, a
one-off ``ibqos plan`` or ``ibqos collect``, or ``ibqos characterize sharing``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ibqos.config.models import Config
from ibqos.fabric.model import Fabric, fabric_from_file, fabric_from_ibnetdiscover


def fabric_from_config(cfg: Config, env: Mapping[str, str] | None = None) -> Fabric:
    """The fabric as the config's ``fabric`` section says: run ibnetdiscover, read a file,
    or read the lab's discovery (``ibnetdiscover.txt`` recorded when the lab came up).

    Args:
        cfg: the configuration (``fabric``, and ``lab`` for ``fabric.source: lab``).
        env: the environment ibnetdiscover runs in (None: this process's).

    Raises:
        TopologyError: the file cannot be read, ibnetdiscover cannot run, fails or runs
            past ``fabric.discover_timeout_s``, or what they give is not a fat tree.
    """
    fc = cfg.fabric
    roots = fc.root_guids or None
    if fc.source == "file":
        assert fc.path is not None  # checked by the config
        return fabric_from_file(fc.path, root_guids=roots)
    if fc.source == "lab":
        assert cfg.lab is not None  # checked by the config
        return fabric_from_file(cfg.lab.discovered, root_guids=roots)
    return fabric_from_ibnetdiscover(env=env, timeout=fc.discover_timeout_s, root_guids=roots)
