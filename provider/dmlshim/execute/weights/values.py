"""Weight values read on demand from the model's files, for a model loaded without its weights.

A session built from a file with onnxruntime's default options keeps the model without its large weights
(:func:`dmlshim.execute.weights.file_slices.read_weightless`): their initializers are external data pointing
at their bytes, in the .onnx file itself or in its external-data file. onnxruntime reads them there itself;
what dmlshim needs of them (the static inputs of emulated nodes: an embedding table a Gather reads, say)
is memory-mapped read-only from the file (:func:`initializer_value`), so only the pages a kernel touches
are ever read, and nothing writes them; bytes at an offset that is no multiple of the element size (most
weights inline in an .onnx file) are read once into aligned memory instead, since numpy copies an
unaligned array whole on every ``np.take``. Every other consumer gets the whole model
(:func:`with_weights`), as it was before.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import BadModelError
from ...fileio.external_data import load_external_data
from ...fileio.nul_paths import location_read
from ...fileio.reading import open_regular
from ...limits import check_bytes
from ...model.weightless import is_external, tensor_nbytes
from .file_slices import FileSlice

logger = logging.getLogger(__name__)

_MAPPABLE: dict[int, type] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.UINT16: np.uint16,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.BOOL: np.bool_,
    onnx.TensorProto.COMPLEX64: np.complex64,
    onnx.TensorProto.COMPLEX128: np.complex128,
}
"""Element types whose external bytes are the array's bytes (little-endian, one element per item); the
others (bfloat16, float8, 4-bit types) go through ``numpy_helper.to_array`` as onnx decodes them."""


def external_slice(tensor: onnx.TensorProto) -> FileSlice:
    """Where an external-data tensor's bytes lie (already checked by the model check)."""
    info = {e.key: e.value for e in tensor.external_data}
    length = int(info["length"]) if "length" in info else tensor_nbytes(tensor)
    return FileSlice(location_read(info.get("location", "")), int(info.get("offset", "0")), length)


