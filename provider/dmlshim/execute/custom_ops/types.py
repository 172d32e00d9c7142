"""The custom ops of the custom-op engine: their domain, modes, attributes, and the element types that
cross the onnxruntime-extensions bridge.

onnxruntime-extensions moves tensors of a few element types only (float16 and bfloat16 abort the process,
uint64 outputs are corrupted, and float outputs travel through Python floats, which quiet signalling
NaNs). dmlshim hands its outputs to the bridge as numpy arrays instead (one buffer copy, every bit kept;
:func:`outputs_cross_as_arrays`), so float32 and float64 data cross as they are. Where that is not possible,
and always for float16 (carried as float32 through Casts), the custom op works on element *tags* and
onnxruntime moves the elements (``MODE_TAGS``); uint64 travels as int64 (an exact reinterpretation).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from onnx import TensorProto

from ...translate.plan import np_dtype_of

__all__ = [
    "CUSTOM_DOMAIN",
    "CUSTOM_OPSET_VERSION",
    "DECLARED_ATTRIBUTES",
    "INDEX_TRANSPORT_TYPES",
    "LOWERED_IR_VERSION",
    "MODE_DESCRIPTOR",
    "MODE_TAGS",
    "MODE_TRANSLATE",
    "TAGGED_TYPES",
    "TAGGED_TYPES_LIST_BRIDGE",
    "TRANSPORT_TYPES",
    "CustomOpSignature",
    "all_signatures",
    "outputs_cross_as_arrays",
    "signature_for",
    "tagged_types",
    "tags_signature_for",
    "transport_type",
    "type_name",
]

CUSTOM_DOMAIN = "ai.onnx.contrib"
"""The domain of the custom nodes (onnxruntime-extensions finds Python ops only there)."""
CUSTOM_OPSET_VERSION = 1
LOWERED_IR_VERSION = 10
"""IR version of lowered models (onnxruntime 1.31 reads up to 13; onnx 1.23 writes 14)."""

MODE_DESCRIPTOR = "descriptor"
MODE_TRANSLATE = "translate"
MODE_TAGS = "tags"
"""The custom node takes the shapes of data (and updates) and the indices, runs the node's translation on
element tags (each element's position, as the bits of a value of the data type) and returns, for every
output element, the position of the element it holds; onnxruntime's own Gather then moves the elements,
so every bit of every value (NaN payloads, signalling NaNs) arrives as it left."""

TAGGED_TYPES: frozenset[int] = frozenset({TensorProto.FLOAT16})
"""Data types lowered in ``MODE_TAGS`` when outputs cross as arrays: float16, which a Cast around the bridge
would alter."""
TAGGED_TYPES_LIST_BRIDGE: frozenset[int] = frozenset(
    {TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE}
)
"""Data types lowered in ``MODE_TAGS`` when outputs cross as Python lists (Python floats quiet signalling
NaNs)."""


@functools.cache
def outputs_cross_as_arrays() -> bool:
    """Whether the installed onnxruntime-extensions lets dmlshim hand custom-op outputs over as numpy arrays
    (its Python dispatcher can be replaced); False when it is missing or lacks those hook points."""
    from .ext_import import import_extensions

    try:
        ext = import_extensions()
    except ImportError:
        return False
    ocos = getattr(ext, "_ocos", None)
    return (
        callable(getattr(ocos, "_on_pyop_invocation", None))
        and callable(getattr(getattr(ext, "PyCustomOpDef", None), "install_hooker", None))
        and isinstance(getattr(getattr(ext, "Opdef", None), "_odlist", None), dict)
    )


def tagged_types() -> frozenset[int]:
    """The data types lowered in ``MODE_TAGS`` in this process."""
    return TAGGED_TYPES if outputs_cross_as_arrays() else TAGGED_TYPES_LIST_BRIDGE


DECLARED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("mode", "string"),
    ("node_name", "string"),
    ("onnx_op_type", "string"),
    ("onnx_since_version", "int"),
    ("onnx_attributes", "string"),
    ("onnx_inputs", "string"),
    ("io_types", "string"),
    ("feature_level", "int"),
    ("index_mode", "string"),
    ("descriptor", "string"),
)
"""The attributes every custom node carries and the Python kernel receives (name, type); the ``dml_*`` and
``onnx_*`` copies for Netron are extra attributes the kernel never sees."""

TRANSPORT_TYPES: frozenset[int] = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.BOOL,
    }
)
"""Element types onnxruntime-extensions moves between onnxruntime and Python intact."""

_CARRIED: dict[int, int] = {TensorProto.FLOAT16: TensorProto.FLOAT, TensorProto.UINT64: TensorProto.INT64}
"""Element types that travel as another type (exact conversions both ways)."""

INDEX_TRANSPORT_TYPES: tuple[int, ...] = (TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32)
"""Element types an index tensor crosses the bridge as (ONNX int32/int64; DirectML UINT32/UINT64 too)."""

_GATHER_OPS = ("Gather", "GatherElements", "GatherND")
_SCATTER_OPS = ("Scatter", "ScatterElements", "ScatterND")


def transport_type(elem_type: int) -> int | None:
    """The element type a tensor of ``elem_type`` crosses the custom-op bridge as, or None if it cannot."""
    if elem_type in TRANSPORT_TYPES:
        return elem_type
    return _CARRIED.get(elem_type)


def type_name(elem_type: int) -> str:
    """The numpy name of an ONNX element type (``float32``)."""
    return np_dtype_of(elem_type).name


def signature_for(op_type: str, data_type: int, index_type: int) -> CustomOpSignature:
    """The custom op a node of ``op_type`` becomes, given the bridge types of its data and indices."""
    inputs = (data_type, index_type, data_type) if op_type in _SCATTER_OPS else (data_type, index_type)
    return CustomOpSignature(
        op_type=f"Dml{op_type}_{type_name(data_type)}_{type_name(index_type)}",
        input_types=inputs,
        output_type=data_type,
    )


def tags_signature_for(op_type: str, index_type: int) -> CustomOpSignature:
    """The ``MODE_TAGS`` custom op of ``op_type``: (data shape, indices[, updates shape]) -> positions."""
    shapes = TensorProto.INT64
    inputs = (shapes, index_type, shapes) if op_type in _SCATTER_OPS else (shapes, index_type)
    return CustomOpSignature(
        op_type=f"DmlTags{op_type}_{type_name(index_type)}", input_types=inputs, output_type=TensorProto.INT64
    )


def all_signatures() -> tuple[CustomOpSignature, ...]:
    """Every custom op a lowered model can use.

    onnxruntime-extensions crashes when op types are registered after a session holding its library
    exists and that session is later destroyed, so the engine registers all of them once, up front.
    """
    plain = tuple(
        signature_for(op, data, index)
        for op in (*_GATHER_OPS, *_SCATTER_OPS)
        for data in sorted(TRANSPORT_TYPES)
        for index in INDEX_TRANSPORT_TYPES
    )
    tags = tuple(
        tags_signature_for(op, index)
        for op in (*_GATHER_OPS, *_SCATTER_OPS)
        for index in INDEX_TRANSPORT_TYPES
    )
    return plain + tags


@dataclass(frozen=True)
class CustomOpSignature:
    """One custom op type: its name and the element types of its inputs and output on the bridge.

    Attributes:
        op_type: e.g. ``DmlGatherElements_float32_int64``.
        input_types: ONNX element types of the custom node's inputs, in order.
        output_type: ONNX element type of its output.
    """

    op_type: str
    input_types: tuple[int, ...]
    output_type: int
