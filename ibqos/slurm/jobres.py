"""The CPUs a job holds on each of its nodes, from ``squeue --json``'s ``job_resources``.

On nodes that several jobs share (OverSubscribe, shared GPU partitions, ``--exclusive``
not given), ibqos splits a host port's traffic among the jobs on it; the CPUs each job
holds there are the best proxy Slurm gives for how much of it is whose (MPI ranks are
CPUs).  Three shapes of the same facts, by Slurm release:

- 21.08 (openapi v0.0.37): ``allocated_nodes`` is an object keyed by the node's index in
  ``job_resources.nodes``, each entry with ``cpus``;
- 22.05 to 23.11 (v0.0.38 to v0.0.40): ``allocated_nodes`` is a list of
  ``{"nodename", "cpus_used", "sockets": {socket: {"cores": {core: state}}}}``.  Recorded
  output (22.05.8 here, 23.02.4 in a public exporter's fixtures) has ``cpus_used`` 0 for
  running jobs, so the allocated cores of ``sockets`` are counted instead;
- 24.05 and later (data_parser v0.0.41 to v0.0.44): ``nodes.allocation`` is a list of
  ``{"name", "cpus": {"count", "used"}, ...}``; ``cpus.count`` is what the job holds.

Anything else (no ``job_resources``, a shape not listed) gives no CPU counts: the job's
share of a shared host is then split equally (:mod:`ibqos.attribute.jobmap`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ibqos.errors import JobsError
from ibqos.jobs.hosts import expand_hosts

__all__ = ["host_cpus", "slurm_int"]

#: a core of ``sockets`` in this state is not the job's (22.05-23.11 shape)
_FREE_CORE = "unassigned"


def host_cpus(resources: object, where: str = "job_resources") -> tuple[tuple[str, int], ...]:
    """(host, CPUs) of every node of a job's ``job_resources`` that says both; () if none.

    Args:
        resources: the ``job_resources`` value of one job entry.
        where: names it in messages (unused today: a shape not understood is not an
            error, the job is kept and its shares are split equally).
    """
    if not isinstance(resources, Mapping):
        return ()
    nodes = resources.get("nodes")
    if isinstance(nodes, Mapping) and isinstance(nodes.get("allocation"), list):
        allocation = _dicts(nodes["allocation"])
        return _pairs((item.get("name"), _count(item.get("cpus"))) for item in allocation)
    allocated = resources.get("allocated_nodes")
    if isinstance(allocated, list):
        return _pairs((item.get("nodename"), _cores(item)) for item in _dicts(allocated))
    if isinstance(allocated, Mapping) and isinstance(nodes, str):
        try:
            names = expand_hosts(nodes, f"{where}: nodes")
        except JobsError:
            return ()
        out = []
        for key, item in allocated.items():
            if isinstance(item, Mapping) and str(key).isdigit() and int(key) < len(names):
                out.append((names[int(key)], slurm_int(item.get("cpus"))))
        return _pairs(out)
    return ()


def _dicts(items: list[object]) -> list[Mapping[str, object]]:
    return [item for item in items if isinstance(item, Mapping)]


def slurm_int(value: object) -> int | None:
    """An integer field of Slurm's JSON: plain (<= 22.05) or ``{"set": true, "infinite":
    false, "number": N}`` (>= 23.02); None when unset, infinite or not an integer."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _count(cpus: object) -> int | None:
    """``cpus.count`` of the 24.05+ shape."""
    return slurm_int(cpus.get("count")) if isinstance(cpus, Mapping) else None


def _cores(item: Mapping[str, object]) -> int | None:
    """CPUs of one 22.05-23.11 node entry: ``cpus_used`` when it is set, else the cores
    of ``sockets`` that are the job's (each core counts once, whatever its threads)."""
    used = slurm_int(item.get("cpus_used"))
    if used:
        return used
    sockets = item.get("sockets")
    if not isinstance(sockets, Mapping):
        return None
    cores = 0
    for socket in sockets.values():
        per_core = socket.get("cores") if isinstance(socket, Mapping) else None
        if isinstance(per_core, Mapping):
            cores += sum(1 for state in per_core.values() if state != _FREE_CORE)
    return cores or None


def _pairs(items: Iterable[tuple[object, int | None]]) -> tuple[tuple[str, int], ...]:
    """The (host, CPUs) pairs with a name and a positive count, each host once."""
    out: dict[str, int] = {}
    for name, cpus in items:
        if isinstance(name, str) and name and isinstance(cpus, int) and cpus > 0:
            out.setdefault(name, cpus)
    return tuple(out.items())