def file_stamp(path: str) -> tuple[int, int] | None:
    """A file's size and modification time (None when it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def weight_files(model: onnx.ModelProto, folder: str) -> dict[str, tuple[int, int] | None]:
    """The files the top-level external initializers of ``model`` point at, each with its stamp."""
    names = {external_slice(t).location for t in model.graph.initializer if is_external(t)}
    return {n: file_stamp(os.path.join(folder, n)) for n in sorted(names)}


def check_unchanged(stamps: Mapping[str, tuple[int, int] | None], folder: str, model_path: str) -> None:
    """Refuse to read weights from files that changed since the model was read.

    Raises:
        BadModelError: a file's size or modification time differs from when the session was created.
    """
    for name, stamp in stamps.items():
        if file_stamp(os.path.join(folder, name)) != stamp:
            raise BadModelError(
                f"{name!r} changed since the session was created; the session reads the model's weights "
                "from it when it builds an onnxruntime session or reads a weight, so it cannot go on with "
                "other bytes (create the session again)",
                path=model_path,
                value=name,
                rule="a model's files stay as they were while a session built from them is in use",
            )


def _narrow_dtype(elem_type: int) -> Any:
    """The ml_dtypes dtype onnx decodes a bfloat16 or float8 tensor to, whose bytes are the file's (one
    element per byte or two, little-endian): such a weight is mapped like the others, so an edit of the
    file shows as it does in onnxruntime's mapped session. None for other types, and on a big-endian
    machine."""
    if sys.byteorder != "little" or elem_type not in _NARROW:
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None
    return dtype if dtype.kind == "V" and dtype.itemsize == _NARROW[elem_type] else None


_NARROW = {
    onnx.TensorProto.BFLOAT16: 2,
    onnx.TensorProto.FLOAT8E4M3FN: 1,
    onnx.TensorProto.FLOAT8E4M3FNUZ: 1,
    onnx.TensorProto.FLOAT8E5M2: 1,
    onnx.TensorProto.FLOAT8E5M2FNUZ: 1,
}


def initializer_value(tensor: onnx.TensorProto, folder: str | None) -> np.ndarray:
    """The value of an initializer: ``numpy_helper.to_array`` for one held in the model; for external
    data (relative to ``folder``), a read-only memory map of its bytes where the element type and the
    offset's alignment allow, else its bytes read (aligned, read-only) and decoded as onnx decodes them.

    Raises:
        BadModelError: the tensor is external but no folder is known, or its file cannot be read.
    """
    if not is_external(tensor):
        return numpy_helper.to_array(tensor)
    where = external_slice(tensor)
    if folder is None:
        raise BadModelError(
            f"initializer {tensor.name!r} keeps its data in {where.location!r}, but no folder is known",
            tensor=tensor.name,
        )
    file = os.path.join(folder, where.location)
    shape = tuple(int(d) for d in tensor.dims)
    dtype = _MAPPABLE.get(tensor.data_type) or _narrow_dtype(tensor.data_type)
    if dtype is not None and where.length and where.length == tensor_nbytes(tensor):
        if where.offset % np.dtype(dtype).itemsize:
            # Bytes at an offset that is no multiple of the element size would make an unaligned array,
            # which numpy copies whole on every np.take: read them once into aligned memory instead.
            return _read_aligned(tensor, file, where, np.dtype(dtype).newbyteorder("<"), shape)
        try:
            mapped = np.memmap(
                file, dtype=np.dtype(dtype).newbyteorder("<"), mode="r", offset=where.offset, shape=shape
            )
        except (OSError, ValueError) as exc:
            raise BadModelError(
                f"cannot map the data of initializer {tensor.name!r} from {where.location!r}: {exc}",
                tensor=tensor.name,
                path=file,
            ) from exc
        value = mapped.view(np.ndarray)
        if sys.byteorder != "little":
            value = value.astype(np.dtype(dtype))
        return value
    check_bytes(where.length or 0, what=f"the data of initializer {tensor.name!r}", path=file)
    with open_regular(file, what="external data", error=BadModelError) as handle:
        handle.seek(where.offset)
        data = handle.read(where.length)
    if len(data) != where.length:
        raise BadModelError(
            f"initializer {tensor.name!r}: its data in {where.location!r} ends after {len(data)} of "
            f"{where.length} bytes",
            tensor=tensor.name,
            path=file,
        )
    inline = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    inline.raw_data = data
    return numpy_helper.to_array(inline)


def _read_aligned(
    tensor: onnx.TensorProto, file: str, where: FileSlice, dtype: np.dtype, shape: tuple[int, ...]
) -> np.ndarray:
    count = where.length // dtype.itemsize
    check_bytes(where.length, what=f"the data of initializer {tensor.name!r}", path=file)
    with open_regular(file, what="external data", error=BadModelError) as handle:
        handle.seek(where.offset)
        value = np.fromfile(handle, dtype=dtype, count=count)
    if value.size != count:
        raise BadModelError(
            f"initializer {tensor.name!r}: its data in {where.location!r} ends after {value.nbytes} of "
            f"{where.length} bytes",
            tensor=tensor.name,
            path=file,
        )
    value = value.reshape(shape).astype(dtype.newbyteorder("="), copy=False)
    value.flags.writeable = False  # as the mapped ones: a static value is never written
    return value


def load_small_external_data(
    model: onnx.ModelProto, path: Path, min_bytes: int, checked: int | None = None
) -> None:
    """Load the external data of every tensor of ``model`` but its top-level initializers of at least
    ``min_bytes`` (small ones drive shapes and stay in the model, as small inline ones do; those in
    subgraphs, node attributes and sparse initializers are read from the model by the engines), checked
    as :func:`dmlshim.fileio.external_data.load_external_data` checks it.

    The large ones are hidden from the loader by their location alone, nothing moved: taking the
    initializers out and back copied every inline one twice (a caller's 100 MB add_external_initializers
    value, inlined by then, added 200 MB to a session's build).

    ``checked``: how many external-data tensors the model check found in ``model`` (one entry each):
    when they are all large top-level initializers, nothing is read and the model is not walked again."""
    large = [t for t in model.graph.initializer if is_external(t) and tensor_nbytes(t) >= min_bytes]
    if checked is not None and checked == len(large):
        return
    for tensor in large:
        tensor.data_location = onnx.TensorProto.DEFAULT
    try:
        load_external_data(model, path)
    finally:
        for tensor in large:
            tensor.data_location = onnx.TensorProto.EXTERNAL


def with_weights(
    model: onnx.ModelProto,
    path: str,
    stamps: Mapping[str, tuple[int, int] | None],
    shown: str | None = None,
) -> onnx.ModelProto:
    """A copy of ``model`` (read from ``path`` without its weights: external data relative to its
    folder) holding every weight, as the model was before it was read weightless.

    Args:
        shown: the model file named in errors (default ``path``).

    Raises:
        BadModelError: a file changed since the model was read, or cannot be read.
    """
    check_unchanged(stamps, os.path.dirname(os.path.abspath(path)), shown or path)
    full = onnx.ModelProto()
    full.CopyFrom(model)
    load_external_data(full, Path(path))
    logger.debug("weights of %s read into the model for an engine that needs them all", path)
    return full
