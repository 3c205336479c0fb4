"""Putting ibqos on an SM host and taking its changes back.

- :mod:`~ibqos.deploy.install`: ``ibqos install`` (unit, environment file, config, scripts);
- :mod:`~ibqos.deploy.restore`: ``ibqos restore`` (OpenSM's files as they were before ibqos).
"""

from ibqos.deploy.install import install
from ibqos.deploy.restore import restore

__all__ = ["install", "restore"]
