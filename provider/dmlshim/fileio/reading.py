"""Careful reading of files named by users or by other files (DxDispatch ``sourcePath``, ``index.json``).

* Only regular files are opened: a FIFO, a device or a socket is refused before any read that could
  block forever (the file is opened non-blocking and checked with ``fstat``).
* Sizes are checked against the memory limit (:func:`dmlshim.limits.memory_limit`) before reading: the
  file's size for bytes and JSON, the header's declared shape for ``.npy``.
* JSON nested deeper than Python can parse (``RecursionError``) becomes an error naming the file.
"""

from __future__ import annotations

import ast
import io
import json
import os
import stat
import struct
from collections.abc import Callable
from typing import IO, Any, BinaryIO

import numpy as np

from .. import portable
from ..errors import BadInputError, DmlShimError
from ..limits import check_bytes, check_tensor

__all__ = [
    "NpyHeaderError",
    "loads_json",
    "npy_header",
    "open_regular",
    "read_json",
    "read_npy",
    "read_text",
    "same_bytes",
]

ErrorType = type[DmlShimError]


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(
    path: str | os.PathLike[str], *, what: str = "file", error: ErrorType = BadInputError
) -> BinaryIO:
    """Open a regular file for reading without ever blocking on a FIFO or a device.

    Raises:
        ``error``: the file is missing, unreadable, or not a regular file.
    """
    text = os.fspath(path)
    if "\x00" in text:
        raise error(f"the {what} path contains a NUL character", value=text)
    try:
        fd = os.open(text, portable.read_flags())
    except FileNotFoundError as exc:
        raise error(f"the {what} was not found", path=text) from exc
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", path=text) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error(f"the {what} is {_kind(st.st_mode)}; only regular files are read", path=text)
    return os.fdopen(fd, "rb")


def read_text(path: str | os.PathLike[str], *, what: str = "file", error: ErrorType = BadInputError) -> str:
    """A regular file's UTF-8 text, its size checked against the memory limit first."""
    with open_regular(path, what=what, error=error) as handle:
        size = os.fstat(handle.fileno()).st_size
        # str needs up to 4 bytes per character on top of the bytes read.
        check_bytes(size * 5, what=f"the {what}", path=os.fspath(path))
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"the {what} is not UTF-8 text: {exc}", path=os.fspath(path)) from exc


def loads_json(
    text: str,
    *,
    what: str = "JSON file",
    path: str | None = None,
    error: ErrorType = BadInputError,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """Parse JSON, turning malformed text and too-deep nesting into ``error``."""
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook, parse_constant=parse_constant)
    except RecursionError as exc:
        raise error(
            f"the {what} nests arrays or objects too deeply for Python's JSON parser "
            "(about 1000 levels); no valid file nests more than a few",
            path=path,
        ) from exc
    except ValueError as exc:
        raise error(f"the {what} is not valid JSON: {exc}", path=path) from exc


def read_json(
    path: str | os.PathLike[str], *, what: str = "JSON file", error: ErrorType = BadInputError, **hooks: Any
) -> Any:
    """Read and parse a regular JSON file (see :func:`read_text` and :func:`loads_json`)."""
    text = read_text(path, what=what, error=error)
    return loads_json(text, what=what, path=os.fspath(path), error=error, **hooks)


NPY_MAGIC = b"\x93NUMPY"
NPY_MAX_HEADER = 10_000
"""The largest ``.npy`` header read (numpy's own default limit; a real array's header is ~100 bytes)."""

_NPY_KEYS = frozenset({"descr", "fortran_order", "shape"})


class NpyHeaderError(ValueError):
    """An ``.npy`` header that is malformed or declares something no array can be."""


def _exactly(stream: IO[bytes], count: int, what: str) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise NpyHeaderError(f"the .npy data ends inside its {what}")
    return data


def _header_v3(text: str) -> tuple[Any, Any, Any]:
    """The fields of a version-3.0 header: version 2.0's dictionary, in UTF-8."""
    try:
        fields = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise NpyHeaderError(f"the .npy header is not a Python dictionary literal ({exc})") from None
    if not isinstance(fields, dict) or set(fields) != _NPY_KEYS:
        raise NpyHeaderError(
            "the .npy header must be a dictionary of exactly 'descr', 'fortran_order' and 'shape'"
        )
    try:
        dtype = np.lib.format.descr_to_dtype(fields["descr"])
    except (TypeError, ValueError, KeyError) as exc:
        raise NpyHeaderError(f"the .npy header's descr {fields['descr']!r} is not a dtype ({exc})") from None
    return fields["shape"], fields["fortran_order"], dtype


