"""A guard before a custom node's input of a shape only the run knows: refuse what numpy cannot hold.

onnxruntime-extensions' C++ kernel (``PyCustomOpKernel::Compute``) turns every input of a Python custom op
into a numpy array *before* any Python code runs. numpy refuses a shape whose non-zero dimensions times the
item size pass ``2**63 - 1``, even when a zero dimension leaves it empty (``[0, 2**62]``, which onnxruntime
computes, e.g. ``ConstantOfShape(Concat(Shape(x), [2**62]))`` with ``x`` empty): the ``ValueError`` leaves
``Compute`` as ``pybind11::error_already_set`` through onnxruntime's C API, and the process aborts
(``terminate called after throwing ...``). The kernel's own ``try`` never sees it.

So each such input goes through ``Reshape(x, Where(fits, Shape(x), code))`` first: the same value (Reshape
of a tensor to its own shape is an alias in onnxruntime) when numpy can hold its shape, else a clean
failure of that Reshape in onnxruntime (``[code, code, ...]`` holds elements an empty tensor has not).
onnxruntime's message quotes the input's shape and the requested one; ``code``, one per guarded node, says
which node where onnxruntime renamed the Reshape (as it does inlining an If branch).
:class:`~dmlshim.execute.engines.custom_op.CustomOpEngine` reports it as a
:class:`~dmlshim.errors.BadInputError` naming the model's node. Only inputs whose shape lowering cannot
know are guarded (translate and tags modes); a non-empty tensor numpy cannot hold cannot exist in memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto

from .emitter import Emitter

__all__ = ["GUARD_SINCE", "forget_static_declaration", "numpy_guard", "numpy_holds"]

GUARD_SINCE = 9
"""The first ai.onnx opset with every op the guard uses (Where)."""
_NUMPY_BYTES = float(2**63)
"""numpy refuses a shape whose non-zero dimensions times the item size reach this (``NPY_MAX_INTP + 1``)."""


def numpy_holds(shape: Sequence[int], itemsize: int) -> bool:
    """Whether numpy can make an array of ``shape`` (known when lowering): no guard is needed then, and
    none is wanted on a constant, whose guard onnxruntime would fold into a copy of it (a copy that
    leaves the model's file when the weights are mapped from it)."""
    product = 1.0
    for d in shape:
        product *= max(float(d), 1.0)
    return product * itemsize < _NUMPY_BYTES


def numpy_guard(emit: Emitter, value: str, itemsize: int, code: int) -> tuple[str, str]:
    """``value`` passed through the guard; returns the guarded value's name and the guard Reshape's name.
    ``code`` (2 or more) is the dimension the Reshape asks for, for every axis, when it refuses."""
    dims = emit.shape(value, "guard")
    as_double = emit._node("Cast", [dims], emit.names.fresh(f"{emit.stem}_guard_dims"), to=TensorProto.DOUBLE)
    one = emit._constant(np.array([1.0], np.float64), "guard_one")
    nonzero = emit._node("Max", [as_double, one], emit.names.fresh(f"{emit.stem}_guard_nonzero"))
    product = emit._node("ReduceProd", [nonzero], emit.names.fresh(f"{emit.stem}_guard_product"), keepdims=0)
    limit = emit._constant(np.array(_NUMPY_BYTES / itemsize, np.float64), "guard_limit")
    fits = emit._node("Less", [product, limit], emit.names.fresh(f"{emit.stem}_guard_fits"))
    refused = emit._constant(np.array([code], np.int64), "guard_refused")
    target = emit._node("Where", [fits, dims, refused], emit.names.fresh(f"{emit.stem}_guard_target"))
    out = emit.names.fresh(f"{emit.stem}_guarded")
    emit._node("Reshape", [value, target], out)
    return out, emit.nodes[-1].name


def forget_static_declaration(graph: onnx.GraphProto, value: str) -> None:
    """Drop ``graph``'s ``value_info`` declaring ``value`` with a fully static shape before ``value`` is
    guarded: onnxruntime folds the guard's ``Shape`` into that declaration, and a stale one (``[10**8]`` on
    a value the run makes ``[4]``, which onnxruntime runs with the model's own nodes) failed the guard's
    Reshape, refusing a run onnxruntime completes."""
    kept = [
        v
        for v in graph.value_info
        if v.name != value
        or not v.type.tensor_type.HasField("shape")
        or not all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
    ]
    if len(kept) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(kept)
