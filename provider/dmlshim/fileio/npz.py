"""Reading and writing ``.npz`` input and output files safely.

Reading never unpickles, never allocates more than ``DMLSHIM_MEMORY_LIMIT`` (each member's shape and type
are read from its ``.npy`` header and checked before its data is inflated: a small compressed file may
declare gigabytes), and says what a file is when it is not an ``.npz`` archive (an ONNX model, a single
``.npy`` array, JSON, text, a pickle). polygraphy's ``--save-inputs`` JSON files are read too.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np

from ..errors import BadInputError
from ..limits import check_bytes, check_tensor
from ..text import printable
from .polygraphy_json import arrays_from_document
from .reading import loads_json, npy_header

__all__ = ["load_npz", "save_npz", "sniff"]

logger = logging.getLogger(__name__)

_SAVE_HINT = "save the inputs with numpy.savez(path, NAME=array, ...)"
_PICKLE_RULE = "inputs are loaded with allow_pickle=False"
_READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, NotImplementedError, RuntimeError)
# ModelProto field tags that can follow ir_version (field 1) at the start of a serialized ONNX model.
_ONNX_SECOND_TAGS = frozenset({0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x52, 0x5A, 0x62, 0x6A, 0x72})


def sniff(head: bytes, name: str = "") -> str:
    """What a file is from its first bytes and name: ``npz``, ``npy``, ``onnx``, ``json``, ``pickle``,
    ``text``, ``empty`` or ``unknown``."""
    if not head:
        return "empty"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "npz"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if name.lower().endswith((".onnx", ".ort")):
        return "onnx"
    if len(head) >= 3 and head[0] == 0x08 and 1 <= head[1] <= 0x20 and head[2] in _ONNX_SECOND_TAGS:
        return "onnx"
    if head[0] == 0x80 and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if stripped[:1] in (b"{", b"["):
        return "json"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = head[:-3].decode("utf-8", errors="strict") if _utf8_cut(head) else ""
    if text and all(c.isprintable() or c in "\r\n\t" for c in text):
        return "text"
    return "unknown"


def _utf8_cut(head: bytes) -> bool:
    """The bytes are UTF-8 but for a character cut at the end."""
    try:
        head[:-3].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _not_npz(kind: str, head: bytes, where: str) -> BadInputError:
    messages = {
        "empty": "the inputs file is empty, not an .npz archive",
        "npy": "expected an .npz archive (numpy.savez) mapping input names to arrays, found a single .npy "
        "array; " + _SAVE_HINT,
        "onnx": "the inputs file is an ONNX model, not an .npz of inputs: give the model as MODEL and the "
        f"inputs with --inputs FILE.npz ({_SAVE_HINT})",
        "json": 'the inputs file is JSON but not polygraphy\'s inputs format (a list of {NAME: {"array": '
        f"BASE64 .npy}}}} feeds, as polygraphy run --save-inputs writes); {_SAVE_HINT}",
        "pickle": "the inputs file is a Python pickle; refusing to unpickle it (that would run code from the "
        f"file); {_SAVE_HINT}",
        "text": f"the inputs file is text, not an .npz archive; {_SAVE_HINT}",
    }
    message = messages.get(kind) or (
        f"not an .npz archive (numpy.savez): the file starts with bytes {head[:8].hex(' ')}; {_SAVE_HINT}"
    )
    return BadInputError(message, path=where, rule=_PICKLE_RULE if kind == "pickle" else None)


def _open(path: str | Path | BinaryIO) -> tuple[BinaryIO, str, bool]:
    """The stream, its name for messages, and whether we opened it (and must close it)."""
    if isinstance(path, (str, Path)):
        where = str(path)
        p = Path(path)
        if not p.exists():
            raise BadInputError("input file not found", path=where)
        if p.is_dir():
            raise BadInputError("the inputs path is a directory, not an .npz file", path=where)
        if not p.is_file():
            raise BadInputError(
                "the inputs path is not a regular file (a FIFO, device or socket)", path=where
            )
        try:
            return p.open("rb"), where, True
        except OSError as exc:
            raise BadInputError(f"cannot read the inputs file: {exc.strerror or exc}", path=where) from exc
    where = str(getattr(path, "name", "<stream>"))
    if not path.seekable():
        return io.BytesIO(path.read()), where, True
    return path, where, False


def load_npz(path: str | Path | BinaryIO) -> dict[str, np.ndarray]:
    """Load every array of an ``.npz`` file, refusing pickled objects and arrays over the memory limit.

    Raises:
        BadInputError: the file is missing, not an ``.npz`` archive (the message says what it is), is
            damaged, holds an object array (which could only be read by unpickling, i.e. running code from
            the file), or a member that is not an ``.npy`` array.
        TooLargeError: a member's declared shape, or all members together, exceed the memory limit
            (checked from the headers, before any data is inflated).
    """
    stream, where, owned = _open(path)
    try:
        start = stream.tell()
        head = stream.read(64)
        stream.seek(start)
        kind = sniff(head, where)
        if kind == "json":
            return _load_polygraphy_json(stream, head, where)
        if kind != "npz":
            raise _not_npz(kind, head, where)
        try:
            with zipfile.ZipFile(stream) as archive:
                return _load_members(archive, where)
        except zipfile.BadZipFile as exc:
            raise BadInputError(f"not a readable .npz file: {exc}", path=where) from exc
    finally:
        if owned:
            stream.close()


def _load_members(archive: zipfile.ZipFile, where: str) -> dict[str, np.ndarray]:
    # Each member is opened twice (headers first, all checked against the memory limit before any data
    # is inflated) but its header parsed once: the second pass skips it and reads the data as declared.
    infos = [i for i in archive.infolist() if not i.filename.endswith("/")]  # is_dir() fails on ""
    if any(not i.filename for i in infos):
        raise BadInputError(
            "a member of the .npz file has an empty name: no array can be named by it", path=where
        )
    headers: list[tuple[zipfile.ZipInfo, str, tuple[int, ...], bool, np.dtype, int, int]] = []
    for info in infos:
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        try:
            with archive.open(info) as member:
                shape, fortran, dtype = npy_header(member)
                header_len = member.tell()
        except _READ_ERRORS as exc:
            raise BadInputError(
                f"member {key!r} is not a numpy array (.npy) file: {exc}", path=where, tensor=key
            ) from exc
        if dtype.hasobject:
            raise BadInputError(
                f"array {key!r} holds Python objects, which can only be loaded by unpickling; "
                "refusing (allow_pickle=False)",
                path=where,
                tensor=key,
                rule=_PICKLE_RULE,
            )
        check_tensor(shape, dtype, tensor=key, path=where, what="array in the inputs file")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if info.file_size < header_len + nbytes:
            raise BadInputError(
                f"array {key!r} is truncated: its header declares shape {list(shape)} {dtype} "
                f"({nbytes} bytes) but the member holds {max(info.file_size - header_len, 0)} bytes",
                path=where,
                tensor=key,
            )
        headers.append((info, key, shape, fortran, dtype, header_len, nbytes))
    check_bytes(
        sum(h[-1] for h in headers), what=f"the {len(headers)} arrays of the inputs file together", path=where
    )
    out: dict[str, np.ndarray] = {}
    for info, key, shape, fortran, dtype, header_len, nbytes in headers:
        try:
            with archive.open(info) as member:
                out[key] = _read_data(member, shape, fortran, dtype, header_len, nbytes)
        except _READ_ERRORS as exc:
            raise BadInputError(f"array {key!r} cannot be read: {exc}", path=where, tensor=key) from exc
        if dtype.kind == "S":
            _require_utf8(out[key], key, where)
    logger.debug("loaded %d arrays from %s", len(out), where)
    return out


def _require_utf8(array: np.ndarray, key: str, where: str) -> None:
    """A bytes array is a ``tensor(string)`` feed: onnxruntime's run decodes each element as UTF-8 and
    raises ``UnicodeDecodeError`` where one is not (dmlshim's sessions too); named here, one line."""
    for position, value in enumerate(array.reshape(-1)):
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInputError(
                f"array {key!r} holds bytes that are no UTF-8 at element {position} ({exc.reason} at byte "
                f"{exc.start}): onnxruntime's run refuses such a string feed (UnicodeDecodeError)",
                path=where,
                tensor=key,
                value=bytes(value),
                rule="a bytes array fed as tensor(string) is UTF-8, as onnxruntime decodes it",
            ) from exc


def _read_data(
    member: IO[bytes], shape: tuple[int, ...], fortran: bool, dtype: np.dtype, header_len: int, nbytes: int
) -> np.ndarray:
    """The array whose header (``header_len`` bytes, already parsed) starts ``member``."""
    if nbytes == 0:
        return np.zeros(shape, dtype=dtype, order="F" if fortran else "C")
    if len(member.read(header_len)) != header_len:
        raise EOFError("the member ends inside its .npy header")
    buffer = bytearray(nbytes)
    view = memoryview(buffer)
    filled = 0
    while filled < nbytes:
        got = member.readinto(view[filled:])  # type: ignore[attr-defined]
        if not got:
            raise EOFError(f"the data ends after {filled} of {nbytes} bytes")
        filled += got
    flat = np.frombuffer(buffer, dtype=dtype)
    return flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)


