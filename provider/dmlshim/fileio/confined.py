"""Writing inside a target folder (an export, ``replay``'s ``--output-path``): names read from files are
confined to the folder, and no component on the way may be a link (the rules of
:mod:`dmlshim.fileio.files`)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import portable
from ..errors import BadInputError
from .files import _RULE, PathLike, Writer, _check_text, _lstat, write_stream
from .target_kinds import _kind

__all__ = ["confined_path", "write_inside"]


def confined_path(root: PathLike, relative: str, *, what: str = "path", suffixes: Sequence[str] = ()) -> Path:
    """``root / relative`` after checking that ``relative`` cannot leave ``root``.

    ``/`` and ``\\`` both separate components (DxDispatch files come from Windows).

    Args:
        root: the target folder.
        relative: a name relative to it, as found in a file (not trusted).
        what: how to name the value in messages (e.g. ``commands[2].targetPath``).
        suffixes: accepted extensions (e.g. ``(".npy",)``); empty accepts any name.

    Raises:
        BadInputError: ``relative`` is not a string, is empty or ``.``, holds NUL, is absolute, has a
            drive letter, contains ``..``, or has no accepted extension.
    """
    accepted = (
        "a relative path inside the folder, e.g. out/result"
        + (suffixes[0] if suffixes else ".npy")
        + (f" (extension {', '.join(suffixes)})" if suffixes else "")
    )

    def refuse(reason: str) -> BadInputError:
        return BadInputError(f"{what} {relative!r} {reason}; expected {accepted}", value=relative, rule=_RULE)

    if not isinstance(relative, str):
        raise BadInputError(f"{what} must be a string, not {type(relative).__name__}", value=relative)
    if "\x00" in relative:
        raise refuse("contains a NUL character")
    if (
        relative.startswith(("/", "\\"))
        or (len(relative) > 1 and relative[1] == ":")
        or os.path.isabs(relative)
    ):
        raise refuse("is absolute")
    parts = [p for p in relative.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise refuse("names the folder itself, not a file")
    if ".." in parts:
        raise refuse("leaves the folder (..)")
    # Names read from files travel between machines: refuse what Windows would read as a device or an
    # alternate data stream (``out.npy:stream``), whatever machine reads the file now.
    if any(":" in p for p in parts):
        raise refuse("contains ':' (a drive or an alternate data stream on Windows)")
    if any(portable.reserved_device_name(p) for p in parts):
        raise refuse("names a Windows device (CON, NUL, COM1, ...)")
    if suffixes and not any(
        parts[-1].lower().endswith(s.lower()) and len(parts[-1]) > len(s) for s in suffixes
    ):
        raise refuse("has no accepted extension")
    return Path(os.fspath(root)).joinpath(*parts)


def _real_dir(directory: Path, what: str) -> None:
    st = _lstat(directory)
    if st is None:
        return
    if portable.is_link(st):
        raise BadInputError(
            f"{what} {str(directory)!r} is a symbolic link; dmlshim does not write through links",
            path=str(directory),
            rule=_RULE,
        )
    if not stat.S_ISDIR(st.st_mode):
        raise BadInputError(f"{what} {str(directory)!r} is {_kind(st)}, not a folder", rule=_RULE)


def _make_dirs(root: Path, directory: Path, made: list[Path]) -> None:
    """Create ``directory`` (under ``root``) component by component, refusing links on the way; the
    folders created are appended to ``made``."""
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        _real_dir(current, "the folder")
        if not os.path.lexists(current):
            try:
                os.mkdir(current, 0o777)  # the umask applies, as for mkdir(1)
                made.append(current)
            except FileExistsError:
                pass
            _real_dir(current, "the folder")


def _missing_ancestors(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist, outermost first (what creating it makes)."""
    missing: list[Path] = []
    current = folder
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    return missing[::-1]


def _remove_made(made: list[Path]) -> None:
    """Remove the folders a failed write created, innermost first, those still empty only: a full disk
    or a refused file leaves no empty folder behind (``replay -o new/folder``)."""
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def write_inside(
    root: PathLike,
    relative: str,
    writer: Writer,
    *,
    what: str = "path",
    suffixes: Sequence[str] = (),
    overwrite: bool = True,
    create_root: bool = True,
    inputs: Iterable[PathLike | None] = (),
) -> Path:
    """Write ``root/relative`` atomically, refusing names and links that would leave ``root``.

    Missing folders (``root`` included when ``create_root``) are created; an existing regular file is
    replaced when ``overwrite`` (the default: a target folder is dmlshim's to fill), unless it is one
    of ``inputs``.

    Returns:
        The path written.

    Raises:
        BadInputError: see :func:`confined_path`; ``root`` or a folder on the way is a link or not a
            folder; the target is not a regular file.
    """
    root_path = Path(_check_text(root, "target folder"))
    target = confined_path(root_path, relative, what=what, suffixes=suffixes)
    _real_dir(root_path, "the target folder")
    made: list[Path] = []
    try:
        if not root_path.exists():
            if not create_root:
                raise BadInputError("the target folder does not exist", path=str(root_path))
            made.extend(_missing_ancestors(root_path))
            try:
                root_path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BadInputError(
                    f"cannot create the target folder: {exc.strerror or exc}", path=str(root_path)
                ) from exc
        try:
            _make_dirs(root_path, target.parent, made)
        except OSError as exc:
            raise BadInputError(
                f"cannot create the folder for {what}: {exc.strerror or exc}", path=str(target)
            ) from exc
        # Defence in depth: after the checks the real folder must still lie inside the real root.
        real_root = os.path.realpath(root_path)
        if os.path.commonpath([real_root, os.path.realpath(target.parent)]) != real_root:
            raise BadInputError(f"{what} {relative!r} resolves outside the target folder", path=str(target))
        return write_stream(target, writer, overwrite=overwrite, what=what, inputs=inputs)
    except BaseException:
        _remove_made(made)
        raise
