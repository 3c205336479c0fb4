"""What the benchmarks print: Markdown tables on stdout, progress lines on stderr.

Every Markdown table of :mod:`bench` is written here: whole by :func:`table`, or by
:func:`head` and then :func:`row` per line when a benchmark prints its rows as its runs
finish.  A table looks so::

    | case | ports | time |
    |---|---:|---:|
    | 1k/100 | 1,058 | 2.9 |

*align* gives each column's alignment, one letter per column: ``l`` (``---``) or ``r``
(``---:``); its last letter stands for every column after it too, so ``"l"`` aligns all
left and ``"lr"`` all but the first right.  With *spaced* the rule under the head is
written ``| --- | ---: |``.  Cells are text, formatted by the caller; an empty string is
padded like any other cell (``|  |``), and None is a blank written tight (``| |``), as
in the attribution evaluation's mean rows and the last column of the what-if table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

#: the rule's mark of a left- and of a right-aligned column
MARKS = {"l": "---", "r": "---:"}


def row(cells: Sequence[str | None]) -> str:
    """One line of a table: *cells* between bars, each with a space either side (None: a
    blank cell, one space)."""
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def rule(columns: int, align: str = "l", *, spaced: bool = False) -> str:
    """The line under a table's head, for *columns* columns aligned by *align*."""
    if not align or set(align) - set(MARKS) or len(align) > columns:
        raise ValueError(f"align {align!r}: expected 1 to {columns} letters l or r")
    marks = [MARKS[a] for a in align + align[-1] * (columns - len(align))]
    return row(marks) if spaced else "|" + "|".join(marks) + "|"


def head(columns: Sequence[str | None], align: str = "l", *, spaced: bool = False) -> list[str]:
    """A table's first two lines: the column names and the rule under them."""
    return [row(columns), rule(len(columns), align, spaced=spaced)]


def table(
    columns: Sequence[str | None],
    rows: Iterable[Sequence[str | None]],
    align: str = "l",
    *,
    spaced: bool = False,
) -> list[str]:
    """A whole table, line by line: :func:`head`, then a :func:`row` per row."""
    return [*head(columns, align, spaced=spaced), *(row(cells) for cells in rows)]


def say(msg: str) -> None:
    """A progress line on stderr (the tables go to stdout)."""
    print(msg, file=sys.stderr, flush=True)
