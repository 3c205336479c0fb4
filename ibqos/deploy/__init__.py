"""Putting ibqos on an SM host and taking its changes back.

- :mod:`~ibqos.deploy.install`: ``ibqos install`` (unit, environment file, config, scripts);
- :mod:`~ibqos.deploy.restore`: ``ibqos restore`` (OpenSM's files without ibqos's lines, checked).

The submodules are imported by name: each holds one command's work, and a function of the
same name, so the package does not hand the functions on (they would hide the modules).
"""

__all__ = ["install", "restore"]
