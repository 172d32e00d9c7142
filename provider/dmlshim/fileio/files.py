"""The one careful writer: every file and folder dmlshim writes goes through this module.

Rules it enforces, so each command does not have to:

* **Atomic.** Content goes to a temporary file in the target's own folder, is flushed and ``fsync``-ed,
  then renamed over the target (``os.replace``); an interrupted write never leaves a truncated file.
  Folders (``export``) are built in a hidden sibling folder and moved into place in one step with
  SIGINT/SIGTERM held back, so no half-written export is ever visible (:mod:`dmlshim.fileio.folders`).
* **Links are replaced, never followed.** A symbolic link at the target is replaced by the new file
  (with ``overwrite``), so the link's target is never touched. Inside a target folder (``replay``'s
  ``--output-path``, an export folder) no component may be a link.
* **Only regular files are replaced or removed.** Devices (``/dev/null``), FIFOs, sockets and
  directories are refused even with ``overwrite``.
* **Inside the target.** Names relative to a target folder are refused when absolute, when they
  contain ``..``, NUL, or are empty or ``.``.
* **No silent overwrite.** An existing file is replaced only when the caller passes ``overwrite``, and
  never when it is one of the command's inputs (compared by ``os.path.samefile``, so links and hard
  links to the input count). An input that is an ONNX model brings every file it reads: each
  external-data location its tensors name counts as an input too.
* **Nothing written meanwhile.** A file that appears at the target (or changes) between the check and the
  write is never replaced, unless this process placed it or it holds exactly the bytes being written.
* **Usual permissions.** New files get ``0666 & ~umask`` (folders ``0777 & ~umask``), as ``open`` would.

Every refusal is a :class:`~dmlshim.errors.BadInputError` naming the path and the reason.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .. import portable
from ..errors import BadInputError
from ..fork_locks import ChildLock
from .input_files import _locations as _locations  # its cache is cleared by tests
from .input_files import input_files
from .nul_paths import RULE as _RULE
from .nul_paths import refuse_nul
from .reading import same_bytes
from .target_kinds import _kind, _refuse_stream_link

__all__ = [
    "check_output_file",
    "file_mode",
    "input_files",
    "temp_prefix",
    "write_bytes",
    "write_json",
    "write_npy",
    "write_npz",
    "write_onnx",
    "write_stream",
    "write_text",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]
Writer = Callable[[BinaryIO], object]


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # Not Linux: reading the umask means setting it; put it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode(directory: bool = False) -> int:
    """The mode ``open``/``mkdir`` would give a new file (folder): ``0666 & ~umask`` (``0777 & ~umask``)."""
    return (0o777 if directory else 0o666) & ~_umask()


def _check_text(path: PathLike, what: str) -> str:
    text = os.fspath(path)
    if isinstance(text, bytes):  # os.PathLike[bytes]
        text = os.fsdecode(text)
    if not text:
        raise BadInputError(f"the {what} path is empty", rule=_RULE)
    refuse_nul(text, what)
    return text


def _lstat(path: PathLike) -> os.stat_result | None:
    """What ``path`` is (None: nothing there).

    Raises:
        BadInputError: the path cannot name a file at all (too long for the file system, a loop of
            links on the way, NUL): one error naming the path, never the bare ``OSError``.
    """
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except (OSError, ValueError) as exc:
        words = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInputError(f"the path cannot name a file here: {words}", path=str(path), rule=_RULE) from exc


def _same_file(a: PathLike, b: PathLike) -> bool:
    try:
        if os.path.samefile(a, b):
            return True
    except (OSError, ValueError):
        pass
    try:
        # neither exists yet, or one does: compare names as the file system will
        return portable.name_key(os.path.realpath(a)) == portable.name_key(os.path.realpath(b))
    except (OSError, ValueError):
        return False


_Stamp = tuple[int, int, int, int] | None

_FOUND: dict[str, _Stamp] = {}
"""What each output path held when it was checked (None: nothing), until it is written: a file that
appears or changes there meanwhile is the user's (or the program's), and is never replaced."""


_PLACED: dict[str, tuple[_Stamp, str]] = {}
"""What this process itself last placed at each output path, and as what (the ``what`` of its writer): a
file found there that dmlshim wrote as the same kind of file (another session of the same program naming
the same optimized model, as onnxruntime allows) is not a newcomer to keep. One written as another kind
is (the program's optimized model at the path of the drop-in's summary: the summary replaced it before
issue 35's round 55)."""


_PENDING: dict[str, int] = {}  # how many writers that checked each path have not written it yet
_PLACING = ChildLock()


def _stamp(path: Path) -> _Stamp:
    st = _lstat(path)
    return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def check_output_file(
    path: PathLike,
    *,
    overwrite: bool = False,
    inputs: Iterable[PathLike | None] = (),
    what: str = "output file",
    remember: bool = True,
) -> Path:
    """Refuse a bad output file before the work starts, so a long run does not end in an unusable path.
    What the path holds now is remembered: when the file is written, a file that appeared there (or one
    that changed) since is refused even with ``overwrite``.

    Args:
        path: the file to write.
        overwrite: whether an existing regular file (or a link, which is replaced) may be replaced.
        inputs: the command's input files; the output may not be any of them (links included), nor any
            external-data file of an input ONNX model.
        what: how to name the file in messages.
        remember: remember what the path holds now (False: keep what an earlier check remembered).

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        BadInputError: the path is empty or holds NUL, its folder is missing, it names a directory,
            device, FIFO or socket, it is one of ``inputs``, or it exists and ``overwrite`` is false.
    """
    text = _check_text(path, what)
    if text.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        # Path() drops the separator: the file would be written beside a folder the caller meant
        raise BadInputError(
            f"the {what} ends with {text[-1]!r}, which names a folder; give a file name",
            path=text,
            rule=_RULE,
        )
    target = Path(text)
    for source, named in input_files(inputs):
        if _same_file(target, source):
            raise BadInputError(
                f"the {what} is {named} (or a link to it); refusing to replace an input",
                path=text,
                rule=_RULE,
            )
    if portable.is_windows() and portable.reserved_device_name(target.name):
        raise BadInputError(
            f"the {what} {target.name!r} names a Windows device; dmlshim only writes regular files",
            path=text,
            rule=_RULE,
        )
    st = _lstat(target)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise BadInputError(f"the {what} is a directory; give a file name", path=text, rule=_RULE)
        if not (stat.S_ISREG(st.st_mode) or portable.is_link(st)):
            raise BadInputError(
                f"the {what} is {_kind(st)}; dmlshim only replaces regular files, even with --overwrite",
                path=text,
                rule=_RULE,
            )
        if portable.is_link(st):
            _refuse_stream_link(target, what)
        if not overwrite:
            raise BadInputError(f"the {what} exists; pass --overwrite to replace it", path=text, rule=_RULE)
        _refuse_protected(target, st, what)
    parent = target.parent
    if not parent.is_dir():
        missing = "is not a folder" if parent.exists() else "does not exist"
        raise BadInputError(f"the {what}'s folder {str(parent)!r} {missing}", path=text, rule=_RULE)
    key = os.path.abspath(text)
    if remember or key not in _FOUND:
        _FOUND[key] = None if st is None else _stamp(target)
    if remember:
        _checked(key)
    return target


def _checked(key: str, change: int = 1) -> None:
    """One more writer checked ``key`` (``change`` -1: one wrote it, or was refused): what the path held is
    forgotten once no checked writer is left (a file that appeared after two sessions checked one optimized
    model's path is refused by both, also after the first one's write)."""
    with _PLACING:
        left = _PENDING[key] = _PENDING.get(key, 0) + change
        if left <= 0:
            del _PENDING[key]
            _FOUND.pop(key, None)


def _refuse_protected(target: Path, st: os.stat_result, what: str) -> None:
    """Refuse to replace a regular file this process may not write (``chmod a-w``, another user's file in
    a shared folder): onnxruntime cannot open it (``SystemError : 13``), and renaming over it, which the
    folder's permission allows, would destroy a file its owner protected. A link is replaced, never its
    target, so only the file itself counts; root may write anything, as in onnxruntime."""
    if stat.S_ISREG(st.st_mode) and not os.access(target, os.W_OK):
        raise BadInputError(
            f"the {what} is write-protected (this process may not write it); dmlshim does not replace it, "
            "even with --overwrite: make it writable, or remove it",
            path=str(target),
            rule=_RULE,
        )


def remember_output(path: PathLike) -> None:
    """Remember what ``path`` holds now, without checking it (a file whose name is known when a session
    starts, written when it ends: a profile): when it is written, a file that appeared there (or one that
    changed) since is refused even with ``overwrite``."""
    target = Path(os.fspath(path))
    _FOUND[os.path.abspath(target)] = _stamp(target)
    _checked(os.path.abspath(target))


def _refuse_newcomer(target: Path, what: str, tmp: Path) -> bool:
    """Refuse to replace a file that appeared at ``target``, or changed, since it was checked, unless it
    holds exactly the bytes of ``tmp`` (another process's session writing the same optimized model, as
    onnxruntime lets two processes do: nothing is lost by keeping it). Returns whether such a twin is
    there (then it is kept and ``tmp`` is not moved)."""
    key = os.path.abspath(target)
    if key not in _FOUND:
        return False
    found, now = _FOUND[key], _stamp(target)
    if now is None or now == found or (now, what) == _PLACED.get(key):
        return False
    if same_bytes(target, tmp):
        logger.debug("%s: the same bytes were written there meanwhile; kept", target)
        return True
    raise BadInputError(
        f"the {what} {'appeared' if found is None else 'changed'} while dmlshim was running; a file "
        "written meanwhile (by the program, or by you) is never replaced: move it away, or give another "
        "name",
        path=str(target),
        rule=_RULE,
    )


_TEMP_STEM_BYTES = 80
"""At most this many bytes of the target's name go into its temporary file's name (a legal name of 255
bytes plus the temporary file's dot, random part and suffix would pass the file system's limit)."""


def temp_prefix(name: str) -> str:
    """``.<name's start>.``: the prefix of a temporary file (or staging folder) beside ``name``, its start
    cut to :data:`_TEMP_STEM_BYTES` bytes as the file system counts them (62 emoji are 248 bytes: cutting
    at 80 characters left a 266-byte temporary name, refused with "File name too long")."""
    stem = name[:_TEMP_STEM_BYTES]
    while stem:
        try:
            if len(os.fsencode(stem)) <= _TEMP_STEM_BYTES:
                break
        except UnicodeError:
            pass
        stem = stem[:-1]
    return "." + stem + "."


def _fsync_dir(directory: Path) -> None:
    portable.fsync_dir(directory)


def _place(tmp: Path, target: Path, overwrite: bool, what: str) -> None:
    """Move the finished temporary file to the target (checked again: the target may have changed)."""
    st = _lstat(target)
    if st is not None and not (stat.S_ISREG(st.st_mode) or portable.is_link(st)):
        raise BadInputError(
            f"the {what} is {_kind(st)}; dmlshim only replaces regular files",
            path=str(target),
            rule=_RULE,
        )
    if st is not None and portable.is_link(st):
        _refuse_stream_link(target, what)
    if overwrite:
        with _PLACING:  # the look and the move as one step against this process's other writers
            if _refuse_newcomer(target, what, tmp):
                _PLACED[os.path.abspath(target)] = (_stamp(target), what)
                return
            if st is not None:
                _refuse_protected(target, st, what)
            portable.replace(tmp, target)  # replaces a link itself, never its target
            _PLACED[os.path.abspath(target)] = (_stamp(target), what)
        return
    try:
        # A hard link fails if the name exists, so a file that appeared meanwhile is kept.
        portable.link_new(tmp, target)
    except FileExistsError as exc:
        raise BadInputError(f"the {what} exists; pass --overwrite to replace it", path=str(target)) from exc
    except OSError:  # no hard links on this file system
        if os.path.lexists(target):
            raise BadInputError(
                f"the {what} exists; pass --overwrite to replace it", path=str(target)
            ) from None
        portable.replace(tmp, target)


def write_stream(
    path: PathLike,
    writer: Writer,
    *,
    overwrite: bool = False,
    inputs: Iterable[PathLike | None] = (),
    what: str = "output file",
    sync: bool = True,
) -> Path:
    """Write a file atomically with ``writer(handle)``; see the module docstring for the rules.

    Args:
        path: the file to write (its folder must exist).
        writer: called once with a binary handle open on a temporary file beside ``path``.
        overwrite: replace an existing regular file or link.
        inputs: files the output must not be.
        what: how to name the file in messages.
        sync: ``fsync`` the file and its folder (False only for scratch files in a private temporary
            folder that nobody reads after a crash: thousands of them, each synced, cost minutes).

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        BadInputError: refused (see :func:`check_output_file`) or the write failed (disk full, ...).
    """
    target = check_output_file(path, overwrite=overwrite, inputs=inputs, what=what, remember=False)
    parent = target.parent
    prefix = temp_prefix(target.name)
    # SIGTERM/SIGHUP while the temporary file exists: removed first, then the process ends as asked
    with portable.cleanup_on_termination():
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
        except OSError as exc:
            raise BadInputError(f"cannot write the {what}: {exc.strerror or exc}", path=str(target)) from exc
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as handle:
                portable.set_mode(handle.fileno(), tmp, file_mode())
                writer(handle)
                handle.flush()
                if sync:
                    os.fsync(handle.fileno())
            _place(tmp, target, overwrite, what)
        except OSError as exc:
            raise BadInputError(f"cannot write the {what}: {exc.strerror or exc}", path=str(target)) from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
            _checked(os.path.abspath(target), -1)
    if sync:
        _fsync_dir(parent)
    logger.debug("wrote %s", target)
    return target


def write_bytes(path: PathLike, data: bytes, **options: Any) -> Path:
    """Write bytes atomically (options as :func:`write_stream`)."""
    return write_stream(path, lambda handle: handle.write(data), **options)


def write_text(path: PathLike, text: str, **options: Any) -> Path:
    """Write UTF-8 text atomically (options as :func:`write_stream`)."""
    return write_bytes(path, text.encode("utf-8"), **options)


def write_json(path: PathLike, value: Any, **options: Any) -> Path:
    """Write JSON (indented, no NaN) atomically (options as :func:`write_stream`)."""
    return write_text(path, json.dumps(value, indent=2, allow_nan=False) + "\n", **options)


def write_npy(path: PathLike, array: np.ndarray, **options: Any) -> Path:
    """Write one array as ``.npy`` without pickles, atomically (options as :func:`write_stream`)."""
    arr = np.ascontiguousarray(array)
    return write_stream(path, lambda h: np.lib.format.write_array(h, arr, allow_pickle=False), **options)


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray], **options: Any) -> Path:
    """Write arrays as ``numpy.savez`` would (one ``NAME.npy`` member each), atomically, without pickles."""
    from .npz import save_npz  # imported here: keep files.py import-light

    return write_stream(path, lambda handle: save_npz(handle, arrays), **options)


def write_onnx(path: PathLike, model: Any, **options: Any) -> Path:
    """Serialise an ``onnx.ModelProto`` and write it atomically (options as :func:`write_stream`).

    Raises:
        BadInputError: as :func:`write_stream`, or the model is too large for one protobuf (2 GiB).
    """
    from .onnx_pieces import STREAM_MIN_BYTES, initializer_bytes, piece_writer

    if initializer_bytes(model) >= STREAM_MIN_BYTES:
        return write_stream(path, piece_writer(model, path), **options)
    try:
        data = model.SerializeToString()
    except ValueError as exc:  # protobuf's EncodeError derives from Exception; see below
        raise BadInputError(f"cannot serialise the model: {exc}", path=os.fspath(path)) from exc
    except Exception as exc:
        if type(exc).__name__ != "EncodeError":
            raise
        raise BadInputError(
            f"cannot serialise the model ({exc}); a model above 2 GiB needs external data",
            path=os.fspath(path),
        ) from exc
    return write_bytes(path, data, **options)