def npy_header(stream: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The ``(shape, fortran_order, dtype)`` an ``.npy`` header declares, read without the data and
    with numpy's public API only (every format version: 1.0, 2.0 and 3.0, whose header is 2.0's in
    UTF-8). The stream is left at the first byte of the data.

    Raises:
        NpyHeaderError: (a ValueError) not an ``.npy`` header, an unknown version, a header over
            :data:`NPY_MAX_HEADER` bytes, a truncated or malformed header, or a shape that is not a tuple
            of non-negative integers; the message is one sentence.
    """
    start = _exactly(stream, len(NPY_MAGIC) + 2, "magic string")
    if not start.startswith(NPY_MAGIC):
        raise NpyHeaderError("the data does not start with the .npy magic string")
    version = (start[-2], start[-1])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise NpyHeaderError(f"the .npy format version {version[0]}.{version[1]} is unknown")
    width = 2 if version == (1, 0) else 4
    raw_length = _exactly(stream, width, "header length")
    length = struct.unpack("<H" if width == 2 else "<I", raw_length)[0]
    if length > NPY_MAX_HEADER:
        raise NpyHeaderError(
            f"the .npy header is {length} bytes, more than the {NPY_MAX_HEADER} dmlshim reads "
            "(a real array's header is about a hundred bytes)"
        )
    header = _exactly(stream, length, "header")
    if version == (3, 0):
        try:
            text = header.decode("utf-8")
        except UnicodeDecodeError:
            raise NpyHeaderError("the version-3.0 .npy header is not UTF-8 text") from None
        shape, fortran, dtype = _header_v3(text)
    else:
        reader = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        try:
            shape, fortran, dtype = reader(io.BytesIO(raw_length + header), max_header_size=NPY_MAX_HEADER)
        except (ValueError, TypeError, SyntaxError, KeyError, EOFError, RecursionError) as exc:
            reason = str(exc).split("\n")[0].rstrip(".")
            raise NpyHeaderError(f"the .npy header is malformed ({reason})") from None
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise NpyHeaderError(
            f"the .npy header declares shape {shape!r}; a shape is a tuple of non-negative integers"
        )
    if not isinstance(fortran, bool):
        raise NpyHeaderError(f"the .npy header's fortran_order {fortran!r} is not True or False")
    return shape, fortran, np.dtype(dtype)


def read_npy(
    path: str | os.PathLike[str], *, what: str = ".npy file", error: ErrorType = BadInputError
) -> Any:
    """Load one ``.npy`` array without pickles, its declared shape checked against the memory limit first.

    Returns whatever ``numpy.load`` returns (an ``.npz`` archive's ``NpzFile`` included), so callers keep
    their own checks on it.
    """
    text = os.fspath(path)
    with open_regular(text, what=what, error=error) as handle:
        if handle.read(len(NPY_MAGIC)) == NPY_MAGIC:
            handle.seek(0)
            try:
                shape, _, dtype = npy_header(handle)
            except NpyHeaderError as exc:
                raise error(f"the {what} cannot be read: {exc}", path=text) from None
            if dtype.hasobject:
                raise error(
                    f"cannot read the {what}: it holds Python objects, which only unpickling could read",
                    path=text,
                    rule="arrays are loaded with allow_pickle=False",
                )
            check_tensor(shape, dtype, what=f"the array in {what}", path=text)
            size = os.fstat(handle.fileno()).st_size - handle.tell()  # the bytes after the header
            need = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
            if need > size:
                raise error(
                    f"the {what} declares shape {list(shape)} of {np.dtype(dtype)} ({need} bytes) but holds "
                    f"only {size} bytes",
                    path=text,
                )
        else:
            handle.seek(0)
            if handle.read(4) != b"PK\x03\x04":  # neither .npy nor .npz: numpy would try it as a pickle
                raise error(
                    f"the {what} is not a numpy array file: it starts with neither the .npy magic string nor "
                    "an .npz (zip) header",
                    path=text,
                    rule="arrays are loaded with allow_pickle=False",
                )
        handle.seek(0)
        return np.load(handle, allow_pickle=False)


def same_bytes(target: str | os.PathLike[str], tmp: str | os.PathLike[str]) -> bool:
    """Whether ``target`` is a regular file (not a link, FIFO or device) holding exactly ``tmp``'s bytes
    (a file another process wrote: compared a block at a time, never read whole)."""
    try:
        flags = portable.read_flags(follow_links=False)  # a link or a FIFO is no twin
        with open(target, "rb", opener=lambda p, _: os.open(p, flags)) as there, open(tmp, "rb") as ours:
            if not stat.S_ISREG(os.fstat(there.fileno()).st_mode):
                return False
            if os.fstat(there.fileno()).st_size != os.fstat(ours.fileno()).st_size:
                return False
            while True:
                block = ours.read(1 << 20)
                if block != there.read(1 << 20):
                    return False
                if not block:
                    return True
    except OSError:
        return False
