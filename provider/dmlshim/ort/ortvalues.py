"""Values crossing between a caller and a dmlshim session as onnxruntime's Python API hands them over:
numpy arrays read as onnxruntime reads them, OrtValues made for outputs numpy cannot hold, views of bound
CPU memory, and ``run_with_ortvaluevector``'s vectors.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..errors import BadInputError, NotSupportedError
from ..execute.plan.cpu_step import NUMPY_TENSOR_TYPES
from ..runtime.exceptions import with_onnxruntime_class
from ..runtime.string_values import string_ortvalue

logger = logging.getLogger(__name__)


CPU_ONLY = (
    "dmlshim runs on the CPU (DirectML is emulated with numpy kernels); bind CPU memory: "
    "device_type='cpu', bind_cpu_input, or a CPU OrtValue"
)


def check_cpu(device_type: str, what: str) -> None:
    if str(device_type).lower() != "cpu":
        raise NotSupportedError(f"{what} on device {device_type!r}: {CPU_ONLY}", value=device_type)


_STORED_BYTES = {
    getattr(TensorProto, name): size
    for name, size in (
        ("BFLOAT16", 2),
        ("FLOAT8E4M3FN", 1),
        ("FLOAT8E4M3FNUZ", 1),
        ("FLOAT8E5M2", 1),
        ("FLOAT8E5M2FNUZ", 1),
    )
    if hasattr(TensorProto, name)
}
"""Bytes per element of the ONNX types numpy has no type of its own for. onnx before 1.18 maps them to
float32; a view of bound memory must have their own size (their bits, as unsigned integers)."""


def numpy_element_type(element_type: Any) -> np.dtype:
    """A numpy dtype from a numpy type or an ONNX element type number, as onnxruntime accepts both."""
    try:
        if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(int(element_type)))
            size = _STORED_BYTES.get(int(element_type))
            return dtype if size is None or dtype.itemsize == size else np.dtype(f"u{size}")
        return np.dtype(element_type)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"unknown element type {element_type!r}", value=element_type) from exc


def array_at(pointer: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of CPU memory at ``pointer`` holding a tensor of ``element_type`` and ``shape``."""
    dtype = numpy_element_type(element_type)
    if dtype.kind in "OUS":  # numpy's str, bytes and object all mean a string tensor to onnxruntime
        raise with_onnxruntime_class(
            BadInputError(
                "Only binding non-string Tensors is currently supported (dmlshim: memory at a pointer holds "
                "no Python strings; bind an OrtValue or feed the array instead)",
                value=str(dtype),
            ),
            RuntimeError,
        )
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise BadInputError(f"a bound buffer's shape must be non-negative, not {list(dims)}", value=dims)
    count = int(np.prod(dims, dtype=np.int64))
    if count == 0:
        return np.zeros(dims, dtype)
    if not pointer:
        raise BadInputError("buffer_ptr is null", value=pointer)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(pointer))
    return np.frombuffer(memoryview(raw), dtype=dtype, count=count).reshape(dims)


_NPY_USERDEF = 256
"""numpy's first number for a type an extension registers (ml_dtypes' bfloat16, float8, int4)."""


def as_array(value: Any) -> Any:
    """An ``onnxruntime.OrtValue`` as the numpy array it holds (a view for CPU tensors), an ndarray subclass
    as a plain ndarray view; other values, and OrtValues of element types numpy cannot hold, unchanged."""
    if isinstance(value, ort.OrtValue):
        if value.is_sparse_tensor():
            return value  # onnxruntime's sessions take it as it is (no gather/scatter reads one)
        if not value.is_tensor():
            raise NotSupportedError(
                "only tensor and sparse tensor OrtValues can be fed to a dmlshim session, not sequences",
                value=value.data_type(),
            )
        check_cpu(value.device_name(), "an OrtValue")
        if value.data_type() not in NUMPY_TENSOR_TYPES:
            return (
                value  # bfloat16, float8, 4-bit: numpy cannot hold it; onnxruntime's sessions take it as is
            )
        return value.numpy()
    if isinstance(value, np.ndarray) and type(value) is not np.ndarray:
        # a subclass (np.matrix, a masked array, np.memmap): onnxruntime reads its buffer as a plain array
        return np.asarray(value)
    return value


def plain_arrays(values: Iterable[Any]) -> bool:
    """Whether every value is a plain ndarray of a type numpy knows natively: one that
    :func:`refuse_unconvertible_array` accepts and :func:`as_array` returns as it is (checked on every run,
    so without a call per value)."""
    ndarray, userdef = np.ndarray, _NPY_USERDEF
    for value in values:  # noqa: SIM110 - a loop: no generator frame on every run
        if type(value) is not ndarray or value.dtype.num >= userdef:
            return False
    return True


