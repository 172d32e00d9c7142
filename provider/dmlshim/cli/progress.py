"""A transient one-line status on stderr for work that takes more than a moment.

Shown only when stderr is a terminal and ``--quiet`` was not given, so pipes, logs and CI output stay
clean; the line is erased when the work ends, leaving stdout's report as the only output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_ERASE = "\r\033[K"


class Progress:
    """Status lines for one command run.

    Args:
        enabled: whether anything is written at all.
        stream: where to write (stderr when None).
    """

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._shown = False

    @classmethod
    def for_args(cls, args: argparse.Namespace, stream: TextIO | None = None) -> Progress:
        """On when the stream (stderr by default) is a terminal and ``--quiet`` is not set."""
        stream = stream if stream is not None else sys.stderr
        isatty = getattr(stream, "isatty", None)
        tty = bool(isatty and isatty())
        return cls(tty and not getattr(args, "quiet", False), stream)

    def update(self, message: str) -> None:
        """Replace the status line with ``message`` (cut to one line)."""
        if not self.enabled:
            return
        line = message.splitlines()[0] if message else ""
        self._stream.write(_ERASE + line[:200])
        self._stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the status line, if one is shown."""
        if self._shown:
            self._stream.write(_ERASE)
            self._stream.flush()
            self._shown = False

    @contextmanager
    def status(self, message: str) -> Iterator[None]:
        """Show ``message`` while the block runs; erase it afterwards, whatever happens."""
        self.update(message)
        try:
            yield
        finally:
            self.clear()


@contextmanager
def status(args: argparse.Namespace, message: str) -> Iterator[Progress]:
    """``with status(args, "exporting ..."):`` for a command's one long step."""
    progress = Progress.for_args(args)
    with progress.status(message):
        yield progress


def file_written(args: argparse.Namespace, command: str, what: str, path: object) -> None:
    """One line on stderr naming a file the command wrote (``--quiet`` silences it): the user learns where
    it went without ``-v``; stdout stays the report."""
    if not getattr(args, "quiet", False):
        print(f"dmlshim {command}: {what} written to {path}", file=sys.stderr)
