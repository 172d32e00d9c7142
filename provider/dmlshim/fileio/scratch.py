"""A scratch file in a private temporary folder, rewritten in place with one write call each time.

For a file rewritten after every change (a worker's tally for ``python -m dmlshim.ort``'s summary): the
atomic writer of :mod:`.files` (a temporary file, then a rename) costs milliseconds a time on some file
systems (overlayfs), which made each run of a small model in a pool worker ~50 times slower. Here the file
stays open and each content is written over the previous one from its start, padded with spaces to the
longest content written so far (trailing whitespace is valid JSON), in one ``pwrite``: a process ended
by a signal leaves either the previous content or the new one. Only for files in a folder nobody else writes
to; a reader must accept that a file whose writer is still running may be read half-written.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .. import portable
from .files import file_mode


class ScratchFile:
    """One scratch file, opened at its first write by the process that writes it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = os.fspath(path)
        """The path as given (compared by the writer after every change: cheaper than a Path)."""
        self._fd: int | None = None
        self._size = 0

    def write_text(self, text: str) -> None:
        """Replace the content with ``text`` (UTF-8), padded with spaces to the longest content so far.

        Raises:
            OSError: the file cannot be opened or written (its folder was removed, the disk is full).
        """
        data = text.encode("utf-8")
        if self._fd is None:
            self._fd = os.open(self.path, portable.REWRITE_FLAGS, file_mode())
            self._size = os.fstat(self._fd).st_size
        if len(data) < self._size:
            data += b" " * (self._size - len(data))
        _write_at_start(self._fd, data)
        self._size = max(self._size, len(data))

    def close(self) -> None:
        """Close the file (kept on disk); a forked child calls it on the copy of its parent's."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _write_at_start(fd: int, data: bytes) -> None:
    pwrite = getattr(os, "pwrite", None)  # Windows has none
    if pwrite is None:
        os.lseek(fd, 0, os.SEEK_SET)
    done = 0
    while done < len(data):
        chunk = data[done:]
        done += pwrite(fd, chunk, done) if pwrite is not None else os.write(fd, chunk)