def _load_polygraphy_json(stream: BinaryIO, head: bytes, where: str) -> dict[str, np.ndarray]:
    """polygraphy's ``--save-inputs`` file: a list of feeds (one per iteration; the first is used), each
    mapping an input name to ``{"array": base64 of the .npy bytes}``."""
    size = _remaining(stream)
    # JSON text and its parsed form take a few times the file's size; the arrays are at most 3/4 of it.
    check_tensor((4 * size,), np.uint8, path=where, what="the JSON inputs file once parsed")
    try:
        text = io.TextIOWrapper(stream, encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise BadInputError(f"the inputs file is not valid JSON: {exc}", path=where) from exc
    doc = loads_json(text, what="JSON inputs file", path=where)
    feeds = doc[0] if isinstance(doc, list) and doc else doc
    if not isinstance(feeds, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("array"), str) for v in feeds.values()
    ):
        raise _not_npz("json", head, where)
    out = arrays_from_document(doc, where)
    logger.debug("loaded %d arrays from polygraphy JSON %s", len(out), where)
    return out


def _remaining(stream: BinaryIO) -> int:
    start = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(start)
    return end - start


_ZIP_NAME_MAX_BYTES = 65535
"""A zip member name's longest encoding (a 16-bit length field)."""


def save_npz(target: IO[bytes], arrays: Mapping[str, Any]) -> None:
    """Write arrays in ``numpy.savez``'s format (one ``NAME.npy`` member each), without pickles.

    Written member by member rather than through ``numpy.savez(**arrays)`` so that output names such as
    ``file`` cannot collide with that function's own parameters.
    """
    for name in arrays:
        if len((name + ".npy").encode("utf-8", "surrogatepass")) > _ZIP_NAME_MAX_BYTES:
            shown = f"{printable(name[:60])}... ({len(name)} characters)"
            raise BadInputError(
                f"the name {shown} is too long for an .npz member name ({_ZIP_NAME_MAX_BYTES} bytes with "
                "'.npy'); write a .json file (polygraphy's format) instead",
                tensor=shown,
                rule="an .npz file names each array by a zip member name of at most 65535 bytes",
            )
        if "\0" in name:  # a zip member's name ends at a NUL: the array would come back under another name
            raise BadInputError(
                f"the name {name!r} holds a NUL character, which an .npz member name cannot hold; write a "
                ".json file (polygraphy's format) instead",
                tensor=name,
                value=name,
                rule="an .npz file names each array by a zip member name, which ends at a NUL",
            )
    with zipfile.ZipFile(target, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)
