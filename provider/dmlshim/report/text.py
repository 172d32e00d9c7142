"""Plain-text layout shared by every report and command."""

from __future__ import annotations

from collections.abc import Sequence


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows (the first usually a header) as left-aligned columns two spaces apart, without trailing blanks."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def shape_text(shape: Sequence[int | str | None]) -> str:
    """A shape (or an element position) as every command prints it: ``[1,2,8,8]``, symbolic dimensions by
    name (``[batch,8]``), unknown ones as ``?``, a scalar as ``[]``.
    """
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
