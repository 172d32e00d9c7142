"""What stands at an output path, in words for a refusal: the kind of file (:func:`_kind`) and a link that
stands for a process's stream or a device (:func:`_stream_link`), which the careful writer
(:mod:`dmlshim.fileio.files`) never replaces."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .. import portable
from ..errors import BadInputError
from .nul_paths import RULE as _RULE


def _kind(st: os.stat_result) -> str:
    if portable.is_link(st):
        return "a symbolic link"  # junctions included
    mode = st.st_mode
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


_STREAM_LINKS = ("/proc/", "/dev/fd/")
"""Where a link stands for a process's open file (``/dev/stdout`` -> ``/proc/self/fd/1``)."""


def _stream_link(target: Path) -> str | None:
    """What a symbolic link at ``target`` stands for when replacing it would break more than a name: a
    link to a device, FIFO or socket (``/dev/stdout``, ``/dev/stderr``: a process's stream), else None.
    ``-o /dev/stdout --overwrite`` asks to write to the stream; replacing the system's link by a regular
    file would break ``/dev/stdout`` for every program on the machine."""
    hop = str(target)
    for _ in range(40):
        try:
            nxt = os.readlink(hop)
        except OSError:
            break
        hop = os.path.join(os.path.dirname(hop), nxt)
        if hop.startswith(_STREAM_LINKS):
            return f"a link to a process's open file ({nxt!r})"
    try:
        st = os.stat(target)
    except OSError:
        return None  # dangling: the link alone is replaced
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return f"a link to {_kind(st)} ({os.path.realpath(target)!r})"


def _refuse_stream_link(target: Path, what: str) -> None:
    found = _stream_link(target)
    if found is not None:
        raise BadInputError(
            f"the {what} is {found}; dmlshim writes files, never to a stream or device, and does not "
            "replace such a link even with --overwrite",
            path=str(target),
            rule=_RULE,
        )
