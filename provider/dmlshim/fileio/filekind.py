"""Say what a file is when a command is given the wrong kind (an .npz as a model, an .onnx to replay).

The kind comes from the file's first bytes (:func:`dmlshim.fileio.npz.sniff`), so the message names what
the file is instead of the parser's complaint about it ("Wire format was corrupt", "not UTF-8 text").
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BadInputError, BadModelError
from .npz import sniff

__all__ = ["KIND_NAMES", "kind_of", "require_dxdispatch_model", "require_onnx_model"]

KIND_NAMES = {
    "onnx": "an ONNX model",
    "npz": "an .npz archive of arrays (numpy.savez)",
    "npy": "a single .npy array",
    "json": "a JSON file",
    "pickle": "a Python pickle",
    "text": "a text file",
    "empty": "an empty file",
    "unknown": "a binary file of unknown kind",
}
"""How messages name each kind :func:`kind_of` returns."""

_HEAD_BYTES = 64


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """The kind of a regular file (a key of :data:`KIND_NAMES`), None when it cannot be read as one."""
    file = Path(path)
    try:
        if not file.is_file():
            return None
        with open(file, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return None
    return sniff(head, file.name)


def require_onnx_model(path: str | os.PathLike[str]) -> None:
    """Refuse a file that is clearly not a binary ONNX model, naming what it is.

    Raises:
        BadModelError: the file is an .npz/.npy archive, JSON (a DxDispatch model, or ONNX's JSON form,
            which dmlshim does not read), a pickle or text.
    """
    kind = kind_of(path)
    hints = {
        "npz": "inputs go to --inputs",
        "npy": "inputs go to --inputs as an .npz",
        "json": "a DxDispatch model.json runs with dmlshim replay; dmlshim reads binary .onnx models",
    }
    if kind in ("npz", "npy", "json", "pickle", "text"):
        hint = hints.get(kind)
        raise BadModelError(
            f"this is {KIND_NAMES[kind]}, not an ONNX model" + (f" ({hint})" if hint else ""),
            path=os.fspath(path),
            value=kind,
        )


def require_dxdispatch_model(path: str | os.PathLike[str]) -> None:
    """Refuse a file that is not JSON, naming what it is (replay reads DxDispatch's JSON model files).

    Raises:
        BadInputError: the file is an ONNX model, an array archive, a pickle, empty or binary.
    """
    kind = kind_of(path)
    if kind is None or kind in ("json", "text"):
        return  # missing files and JSON with a leading comment get the reader's own message
    hint = {
        "onnx": "dmlshim export MODEL.onnx -o DIR writes one model.json per gather/scatter node to replay",
    }.get(kind, "replay takes the model.json that dmlshim export writes, or any DxDispatch model")
    raise BadInputError(
        f"this is {KIND_NAMES[kind]}, not a DxDispatch JSON model file ({hint})",
        path=os.fspath(path),
        value=kind,
    )
