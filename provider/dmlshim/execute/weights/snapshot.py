"""The session's own copy of the weights a model file holds inline, and a guard on the external data the
session maps.

onnxruntime copies the weights a model file holds inline when it builds a session: editing, truncating,
replacing or deleting the file afterwards changes nothing for that session. A model read without its
weights (:func:`dmlshim.execute.weights.file_slices.read_weightless`) points at those bytes in the file
instead, and both onnxruntime and dmlshim's kernels map them from there: an edit would change the results
and a truncation would kill the process (SIGBUS). So the bytes are copied once, at load, into a file of the
session's own (:class:`WeightSnapshot`, in a private temporary folder, removed with the session): the
sessions and kernels map that copy, so every weight is still shared (one copy in the page cache, none in
Python) and the model file is never read again.

External data the user chose is mapped by onnxruntime itself (it follows edits, keeps the old bytes when
the file is replaced or deleted, and dies of SIGBUS when it is truncated): dmlshim maps it the same way,
and :class:`ExternalDataGuard` refuses a run, with an error, once a mapped file has become shorter than
the weights it holds, before anything reads the missing pages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import onnx

from ...errors import BadModelError
from ...fileio import stale_folders
from ...fileio.nul_paths import location_read
from ...fileio.reading import open_regular
from ...model.weightless import is_external
from .file_slices import FileSlice

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "weights.bin"
"""The name of the copy in its private folder (the external-data location of the copied weights)."""

_ALIGN = 64
_CHUNK = 8 * 1024 * 1024


def _slice(tensor: onnx.TensorProto) -> FileSlice:
    info = {e.key: e.value for e in tensor.external_data}
    return FileSlice(
        location_read(info.get("location", "")), int(info.get("offset", "0")), int(info.get("length", "0"))
    )


def _pread(fd: int, count: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, count, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, count)


def _pwrite(fd: int, data: bytes, offset: int) -> int:
    if hasattr(os, "pwrite"):
        return os.pwrite(fd, data, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


def _copy_range(src: int, dst: int, offset: int, length: int, out: int) -> None:
    """Copy ``length`` bytes at ``offset`` of ``src`` to ``out`` of ``dst`` (in the kernel when it can)."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while done < length:
        count = min(_CHUNK, length - done)
        moved = 0
        if copy_range is not None:
            try:
                moved = copy_range(src, dst, count, offset + done, out + done)
            except OSError:
                copy_range = None  # another file system, or not supported: copy through memory
        if not moved:
            data = _pread(src, count, offset + done)
            if not data:
                raise BadModelError(f"the model file ends inside a weight (at byte {offset + done})")
            moved = _pwrite(dst, data, out + done)
        done += moved


SNAPSHOT_PREFIX = "dmlshim-weights-locked-"
"""The prefix of the private folders in the temporary directory ("locked": each is held by a lock while
in use; the folders of earlier versions, which held none, are never swept)."""


def _remove(folder: str, lock: int | None) -> None:
    stale_folders.release(folder, lock)


def sweep_stale(parent: str | None = None) -> list[str]:
    """Remove the copies that processes killed before they could remove them left behind (a SIGTERM or
    SIGKILL skips every finalizer: each kill of a server left a full copy of its weights in the temporary
    directory, which is memory where that is a tmpfs): :func:`dmlshim.fileio.stale_folders.sweep_stale`
    (every process, and every child forked from it, holds the lock of each copy it may still read).
    Returns the folders removed."""
    return stale_folders.sweep_stale(SNAPSHOT_PREFIX, parent, what="weight copies")


class WeightSnapshot:
    """A private copy of some of a model file's bytes, in a temporary folder removed with this object
    (or at exit). ``folder`` is where the copied initializers' external data now lies. The folder is
    locked while this process (or a child forked from it) lives, so that the copies of processes killed
    before they could remove theirs are found and removed (:func:`sweep_stale`)."""

    def __init__(self, folder: str, lock: int | None) -> None:
        self.folder = folder
        self._finalizer = weakref.finalize(self, _remove, folder, lock)

    @property
    def path(self) -> str:
        """The copy."""
        return os.path.join(self.folder, SNAPSHOT_FILE)

    def remove(self) -> None:
        """Remove the copy now (the sessions that mapped it keep their mapping)."""
        self._finalizer()


