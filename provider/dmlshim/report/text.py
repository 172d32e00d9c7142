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
