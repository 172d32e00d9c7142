"""Plain-text layout shared by every report and command."""

from __future__ import annotations

import re
from collections.abc import Sequence

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``): a name read from a model can hold an
    escape sequence (a terminal's title, a cleared screen) or a line break that would print a line of its
    own, such as a forged verdict."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows (the first usually a header) as left-aligned columns two spaces apart, without trailing blanks;
    control characters in a cell are escaped (see :func:`printable`)."""
    if not rows:
        return []
    columns = len(rows[0])
    if any(len(row) != columns for row in rows):
        raise ValueError(f"rows of {sorted({len(row) for row in rows})} cells: a table's rows are alike")
    if _CONTROL.search("".join(["".join(row) for row in rows])):  # one search, not one per cell
        rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    ljust = str.ljust
    return [(indent + "  ".join(map(ljust, row, widths))).rstrip() for row in rows]


def shape_text(shape: Sequence[int | str | None]) -> str:
    """A shape (or an element position) as every command prints it: ``[1,2,8,8]``, symbolic dimensions by
    name (``[batch,8]``), unknown ones as ``?``, a scalar as ``[]``.
    """
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def names_text(names: Sequence[str], limit: int, quote: bool = False) -> str:
    """The first ``limit`` names joined with commas, then "and N more": a detector has hundreds of
    gather nodes upstream of one output, and a line naming all of them hides the rest of the report."""
    shown = ", ".join(repr(n) if quote else n for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
