"""A YAML job file cut into its jobs' texts, so that a changed file is parsed job by job.

Parsing YAML is what a big job file costs: 100k jobs take seconds even with libyaml, and
a scheduler changes such a file by a job or two at a time.  A job file in block style,

.. code-block:: yaml

    jobs:
      - id: "1"
        nodes: cn[0001-0004]
      - id: "2"
        ...

is cut into the text of each item of ``jobs`` (:func:`split_items`): a line indented as
the list's first ``-`` and starting with ``-`` begins the next item, and nothing else can
(YAML wants every other line of an item, a block scalar's or a flow collection's
included, indented deeper than its ``-``).  An item whose text was seen in the previous
version is taken as it was parsed then; only new texts are parsed, each on its own
(:func:`parse_items`).

Anything this does not cover is left to the whole-file parser, which then reads the file
as always: a file with another top-level key, a flow-style list, ``jobs: []``, directives,
several documents, and anchors or aliases (``&``, ``*`` anywhere: an alias in one item may
name an anchor in another, whose text did not change).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import yaml

__all__ = ["parse_items", "split_items"]

_HEAD = re.compile(r"jobs:[ \t]*(#.*)?")
_ITEM = re.compile(r"( *)-([ \t\r\n]|$)")
_DASH = re.compile(r"-([ \t\r\n]|$)")


def _is_blank(line: str) -> bool:
    text = line.lstrip(" \t")
    return not text or text.startswith("#")


def split_items(text: str) -> list[str] | None:
    """The text of each item of the top-level ``jobs`` list, in order; None when *text*
    is not a job file of the one shape this covers (the module docstring)."""
    if "&" in text or "*" in text:
        return None
    lines = text.splitlines(keepends=True)
    at = 0
    while at < len(lines) and _is_blank(lines[at]):
        at += 1
    if at < len(lines) and lines[at].rstrip("\r\n") == "---":
        at += 1
        while at < len(lines) and _is_blank(lines[at]):
            at += 1
    if at >= len(lines) or not _HEAD.fullmatch(lines[at].rstrip("\r\n")):
        return None
    at += 1
    while at < len(lines) and _is_blank(lines[at]):
        at += 1
    first = _ITEM.match(lines[at]) if at < len(lines) else None
    if first is None:
        return None
    indent = first.group(1)
    items: list[str] = []
    current: list[str] = []
    for line in lines[at:]:
        if _is_blank(line):
            current.append(line)
            continue
        body = line[len(indent) :]
        if line.startswith(indent) and _DASH.match(body):
            if current:
                items.append("".join(current))
            current = [line]
        elif line.startswith(indent + " "):
            current.append(line)  # the item's own lines: deeper than its "-"
        else:
            return None  # another key, a document marker, a directive: the whole parser's
    items.append("".join(current))
    return items


def parse_items(
    items: list[str], known: Mapping[str, object], loader: type[yaml.SafeLoader]
) -> list[object] | None:
    """What each item's text gives: the one parsed before (*known*, by text) or its own
    parse; None when one does not parse on its own as a list of one item (the whole-file
    parser says why)."""
    out: list[object] = []
    fresh: dict[str, object] = {}
    for text in items:
        if text in known:
            out.append(known[text])
            continue
        if text not in fresh:
            try:
                value = yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
            except yaml.YAMLError:
                return None
            if not (isinstance(value, list) and len(value) == 1):
                return None
            fresh[text] = value[0]
        out.append(fresh[text])
    return out
