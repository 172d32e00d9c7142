"""Private folders in the temporary directory that outlive a killed process, found and removed.

A process that makes such a folder (a weight copy, the DirectML host's log, ``python -m dmlshim.ort``'s
state) holds an advisory lock on it while it (or a child forked from it) may still use it
(:func:`make_held_folder`); SIGKILL skips every finalizer and leaves the folder behind, so the next
process that makes one of the same kind removes the folders nobody holds (:func:`sweep_stale`): this
user's only, real folders only (never a link), older than a minute, and only of the prefixes whose folders
are locked (earlier versions made theirs under other names, unlocked: never swept). Where the platform has
no such locks (Windows) nothing is swept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable

from .. import portable

logger = logging.getLogger(__name__)

__all__ = ["STALE_AFTER_S", "make_held_folder", "release", "sweep_stale"]

STALE_AFTER_S = 60.0
"""A folder younger than this is never taken for a dead process's (it may be locked in a moment)."""


def make_held_folder(
    prefix: str, *, kept: Callable[[str], bool] | None = None, what: str = "folders"
) -> tuple[str, int | None]:
    """A new private folder in the temporary directory and the open descriptor holding its lock (None
    where there are no such locks), after the stale folders of that prefix were swept (``kept`` and
    ``what`` as :func:`sweep_stale`).

    Raises:
        OSError: the folder cannot be made.
    """
    sweep_stale(prefix, kept=kept, what=what)
    folder = tempfile.mkdtemp(prefix=prefix)
    return folder, portable.lock_folder(folder)


def release(folder: str | None, lock: int | None) -> None:
    """Remove ``folder`` (when given) and let go of its lock."""
    if folder is not None:
        shutil.rmtree(folder, True)
    if lock is not None:
        with contextlib.suppress(OSError):
            os.close(lock)


def sweep_stale(
    prefix: str,
    parent: str | None = None,
    *,
    kept: Callable[[str], bool] | None = None,
    what: str = "folders",
) -> list[str]:
    """Remove the folders named ``prefix``... in ``parent`` (the temporary directory by default) that
    processes killed before they could remove them left behind: a folder is stale when no process holds
    its lock, it belongs to this user, it is a folder (not a link) and it is older than
    :data:`STALE_AFTER_S`; ``kept`` names folders to leave whatever they are. Returns the folders removed."""
    if not portable.folder_locks():  # Windows: no advisory locks, no sweep
        return []
    parent = parent if parent is not None else tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(parent, name)
        try:
            info = os.lstat(folder)
            if (
                not stat.S_ISDIR(info.st_mode)
                or not portable.owned_by_me(info)
                or time.time() - info.st_mtime < STALE_AFTER_S
                or (kept is not None and kept(folder))
            ):
                continue
        except OSError:
            continue
        fd = portable.lock_folder(folder, follow_links=False)
        if fd is None:  # held by a live process (or no longer there)
            continue
        try:
            shutil.rmtree(folder, True)
            removed.append(folder)
        finally:
            os.close(fd)
    if removed:
        logger.info("removed %d %s left by processes that were killed: %s", len(removed), what, removed)
    return removed