def refuse_unconvertible_array(name: str, value: Any) -> None:
    """Raise NotSupportedError (a ``RuntimeError``, as onnxruntime's) for a numpy array of a type numpy
    only knows through an extension such as ml_dtypes (bfloat16, float8): onnxruntime's ``run`` takes no
    such array ("Numpy_type 256 can't be converted to MLDataType"), only an OrtValue of that type."""
    if not isinstance(value, np.ndarray) or value.dtype.num < _NPY_USERDEF:
        return
    try:
        elem = helper.tensor_dtype_to_string(helper.np_dtype_to_tensor_dtype(value.dtype))
    except (KeyError, TypeError, ValueError):
        elem = "its ONNX element type"
    view = "uint8" if value.dtype.itemsize == 1 else "uint16"
    raise NotSupportedError(
        f"feed {name!r} is a numpy {value.dtype} array, a type onnxruntime's run takes no numpy array of "
        '(onnxruntime raises "Numpy_type ... can\'t be converted to MLDataType" here); feed '
        "onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type"
        f"(array.view(numpy.{view}), onnx.{elem}) instead",
        tensor=name,
        value=str(value.dtype),
    ) from RuntimeError(f"Numpy_type {value.dtype.num} can't be converted to MLDataType.")


def numpy_outputs(
    names: Sequence[str], outputs: Sequence[Any], instead: str = "ask for it with run_with_ort_values"
) -> list[Any]:
    """``outputs`` as ``run()`` returns them: a tensor kept as an OrtValue becomes what onnxruntime's
    ``OrtValue.numpy()`` gives (float8e4m3fn: its bytes as uint8, as onnxruntime's ``run`` returns it).

    Raises:
        NotSupportedError: (a ``RuntimeError``, as onnxruntime's) a tensor onnxruntime has no numpy type
            for (bfloat16, the other float8 types, 4-bit), which onnxruntime's ``run`` refuses too.
    """
    ndarray = np.ndarray
    for value in outputs:
        if type(value) is not ndarray:
            break
    else:  # arrays only (the common case): nothing to convert
        return list(outputs)
    out = list(outputs)
    for k, (name, value) in enumerate(zip(names, outputs, strict=True)):
        if type(value) is not ndarray and isinstance(value, ort.OrtValue) and value.is_tensor():
            try:
                out[k] = value.numpy()
                continue
            except RuntimeError:
                pass
            raise NotSupportedError(
                f"output {name!r} is a {value.data_type()}, which numpy cannot hold, so it cannot be "
                'returned as an array (onnxruntime raises here too: "No corresponding Numpy type"); '
                f"{instead}",
                tensor=name,
                value=value.data_type(),
            ) from RuntimeError(f"No corresponding Numpy type for Tensor Type. {value.data_type()}")
    return out


def strings_decoded(values: Sequence[Any]) -> list[Any]:
    """A run's outputs with each ``tensor(string)`` OrtValue made the array ``run`` gives: an engine keeps a
    string value as onnxruntime's OrtValue when its bytes are no UTF-8 (a partition's output crossing to
    the next); where it is an output, ``run`` decodes it, as onnxruntime's does.

    Raises:
        UnicodeDecodeError: such a string output (onnxruntime's ``run`` raises it too)."""
    return [
        v.numpy()
        if isinstance(v, ort.OrtValue) and v.is_tensor() and v.data_type() == "tensor(string)"
        else v
        for v in values
    ]


def to_ortvalue(value: Any) -> Any:
    """A run's output as an ``onnxruntime.OrtValue`` (tensors only; one numpy cannot hold, e.g. bfloat16,
    is already onnxruntime's OrtValue and is returned as it is)."""
    if isinstance(value, ort.OrtValue) and (value.is_tensor() or value.is_sparse_tensor()):
        return value
    if type(value).__name__ == "SparseTensor":  # what onnxruntime's run returns for a sparse output
        wrapped = value if isinstance(value, ort.SparseTensor) else ort.SparseTensor(value)
        return ort.OrtValue.ort_value_from_sparse_tensor(wrapped)
    if not isinstance(value, np.ndarray):
        raise NotSupportedError(
            f"run_with_ort_values returns tensors only; this output is a {type(value).__name__} "
            "(use run() for sequence and map outputs)"
        )
    if value.dtype.kind in "OUS":
        return string_ortvalue(value)
    # An OrtValue made by ortvalue_from_numpy only borrows the array's memory, and nothing keeps the array
    # alive once this returns: the OrtValue must own a copy.
    owned = ort.OrtValue.ortvalue_from_shape_and_type(list(value.shape), value.dtype)
    owned.update_inplace(np.ascontiguousarray(value))
    return owned


def ortvalues_from_vector(names: Sequence[str], feeds: Any) -> dict[str, Any]:
    """The values of an onnxruntime ``OrtValueVector``, by name (``run_with_ortvaluevector``'s feeds)."""
    if len(names) != len(feeds):
        raise BadInputError(
            f"{len(names)} feed names for {len(feeds)} feeds; give one name per OrtValue", value=len(feeds)
        )
    try:
        return {name: ort.OrtValue(feeds[i]) for i, name in enumerate(names)}
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"feeds must be an onnxruntime OrtValueVector: {exc}") from exc
