"""Memory guards: refuse work whose tensors could never fit in this machine's memory, before allocating.

Linux overcommits memory, so a numpy or onnxruntime allocation far beyond the physical memory may succeed
and the process be killed later, when the pages are touched. dmlshim therefore checks sizes it knows in
advance (static shapes in the model, shapes of a node's output computed from its input shapes, shapes of
inputs it is asked to generate) against the physical memory and raises :class:`TooLargeError` naming the
tensor, its shape, its type and the size.

Call sites::

    check_tensor(shape, dtype, tensor="x")            # before allocating one array
    unfeedable_inputs(graph)                          # static graph inputs no feed could match
    check_static_values(infos, producers=...)         # every statically shaped value of a graph
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from .errors import BadInputError, TooLargeError
from .portable import physical_memory

__all__ = [
    "MEMORY_LIMIT_ENV",
    "STRING_ELEMENT_BYTES",
    "check_bytes",
    "check_static_values",
    "check_tensor",
    "format_bytes",
    "gather_scatter_output_shape",
    "memory_limit",
    "tensor_nbytes",
    "unfeedable_inputs",
]

logger = logging.getLogger(__name__)


MEMORY_LIMIT_ENV = "DMLSHIM_MEMORY_LIMIT"


def memory_limit() -> int | None:
    """The largest size in bytes one tensor may have: the machine's physical memory (None if unknown).

    ``DMLSHIM_MEMORY_LIMIT`` (bytes, an integer >= 0) lowers it, e.g. to test the guard or to share a
    machine.

    Raises:
        BadInputError: ``DMLSHIM_MEMORY_LIMIT`` is set to something else (a guard set wrongly is refused,
            never read as another limit). The CLI checks it once, before any command.
    """
    env = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    return _parse_limit(env) if env else physical_memory()


def _parse_limit(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or value < 0:
        raise BadInputError(
            f"{MEMORY_LIMIT_ENV}={text!r} is not a size in bytes; set it to an integer >= 0 (e.g. "
            f"{MEMORY_LIMIT_ENV}=4000000000), or unset it to use this machine's memory",
            rule=f"{MEMORY_LIMIT_ENV} is a number of bytes, an integer >= 0",
            value=text,
        )
    return value


def _limit_text(cap: int) -> str:
    if os.environ.get(MEMORY_LIMIT_ENV, "").strip():
        return f"the memory limit ({format_bytes(cap)}, {MEMORY_LIMIT_ENV})"
    return f"this machine's memory ({format_bytes(cap)})"


def format_bytes(n: int) -> str:
    """``7.28 TiB``, ``512 B``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{n} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_ELEMENT_BYTES: dict[int, int | None] = {}
"""Bytes per element of each ONNX element type met so far (a graph's values share a few types)."""


def _itemsize(dtype: Any) -> int | None:
    """Bytes per element of a numpy dtype or an ONNX element type (None when it has no fixed size)."""
    if type(dtype) is int:
        size = _ELEMENT_BYTES.get(dtype, -1)
        if size == -1:
            size = _find_itemsize(dtype)
            if len(_ELEMENT_BYTES) < 64:  # (a hostile model's made-up types are not kept)
                _ELEMENT_BYTES[dtype] = size
        return size
    return _find_itemsize(dtype)


def _find_itemsize(dtype: Any) -> int | None:
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) in (0, onnx.TensorProto.STRING):
            return None
        try:
            dtype = helper.tensor_dtype_to_np_dtype(int(dtype))
        except (KeyError, TypeError, ValueError):
            return None
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    return None if dt.kind in "OUSV" else dt.itemsize


STRING_ELEMENT_BYTES = 40
"""What one string element costs at least, for the memory checks: onnxruntime holds each element of a
string tensor as a ``std::string`` (32 bytes on 64-bit libstdc++, the text inline up to 15 bytes) and
hands it back as a numpy object array (an 8-byte pointer each, the Python ``str`` objects on top). A
lower bound, so nothing that fits is refused: a Gather of 2M one-character strings on onnxruntime
1.32 raised peak RSS by 41 bytes per element on the development machine (issue 35, round 54)."""


def _element_cost(dtype: Any) -> int | None:
    """Bytes per element the size checks count: the fixed size, or :data:`STRING_ELEMENT_BYTES` for a
    string (ONNX ``STRING``, a numpy object, str or bytes dtype); None when it is unknown."""
    size = _itemsize(dtype)
    if size is not None:
        return size
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        return STRING_ELEMENT_BYTES if int(dtype) == onnx.TensorProto.STRING else None
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        return None
    return STRING_ELEMENT_BYTES if kind in "OUS" else None


def tensor_nbytes(shape: Sequence[int], dtype: Any) -> int | None:
    """Bytes of a dense tensor (exact, no overflow); None when the element size is not fixed."""
    size = _itemsize(dtype)
    if size is None:
        return None
    return math.prod(map(int, shape)) * size


def _type_name(dtype: Any) -> str:
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        try:
            return str(onnx.TensorProto.DataType.Name(int(dtype))).lower()
        except ValueError:
            return f"type {int(dtype)}"
    dt = np.dtype(dtype)
    return "string" if dt.kind in "OUS" else str(dt)  # (numpy's name for a string tensor's values)


def check_tensor(
    shape: Sequence[int],
    dtype: Any,
    *,
    tensor: str | None = None,
    node: str | None = None,
    op_type: str | None = None,
    path: str | None = None,
    what: str = "tensor",
    limit: int | None = None,
) -> None:
    """Raise :class:`TooLargeError` if a tensor of this shape and type exceeds the memory limit.

    Args:
        shape: the dims (any sizes; the product is computed exactly).
        dtype: a numpy dtype or an ONNX element type.
        what: how to call the tensor in the message ("graph input", "output of the node", ...).
        limit: the limit in bytes (default :func:`memory_limit`).
    """
    cap = memory_limit() if limit is None else limit
    need = _need_over(shape, dtype, cap)
    if need is not None:
        _refuse(need, shape, dtype, cap, tensor=tensor, node=node, op_type=op_type, path=path, what=what)


