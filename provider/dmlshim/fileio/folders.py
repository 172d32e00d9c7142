"""Whole output folders (``export``): built out of sight, then moved into place in one step.

The rules are :mod:`dmlshim.fileio.files`'s; this adds the folder-level ones: Ctrl-C or an error leaves the
old folder (or nothing) and never a half-written one, and ``--overwrite`` removes only what dmlshim wrote
there before (regular files, and folders of regular files, that the previous index listed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .. import portable
from ..errors import BadInputError
from .confined import _real_dir, confined_path
from .files import (
    _RULE,
    PathLike,
    _check_text,
    _fsync_dir,
    _lstat,
    file_mode,
    input_files,
    temp_prefix,
)
from .target_kinds import _kind, _refuse_stream_link

__all__ = ["StagedFolder"]


def _removable_entry(path: Path) -> str | None:
    """Why dmlshim may not remove this previous output (None when it may: a regular file, or a real
    folder holding only regular files)."""
    st = _lstat(path)
    if st is None or stat.S_ISREG(st.st_mode):
        return None
    if portable.is_link(st) or not stat.S_ISDIR(st.st_mode):  # a junction is a link here
        return f"{str(path)!r} is {_kind(st)}"
    for child in path.iterdir():
        cst = os.lstat(child)
        if not stat.S_ISREG(cst.st_mode):
            return f"{str(child)!r} is {_kind(cst)}"
    return None


def _remove_entry(path: Path) -> None:
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISREG(st.st_mode):
        path.unlink()
        return
    for child in path.iterdir():
        if stat.S_ISREG(os.lstat(child).st_mode):
            child.unlink()
    path.rmdir()


def _identity(path: Path, st: os.stat_result | None) -> tuple[object, ...] | None:
    """What is at ``path`` (``st``: its lstat): None for nothing; a link by its inode, times and target
    text (a link made again at once may get the freed inode back)."""
    if st is None:
        return None
    target = ""
    if portable.is_link(st):
        with contextlib.suppress(OSError):
            target = os.readlink(path)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, target)


def _missing_folders(folder: Path) -> list[Path]:
    """The folders on the way to ``folder`` (itself included) that do not exist yet, outermost first."""
    missing: list[Path] = []
    current = folder
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    return missing[::-1]


class StagedFolder:
    """Build a folder's content out of sight, then move it into place all at once.

    Use::

        stage = StagedFolder(out, overwrite=args.overwrite, previous=listed_by_index)  # checks now
        with stage:
            write_inside(stage.path, "node/model.json", ...)   # or any writer under stage.path
            stage.commit(last="index.json")

    The target may be missing, an empty folder, or (``overwrite``) a folder holding a previous output, or
    a symbolic link (``overwrite``; the link is replaced, its target untouched). With a previous output,
    ``previous(target)`` names the entries dmlshim wrote there; only those are removed (and only if
    they are regular files or folders of regular files), everything else is kept. Without
    :meth:`commit` (an error, Ctrl-C) the staging folder is removed and the target is unchanged.
    """

    def __init__(
        self,
        target: PathLike,
        *,
        overwrite: bool = False,
        previous: Callable[[Path], Sequence[str]] | None = None,
        what: str = "output folder",
        inputs: Iterable[PathLike | None] = (),
    ) -> None:
        self.target = Path(_check_text(target, what))
        self._inputs = list(inputs)
        self.overwrite = overwrite
        self.what = what
        self._previous = previous
        self._remove: list[str] = []
        self._staging: Path | None = None
        self._committed = False
        self._termination: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        self._made: list[Path] = []
        self._check()

    def _check(self) -> None:
        st = _lstat(self.target)
        self._found = _identity(self.target, st)
        text = str(self.target)
        self._mode = "new"
        if st is None:
            missing = _missing_folders(self.target)
            above = missing[0].parent if missing else self.target.parent
            if not above.is_dir():  # checked before the work, as run -o checks its folder
                raise BadInputError(
                    f"the {self.what}'s folder {str(above)!r} is not a folder", path=text, rule=_RULE
                )
            return
        if portable.is_link(st):
            _refuse_stream_link(self.target, self.what)
            if not self.overwrite:
                raise BadInputError(
                    f"the {self.what} is a symbolic link; pass --overwrite to replace the link itself "
                    "(its target is never written)",
                    path=text,
                    rule=_RULE,
                )
            self._mode = "link"
            return
        if not stat.S_ISDIR(st.st_mode):
            raise BadInputError(
                f"the {self.what} exists and is {_kind(st)}, not a folder", path=text, rule=_RULE
            )
        if not any(self.target.iterdir()):
            self._mode = "empty"
            return
        if not self.overwrite:
            raise BadInputError(
                f"the {self.what} exists and is not empty; pass --overwrite to replace a previous export",
                path=text,
                rule=_RULE,
            )
        self._mode = "merge"
        names = list(self._previous(self.target)) if self._previous else []
        for name in names:
            why = _removable_entry(confined_path(self.target, name, what="previous entry"))
            if why is not None:
                raise BadInputError(
                    f"the previous output lists {name!r} but {why}; --overwrite removes a listed entry only "
                    "when it is a regular file or a folder of regular files (removed whole, whatever "
                    "their names): move it away first",
                    path=text,
                    rule=_RULE,
                )
        self._refuse_inputs_inside(names)
        self._remove = names

    def _refuse_inputs_inside(self, names: Sequence[str]) -> None:
        """Refuse to remove a listed entry that is, or holds, a file the command reads (the model, its
        external data, its inputs file): a previous output's node folder is no place for them, but
        --overwrite must never destroy an input (an exported model saved into its own node folder was
        removed while it was exported)."""
        for source, named in input_files(self._inputs):
            real = os.path.realpath(source)
            for name in names:
                entry = os.path.realpath(self.target / name)
                if real == entry or real.startswith(entry.rstrip(os.sep) + os.sep):
                    raise BadInputError(
                        f"the previous output lists {name!r}, which --overwrite replaces, but it holds "
                        f"{named}; refusing to remove an input: move it out of the {self.what} first",
                        path=str(self.target),
                        value=name,
                        rule=_RULE,
                    )

    @property
    def path(self) -> Path:
        """The staging folder to write into (valid inside the ``with`` block)."""
        if self._staging is None:
            raise RuntimeError("StagedFolder.path used outside its with block")
        return self._staging

    def __enter__(self) -> StagedFolder:
        parent = self.target.parent
        # SIGTERM/SIGHUP while the staging folder exists: removed by __exit__, then the process ends
        self._termination = portable.cleanup_on_termination()
        self._termination.__enter__()
        try:
            self._made = _missing_folders(parent)
            parent.mkdir(parents=True, exist_ok=True)
            self._staging = Path(
                tempfile.mkdtemp(prefix=temp_prefix(self.target.name), suffix=".tmp", dir=parent)
            )
            os.chmod(self._staging, file_mode(directory=True))
        except OSError as exc:
            self._termination.__exit__(None, None, None)
            raise BadInputError(
                f"cannot create the {self.what}: {exc.strerror or exc}", path=str(self.target)
            ) from exc
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._staging is not None and not self._committed:
                # Our own temporary folder; rmtree removes links inside it without following them.
                shutil.rmtree(self._staging, ignore_errors=True)
                # the folders made for it, if still empty ('-o new/sub/..' left 'new' behind)
                for made in reversed(self._made):
                    with contextlib.suppress(OSError):
                        made.rmdir()
            self._staging = None
        finally:
            self._termination.__exit__(None, None, None)

    def commit(self, last: str | None = None) -> None:
        """Move the staged content into the target; ``last`` (e.g. the index) is moved in last."""
        staging = self.path
        text = str(self.target)
        with portable.hold_signals():
            try:
                self._refuse_newcomer()
                if self._mode == "link":
                    os.unlink(self.target)  # the link itself; its target is untouched
                if self._mode in ("new", "link", "empty"):
                    _real_dir(self.target, "the " + self.what)  # an empty folder is replaced by rename
                    if self._mode == "empty" and portable.is_windows():
                        os.rmdir(self.target)  # Windows' rename never replaces a folder, even an empty one
                    os.rename(staging, self.target)
                else:
                    self._merge(staging, last)
            except OSError as exc:
                raise BadInputError(
                    f"cannot write the {self.what}: {exc.strerror or exc}", path=text
                ) from exc
            self._committed = True
        _fsync_dir(self.target.parent)

    def _refuse_newcomer(self) -> None:
        """Refuse to replace anything but the link the target was when it was checked (``os.unlink`` removed a
        regular file the user put there meanwhile, before issue 35's round 55). Where there was nothing,
        the rename refuses a file, a link or a folder holding anything (an empty folder is replaced: nothing
        in it is lost), as it refuses a folder that filled meanwhile; a merge checks each entry it moves."""
        if self._mode != "link":
            return
        st = _lstat(self.target)
        if _identity(self.target, st) == self._found and (st is None or portable.is_link(st)):
            return
        raise BadInputError(
            f"the {self.what} changed while dmlshim was running (it was a symbolic link); "
            "what was written there meanwhile (by you, or by a program) is never replaced: move it away, "
            "or give another name",
            path=str(self.target),
            rule=_RULE,
        )

    def _merge(self, staging: Path, last: str | None) -> None:
        removable = set(self._remove)
        entries = sorted(os.listdir(staging), key=lambda n: n == last)
        clashes = [n for n in entries if n not in removable and os.path.lexists(self.target / n)]
        if clashes:
            raise BadInputError(
                f"the {self.what} holds {clashes[0]!r}, which the previous output did not list; "
                "dmlshim does not replace what it did not write: move it away first",
                path=str(self.target),
                rule=_RULE,
            )
        _real_dir(self.target, "the " + self.what)
        for name in removable:  # again: a listed entry made a link meanwhile is never followed
            why = _removable_entry(self.target / name)
            if why is not None:
                raise BadInputError(
                    f"the previous output lists {name!r} but {why} now (it changed while dmlshim was "
                    "running); --overwrite removes a listed entry only when it is a regular file or a folder "
                    "of regular files: move it away first",
                    path=str(self.target),
                    rule=_RULE,
                )
        self._refuse_inputs_inside(sorted(removable))  # an input moved into one meanwhile
        # The previous index goes first, so no index ever lists a folder that is gone.
        for name in sorted(removable, key=lambda n: n != last):
            _remove_entry(self.target / name)
        for name in entries:
            os.rename(staging / name, self.target / name)
        staging.rmdir()
