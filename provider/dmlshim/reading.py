"""Careful reading of files named by users or by other files (DxDispatch ``sourcePath``, ``index.json``).

* Only regular files are opened: a FIFO, a device or a socket is refused before any read that could
  block forever (the file is opened non-blocking and checked with ``fstat``).
* Sizes are checked against the memory limit (:func:`dmlshim.limits.memory_limit`) before reading: the
  file's size for bytes and JSON, the header's declared shape for ``.npy``.
* JSON nested deeper than Python can parse (``RecursionError``) becomes an error naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from typing import IO, Any, BinaryIO

import numpy as np

from . import portable
from .errors import BadInputError, DmlShimError
from .limits import check_bytes, check_tensor

__all__ = ["loads_json", "open_regular", "read_json", "read_npy", "read_text"]

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


def npy_header(stream: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The ``(shape, fortran_order, dtype)`` an ``.npy`` header declares, read without the data.

    Raises:
        ValueError: not an ``.npy`` header, or a format version this numpy cannot read.
    """
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(stream)
    reader = getattr(np.lib.format, "_read_array_header", None)
    if reader is None:
        raise ValueError(f".npy format version {version} is not supported by this numpy")
    return reader(stream, version)


def read_npy(
    path: str | os.PathLike[str], *, what: str = ".npy file", error: ErrorType = BadInputError
) -> Any:
    """Load one ``.npy`` array without pickles, its declared shape checked against the memory limit first.

    Returns whatever ``numpy.load`` returns (an ``.npz`` archive's ``NpzFile`` included), so callers keep
    their own checks on it.
    """
    text = os.fspath(path)
    with open_regular(text, what=what, error=error) as handle:
        try:
            shape, _, dtype = npy_header(handle)
        except (ValueError, OSError, TypeError, SyntaxError):
            shape = None  # not an .npy header: numpy.load below says what it is
        if shape is not None:
            check_tensor(shape, dtype, what=f"the array in {what}", path=text)
            size = os.fstat(handle.fileno()).st_size
            need = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
            if need > size:
                raise error(
                    f"the {what} declares shape {list(shape)} of {np.dtype(dtype)} ({need} bytes) but holds "
                    f"only {size} bytes",
                    path=text,
                )
        handle.seek(0)
        return np.load(handle, allow_pickle=False)