def _need_over(shape: Sequence[int], dtype: Any, cap: int | None) -> int | None:
    """The bytes a tensor of this shape and type needs when they exceed ``cap`` (None: it fits, there is
    no limit, or its element size is unknown): the one size test of every check here. A string element
    counts :data:`STRING_ELEMENT_BYTES`."""
    if cap is None:
        return None
    size = _element_cost(dtype)
    need = None if size is None else math.prod(map(int, shape)) * size
    return None if need is None or need <= cap else need


def _refuse(
    need: int,
    shape: Sequence[int],
    dtype: Any,
    cap: int,
    *,
    tensor: str | None,
    node: str | None,
    op_type: str | None,
    path: str | None,
    what: str,
) -> None:
    dims = [int(d) for d in shape]
    name = f" {tensor!r}" if tensor else ""
    raise TooLargeError(
        f"{what}{name} of shape {dims} and type {_type_name(dtype)} would need {format_bytes(need)} "
        f"({need} bytes), more than {_limit_text(cap)}; refusing before allocating",
        rule="a tensor must fit in physical memory (as the operating system reports it, or "
        "DMLSHIM_MEMORY_LIMIT)",
        value=need,
        tensor=tensor,
        node=node,
        op_type=op_type,
        path=path,
    )


def check_bytes(
    need: int,
    *,
    what: str,
    path: str | None = None,
    tensor: str | None = None,
    node: str | None = None,
    limit: int | None = None,
) -> None:
    """Raise :class:`TooLargeError` if ``need`` bytes (declared by a file, before reading or allocating
    them) exceed the memory limit.

    Args:
        need: the bytes the work would need.
        what: what needs them, as a phrase ("buffer 'out' (sizeInBytes)", "external data of 'w'").
    """
    cap = memory_limit() if limit is None else limit
    if cap is None or need <= cap:
        return
    raise TooLargeError(
        f"{what} would need {format_bytes(need)} ({need} bytes), more than {_limit_text(cap)}; "
        "refusing before reading or allocating",
        rule="a tensor must fit in physical memory (as the operating system reports it, or "
        "DMLSHIM_MEMORY_LIMIT)",
        value=need,
        tensor=tensor,
        node=node,
        path=path,
    )


def static_dims(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """A tensor value's declared shape when every dim is a known size (None otherwise)."""
    if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
        return None
    dims: list[int] = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def unfeedable_inputs(graph: onnx.GraphProto, *, limit: int | None = None) -> list[str]:
    """The graph inputs (initializers excluded) whose fully static declared shape cannot fit in memory.

    onnxruntime loads such a model and refuses, at run time, every feed whose shape is not the declared
    one; a feed of the declared shape could never be allocated. So the model loads and no run of it can
    ever reach a node (nothing is refused or allocated for it at load).
    """
    cap = memory_limit() if limit is None else limit
    if cap is None:
        return []
    init = {t.name for t in graph.initializer}
    names: list[str] = []
    for vi in graph.input:
        dims = None if vi.name in init else static_dims(vi)
        if dims is not None and _need_over(dims, vi.type.tensor_type.elem_type, cap) is not None:
            names.append(vi.name)
    return names


def check_static_values(
    shapes: Mapping[str, tuple[Sequence[int], int]],
    *,
    producers: Mapping[str, tuple[str, str]] | Callable[[], Mapping[str, tuple[str, str]]] | None = None,
    path: str | None = None,
    limit: int | None = None,
) -> None:
    """Refuse a graph in which some value with a static shape cannot fit in memory.

    Args:
        shapes: value name -> (static dims, ONNX element type).
        producers: value name -> (node name, op type) of the node that computes it; or a function
            returning that mapping, called only when a value is refused (only a refusal names the node).
    """
    cap = memory_limit() if limit is None else limit
    if cap is None:
        return
    for name, (dims, elem_type) in shapes.items():
        need = _need_over(dims, elem_type, cap)
        if need is None:
            continue
        found = producers() if callable(producers) else producers
        node, op = (found or {}).get(name, (None, None))
        what = "value" if node is None else "output"
        _refuse(need, dims, elem_type, cap, tensor=name, node=node, op_type=op, path=path, what=what)


def gather_scatter_output_shape(
    op_type: str, attributes: Mapping[str, Any], shapes: Sequence[Sequence[int] | None]
) -> tuple[int, ...] | None:
    """The ONNX output shape of a gather/scatter node from its input shapes (None if it cannot tell).

    Only what is needed to size the output before running: malformed inputs return None and are left to
    the translator and the kernels to report.
    """
    data = tuple(int(d) for d in shapes[0]) if shapes and shapes[0] is not None else None
    indices = tuple(int(d) for d in shapes[1]) if len(shapes) > 1 and shapes[1] is not None else None
    if data is None:
        return None
    if op_type in ("Scatter", "ScatterElements", "ScatterND"):
        return data
    if indices is None:
        return None
    if op_type == "GatherElements":
        return indices
    if op_type == "Gather":
        axis = int(attributes.get("axis", 0))
        axis = axis + len(data) if axis < 0 else axis
        if not 0 <= axis < len(data):
            return None
        return data[:axis] + indices + data[axis + 1 :]
    if op_type == "GatherND":
        batch = int(attributes.get("batch_dims", 0))
        if not indices:
            return None
        k = indices[-1]
        if batch < 0 or batch + k > len(data):
            return None
        return indices[:-1] + data[batch + k :]
    return None