def snapshot_inline(
    proto: onnx.ModelProto, model_path: str | os.PathLike[str], names: Iterable[str]
) -> WeightSnapshot:
    """Copy the bytes of the initializers ``names`` of ``proto`` (external data pointing into the model
    file ``model_path`` itself, as :func:`~dmlshim.execute.weights.file_slices.read_weightless` left them)
    into a file of their own, and point them there (each at an offset aligned for any element type).

    Raises:
        OSError: the copy cannot be made (no space for it, say): the caller reads the weights instead.
        BadModelError: the model file changed while it was read.
    """
    wanted = set(names)
    tensors = [t for t in proto.graph.initializer if t.name in wanted and is_external(t)]
    snapshot = WeightSnapshot(*stale_folders.make_held_folder(SNAPSHOT_PREFIX))
    try:
        with open_regular(model_path, what="model file", error=BadModelError) as src:
            before = os.fstat(src.fileno())
            fd = os.open(
                snapshot.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600
            )
            try:
                out = 0
                for tensor in tensors:
                    where = _slice(tensor)
                    _copy_range(src.fileno(), fd, where.offset, where.length, out)
                    for entry in tensor.external_data:
                        if entry.key == "location":
                            entry.value = SNAPSHOT_FILE
                        elif entry.key == "offset":
                            entry.value = str(out)
                    out += -(-where.length // _ALIGN) * _ALIGN
            finally:
                os.close(fd)
            after = os.fstat(src.fileno())
        if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
            raise BadModelError(
                "the model file changed while its weights were read; load it again once it is written",
                path=os.fspath(model_path),
            )
    except BaseException:
        snapshot.remove()
        raise
    logger.debug("%d weights of %s copied to %s", len(tensors), model_path, snapshot.path)
    return snapshot


class ExternalDataGuard:
    """The external-data files a session maps (onnxruntime maps them too), held open, with the length
    each must keep: a run is refused once one of them has become shorter, before onnxruntime or a kernel
    touches a page that is gone (which kills the process with SIGBUS). Edits, a replaced or a deleted
    file are left to the mapping, as onnxruntime leaves them (the mapped bytes are those of the file
    that was open when the session was built)."""

    def __init__(self, proto: onnx.ModelProto, folder: str, model_path: str) -> None:
        self._model_path = model_path
        needed: dict[str, int] = {}
        for tensor in proto.graph.initializer:
            if is_external(tensor):
                where = _slice(tensor)
                needed[where.location] = max(needed.get(where.location, 0), where.offset + where.length)
        self._files: list[tuple[str, int, int]] = []
        self._handles: list[BinaryIO] = []
        for location, end in sorted(needed.items()):
            handle = open_regular(Path(folder) / location, what="external data", error=BadModelError)
            self._handles.append(handle)
            self._files.append((location, handle.fileno(), end))
        weakref.finalize(self, _close_all, list(self._handles))

    def check(self) -> None:
        """Raise BadModelError when a mapped file is now shorter than the weights in it."""
        for location, fd, end in self._files:
            size = os.fstat(fd).st_size
            if size < end:
                raise BadModelError(
                    f"the external data file {location!r} was cut to {size} bytes after the session was "
                    f"created, but the weights the session maps from it end at byte {end}: reading them "
                    "would crash the process (onnxruntime's own session dies of SIGBUS); create the "
                    "session again once the file is whole",
                    path=self._model_path,
                    value=location,
                    rule="external data keeps its length while a session built from it is in use",
                )


def _close_all(handles: list[BinaryIO]) -> None:
    for handle in handles:
        with contextlib.suppress(OSError):
            handle.close()


def read_inline(proto: onnx.ModelProto, model_path: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Read the bytes of the initializers ``names`` (external data pointing into the model file
    ``model_path`` itself) back into ``proto``, as ``onnx.load`` would have held them.

    Raises:
        BadModelError: the file cannot be read or ends too early.
    """
    wanted = set(names)
    with open_regular(model_path, what="model file", error=BadModelError) as src:
        for tensor in proto.graph.initializer:
            if tensor.name not in wanted or not is_external(tensor):
                continue
            where = _slice(tensor)
            data = _pread(src.fileno(), where.length, where.offset)
            if len(data) != where.length:
                raise BadModelError(
                    f"initializer {tensor.name!r}: the model file ends after {len(data)} of its "
                    f"{where.length} bytes",
                    path=os.fspath(model_path),
                    tensor=tensor.name,
                )
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.raw_data = data
