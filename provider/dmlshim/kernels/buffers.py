"""Read-only views of bound input arrays through a DML_BUFFER_TENSOR_DESC (Sizes, Strides, DataType).

An input array is accepted in one of two forms:

* **packed**: ``array.shape == Sizes`` and ``array.dtype`` is the DataType's numpy dtype (numpy ``bool``
  is accepted for UINT8). The array is the logical tensor; Strides, if any, describe a buffer layout the
  caller has already resolved and are ignored.
* **buffer**: a 1-D array holding at least ``buffer_element_count`` elements, read through Sizes and
  Strides (in elements) the way DirectML reads a bound buffer, so a strided window of a larger buffer
  works. If its dtype is not the DataType's, its bytes are reinterpreted (DxDispatch-style raw buffers
  are typed arbitrarily): the array must then hold at least ``buffer_element_count`` elements of the
  DataType in bytes, in native byte order. An array of the right kind of element but the opposite byte
  order is converted rather than reinterpreted.

Nothing is ever copied except when a packed array needs a byte-order conversion or is not C-contiguous
with non-negative strides (a read-only one, a transposed weight, is read through its strides); nothing is
ever written.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import NamedTuple

import numpy as np

from ..dml.enums import DataType
from ..dml.operators import OperatorDesc
from ..dml.tensor import BufferTensorDesc
from ..errors import BadInputError, InvalidDescriptorError

logger = logging.getLogger(__name__)


class TensorView(NamedTuple):
    """One bound tensor: a 1-D element buffer plus the element strides that address it.

    A named tuple rather than a frozen dataclass: every kernel call builds one per input.

    Attributes:
        name: the DirectML binding name (``InputTensor`` ...).
        desc: the tensor's DML_BUFFER_TENSOR_DESC.
        flat: a read-only 1-D array; element ``(i0, i1, ...)`` is ``flat[sum(i_k * strides[k])]``.
        strides: element strides, one per dimension of ``desc.sizes``.
        contiguous: True when ``flat[:element_count]`` is the tensor in packed row-major order.
    """

    name: str
    desc: BufferTensorDesc
    flat: np.ndarray
    strides: tuple[int, ...]
    contiguous: bool

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.desc.sizes

    @property
    def element_count(self) -> int:
        return self.desc.element_count

    def array(self) -> np.ndarray:
        """The tensor as a read-only ndarray of shape Sizes (a view, never a copy)."""
        if self.contiguous:
            return self.flat[: self.element_count].reshape(self.sizes)
        if self.element_count == 0:
            return np.empty(self.sizes, dtype=self.flat.dtype)
        byte_stride = self.flat.strides[0]
        return np.lib.stride_tricks.as_strided(
            self.flat,
            shape=self.sizes,
            strides=tuple(s * byte_stride for s in self.strides),
            writeable=False,
        )

    def packed(self) -> np.ndarray:
        """The tensor as a C-contiguous array of shape Sizes (a view when possible, else one copy)."""
        if self.contiguous:
            return self.flat[: self.element_count].reshape(self.sizes)
        return np.ascontiguousarray(self.array())


def _numpy_dtypes() -> dict[DataType, np.dtype]:
    out: dict[DataType, np.dtype] = {}
    for data_type in DataType:
        with contextlib.suppress(ValueError):  # no numpy equivalent (UNKNOWN, 4-bit types)
            out[data_type] = data_type.numpy_dtype
    return out


_DTYPES = _numpy_dtypes()
"""The numpy dtype of every DataType numpy can hold."""


def packed_dtype(data_type: DataType) -> np.dtype | None:
    """The dtype a packed array of ``data_type`` has (None: numpy cannot hold the type)."""
    return _DTYPES.get(data_type)


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _is_packed_layout(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _strided_view(name: str, tensor: BufferTensorDesc, arr: np.ndarray) -> TensorView | None:
    """A non-contiguous packed array read through its own strides, as DirectML reads a strided buffer
    (a transposed weight is then never copied): a 1-D view of the memory it spans and its element
    strides. None for a writable array (a program's own, copied as before: the packed paths are faster),
    or when a stride is negative or not a multiple of the element size (it is copied then)."""
    itemsize = arr.dtype.itemsize
    if arr.flags.writeable or arr.size == 0 or any(s < 0 or s % itemsize for s in arr.strides):
        return None
    strides = tuple(s // itemsize for s in arr.strides)
    span = 1 + sum((n - 1) * s for n, s in zip(arr.shape, strides, strict=True))
    flat = np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(itemsize,), writeable=False)
    return TensorView(name, tensor, flat, strides, False)


def view_tensor(desc: OperatorDesc, name: str, tensor: BufferTensorDesc, array: object) -> TensorView:
    """View a caller's array as the tensor ``name`` of ``desc``; see the module docstring for the forms.

    Raises:
        BadInputError: the array is neither packed nor a large enough 1-D buffer, or its dtype does not fit.
        InvalidDescriptorError: the DataType has no numpy equivalent (UNKNOWN, 4-bit types).
    """
    if type(array) is np.ndarray:
        # The common case, decided before anything else is computed: a packed array of the right dtype.
        dtype = _DTYPES.get(tensor.data_type)
        packed = array.shape == tensor.sizes and array.flags.c_contiguous
        if packed and dtype is not None and array.dtype == dtype:
            flat = array.reshape(-1)  # always a new view, so the caller's array keeps its flags
            flat.flags.writeable = False
            return TensorView(name, tensor, flat, tensor.packed_strides, True)
    op = desc.operator_type.dml_name
    try:
        dtype = tensor.data_type.numpy_dtype
    except ValueError as e:
        raise InvalidDescriptorError(
            f"{name}.DataType {tensor.data_type.dml_name} cannot be executed by the numpy kernels",
            op_type=op,
            tensor=name,
            value=tensor.data_type.dml_name,
        ) from e
    if not isinstance(array, np.ndarray):
        raise BadInputError(
            f"expected a numpy array for {name}, got {type(array).__name__}", op_type=op, tensor=name
        )
    sizes = tensor.sizes
    arr = array
    if arr.dtype == np.bool_ and dtype == np.uint8:
        arr = arr.view(np.uint8)
    elif arr.dtype != dtype and arr.dtype.kind == dtype.kind and arr.dtype.itemsize == dtype.itemsize:
        # Same element type in the other byte order: convert instead of reinterpreting bytes.
        logger.debug("%s: converting %s from %s to native %s", op, name, arr.dtype, dtype)
        arr = arr.astype(dtype)

    if arr.shape == sizes and arr.dtype == dtype:
        if not arr.flags.c_contiguous:
            strided = _strided_view(name, tensor, arr)
            if strided is not None:
                return strided
            logger.debug("%s: copying non-contiguous packed %s", op, name)
            arr = np.ascontiguousarray(arr)
        return TensorView(name, tensor, _readonly(arr.reshape(-1)), tensor.packed_strides, True)

    if arr.ndim != 1:
        raise BadInputError(
            f"{name} must be shaped like its Sizes {list(sizes)} or be a 1-D buffer; got shape "
            f"{list(arr.shape)}",
            op_type=op,
            tensor=name,
            value=tuple(arr.shape),
        )
    if tensor.strides is not None and len(tensor.strides) != len(sizes):
        raise InvalidDescriptorError(
            f"{name}.Strides has {len(tensor.strides)} entries but Sizes has {len(sizes)}",
            op_type=op,
            tensor=name,
            value=tensor.strides,
        )
    needed = tensor.buffer_element_count
    if arr.dtype != dtype:
        if arr.dtype.hasobject or arr.dtype.itemsize == 0:
            raise BadInputError(
                f"{name} buffer of dtype {arr.dtype} cannot be reinterpreted as {dtype}",
                op_type=op,
                tensor=name,
                value=str(arr.dtype),
            )
        raw = np.ascontiguousarray(arr).view(np.uint8)
        if raw.size < needed * dtype.itemsize:
            raise BadInputError(
                f"{name} buffer holds {raw.size} bytes; Sizes {list(sizes)} and Strides "
                f"{list(tensor.effective_strides)} of {tensor.data_type.dml_name} need "
                f"{needed * dtype.itemsize}",
                op_type=op,
                tensor=name,
                value=raw.size,
            )
        logger.debug("%s: reinterpreting %s buffer of %s as %s", op, name, arr.dtype, dtype)
        arr = raw[: (raw.size // dtype.itemsize) * dtype.itemsize].view(dtype)
    elif arr.size < needed:
        raise BadInputError(
            f"{name} buffer holds {arr.size} elements; Sizes {list(sizes)} and Strides "
            f"{list(tensor.effective_strides)} need {needed}",
            op_type=op,
            tensor=name,
            value=arr.size,
        )
    strides = tensor.effective_strides
    contiguous = _is_packed_layout(sizes, strides) and arr.flags.c_contiguous
    return TensorView(name, tensor, _readonly(arr), strides, contiguous)


def coalesce(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop size-1 dimensions and merge neighbours that step through memory as one dimension.

    The element offsets enumerated in row-major order are unchanged; fewer dimensions make
    :func:`grid_offsets` cheaper (a packed block collapses to one ``arange``).
    """
    out_sizes: list[int] = []
    out_strides: list[int] = []
    for size, stride in zip(sizes, strides, strict=True):
        if size == 1:
            continue
        if out_sizes and out_strides[-1] == size * stride:
            out_sizes[-1] *= size
            out_strides[-1] = stride
        else:
            out_sizes.append(size)
            out_strides.append(stride)
    return tuple(out_sizes), tuple(out_strides)


def grid_offsets(sizes: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Element offsets of every multi-index of ``sizes`` in row-major order, as a 1-D int64 array."""
    sizes, strides = coalesce(sizes, strides)
    count = math.prod(sizes)
    if not sizes:
        return np.zeros(1 if count else 0, dtype=np.int64)
    offsets = np.arange(sizes[-1], dtype=np.int64) * strides[-1]
    for size, stride in zip(reversed(sizes[:-1]), reversed(strides[:-1]), strict=True):
        offsets = (np.arange(size, dtype=np.int64) * stride)[:, None] + offsets[None, :]
        offsets = offsets.reshape(-1)
    return offsets


def block_view(packed: np.ndarray, block: int) -> np.ndarray:
    """A C-contiguous array viewed as a 1-D array of opaque ``block``-element items (one per run of
    ``block`` elements), so that a gather or scatter of whole runs moves one item per index: numpy's
    fancy assignment of ``(rows, block)`` sub-arrays walks every run element by element and was 2-10x
    slower (a 64-float run: 3.3 ms against 1.1-1.5 ms for 32K runs; 2-float runs: 34 ms against 3.3 ms).
    """
    return packed.reshape(-1).view(np.dtype((np.void, block * packed.dtype.itemsize)))
