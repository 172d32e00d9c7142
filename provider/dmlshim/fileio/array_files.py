"""Files of named arrays (inputs and outputs): ``.npz`` or polygraphy's JSON, chosen by the file's content
when reading and by its extension when writing. Every write goes through :mod:`dmlshim.fileio.files`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInputError
from . import files
from .npz import load_npz, sniff
from .polygraphy_json import arrays_from_document, inputs_document, outputs_document
from .reading import open_regular, read_json


def is_json_path(path: str | os.PathLike[str]) -> bool:
    """Whether arrays written to ``path`` go in polygraphy's JSON format (a ``.json`` name)."""
    return Path(path).suffix.lower() == ".json"


def as_raw_bits(value: Any) -> Any:
    """A bfloat16 or float8 array (an ml_dtypes type, which ``.npy`` can only store as untyped bytes,
    ``|V1``) as its raw bits in unsigned integers of its width: what onnxruntime's ``run`` returns for a
    float8 output, and what ``--inputs`` reads back as the same values. Any other value unchanged."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "V" and value.dtype.names is None:
        width = {1: np.uint8, 2: np.uint16}.get(value.dtype.itemsize)
        if width is not None:
            return value.view(width)
    return value


def read_arrays(path: str | os.PathLike[str], *, what: str = "arrays file") -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, a polygraphy inputs file or a polygraphy ``RunResults`` file.

    Raises:
        BadInputError: the file is missing, of another kind (the message says which), or damaged.
        TooLargeError: an array's declared size exceeds the memory limit.
    """
    with open_regular(path, what=what) as handle:
        head = handle.read(64)
    if sniff(head, os.fspath(path)) == "json":
        return arrays_from_document(read_json(path, what=what), os.fspath(path))
    return load_npz(os.fspath(path))


def _storable(value: Any, name: str, kind: str, path: str | os.PathLike[str]) -> Any:
    """A tensor(string) array (onnxruntime gives an object array of ``str``) as a numpy text array, which
    an ``.npz`` or polygraphy file holds without pickling (``--inputs`` reads it back as the strings).

    Raises:
        BadInputError: an element is no ``str`` or ends in NUL, which a numpy text array would drop (before
            issue 35's round 54, ``validate --save-outputs`` died on any string output with numpy's
            ``ValueError: Object arrays cannot be saved``).
    """
    if not isinstance(value, np.ndarray) or value.dtype != object:
        return value
    flat = value.reshape(-1).tolist()
    bad = next((k for k, v in enumerate(flat) if not isinstance(v, str) or v.endswith("\0")), None)
    if bad is not None:
        raise BadInputError(
            f"{kind} array {name!r} element {bad} ({flat[bad]!r:.40}) cannot be stored: files hold strings "
            "as numpy text arrays, which drop a trailing NUL, and hold no other Python object",
            rule="arrays are written without pickles",
            tensor=name,
            path=os.fspath(path),
        )
    return np.array(flat, dtype=str).reshape(value.shape) if flat else np.zeros(value.shape, dtype="<U1")


def write_arrays(
    path: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    *,
    kind: str,
    overwrite: bool = False,
    inputs: tuple[Any, ...] = (),
) -> Path:
    """Write ``arrays`` to ``path``: polygraphy JSON for a ``.json`` name (an inputs list for
    ``kind="inputs"``, a ``RunResults`` for ``kind="outputs"``), else ``.npz``. A bfloat16 or float8
    array goes in as its raw bits (:func:`as_raw_bits`)."""
    what = f"{kind} file"
    arrays = {name: _storable(as_raw_bits(value), name, kind, path) for name, value in arrays.items()}
    if is_json_path(path):
        doc = inputs_document(arrays) if kind == "inputs" else outputs_document(arrays)
        return files.write_json(path, doc, overwrite=overwrite, inputs=inputs, what=what)
    return files.write_npz(path, arrays, overwrite=overwrite, inputs=inputs, what=what)
