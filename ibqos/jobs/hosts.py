"""Host lists (``cn[0001-0004],gpu01``, or a list of them): how every job source names the
hosts of a job, in ClusterShell NodeSet syntax without groups or repeats."""

from __future__ import annotations

import re
from collections import Counter

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from ibqos.errors import JobsError

# NodeSet would take "@group" or "a b" as a literal node name; host names never look like that.
_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_TOP_COMMA = re.compile(r",(?![^\[]*\])")  # a comma not inside [...]

#: (index below the checked value: () or (k,) for the k-th list item, message, the
#: exception behind it)
HostProblem = tuple[tuple[int, ...], str, BaseException | None]


def shown(value: object) -> str:
    """*value* for a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def host_list(value: object) -> tuple[tuple[str, ...], list[HostProblem]]:
    """Expand a host list string (or list of them) into hosts in NodeSet order.

    Returns:
        (hosts, problems): the hosts when there are no problems, else ().
    """
    specs = [value] if isinstance(value, str) else value
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        return (), [
            ((), f"expected a host list string or a list of them, got {shown(value)}", None)
        ]
    problems: list[HostProblem] = []
    seen: Counter[str] = Counter()
    for k, spec in enumerate(specs):
        # NodeSet silently merges repeats, so expand each comma item (outside brackets) on its
        # own to catch "a[1-4],a2".  Lists with set operators (! & ^) only make sense whole.
        parts = [spec] if re.search(r"[!&^]", spec) else _TOP_COMMA.split(spec)
        try:
            NodeSet(spec, resolver=RESOLVER_NOGROUP)  # syntax errors as NodeSet reports them
            for part in parts:
                seen.update(NodeSet(part, resolver=RESOLVER_NOGROUP))
        except NodeSetException as err:
            at = (k,) if isinstance(value, list) else ()
            problems.append((at, f"bad host list {spec!r}: {err}", err))
    if problems:
        return (), problems
    bad = [n for n in seen if not _HOST_RE.fullmatch(n)]
    twice = [n for n, count in seen.items() if count > 1]
    if bad:
        message = f"invalid host name {bad[0]!r} (node groups are not supported)"
    elif twice:
        message = f"host {twice[0]} is listed more than once"
    elif not seen:
        message = f"expected at least one host, got {shown(value)}"
    else:
        return tuple(NodeSet.fromlist(list(seen), resolver=RESOLVER_NOGROUP)), []
    return (), [((), message, None)]


def expand_hosts(value: object, where: str) -> tuple[str, ...]:
    """Expand a host list (``cn[0001-0004],gpu01``, or a list of them) as job files do.

    Every job source goes through this one function, so a scheduler's node list and a job
    file's ``nodes`` key mean the same hosts (ClusterShell NodeSet syntax, no groups, no
    repeats).

    Args:
        value: a host list string or a list of them.
        where: names the input in errors (e.g. ``squeue: job 42: nodes``).

    Returns:
        The hosts in NodeSet (sorted) order.

    Raises:
        JobsError: the list does not parse, names a group or a host twice, or is empty;
            one line per problem.
    """
    hosts, problems = host_list(value)
    if not problems:
        return hosts
    error = JobsError(
        "\n".join(f"{where}{''.join(f'[{k}]' for k in at)}: {msg}" for at, msg, _ in problems)
    )
    cause = next((cause for _, _, cause in problems if cause is not None), None)
    raise error from cause
