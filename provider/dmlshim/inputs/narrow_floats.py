"""Graph inputs of the floating-point types numpy has no dtype for: bfloat16 and the float8 types.

onnxruntime takes such an input only as an ``onnxruntime.OrtValue`` of that element type (its ``run``
refuses every numpy array for it), and an ``.npz`` cannot hold such a type either. So:

* generated values are drawn as float32 (:mod:`.values`) and rounded to the input's type by onnxruntime's
  own ``Cast`` (round to nearest even), giving an OrtValue both sides of a comparison are fed;
* an ``--inputs`` file gives such an input in one of two forms, told apart by the array's dtype, the model
  saying which type the input is (:func:`feed_from_array`):

  - the raw bits, as unsigned integers of the type's width (``uint16`` for bfloat16, ``uint8`` for a
    float8 type), e.g. ``torch_tensor.view(torch.uint16).numpy()`` or ``ml_array.view(numpy.uint16)``;
  - float32 values, rounded to the type by onnxruntime's ``Cast`` (round to nearest even, as torch's
    ``.to(torch.bfloat16)``); a value beyond the type's largest finite number is refused (``Cast``
    saturates it to that number, torch makes it infinite or NaN: no answer is the obvious one);

  and an ml_dtypes array of exactly that type is read as its bits, as is the void array of the same width
  that ``numpy.savez`` writes for one. Any other dtype is refused with the forms it could take.

:func:`bits_of` gives an OrtValue's bits back in the first form, which is how ``--save-inputs`` writes
such an input (so the file reads back as the same bits).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import BadInputError

__all__ = [
    "NARROW_FLOATS",
    "NARROW_TYPE_NAMES",
    "NarrowFloat",
    "as_file_arrays",
    "as_ortvalues",
    "bits_of",
    "borrowed_ortvalue",
    "decoded",
    "feed_from_array",
    "from_bits",
    "from_float32",
    "is_narrow_float",
    "narrow_elem_type",
    "narrow_feeds",
    "narrow_inputs",
    "narrow_type",
    "run_any_outputs",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NarrowFloat:
    """One floating-point element type numpy has no dtype for.

    Attributes:
        elem_type: the ONNX element type number.
        name: onnxruntime's name of it (``bfloat16``, ``float8e4m3fn``, ...).
        bits: the width of one element in bits (16 or 8).
        max_finite: its largest finite value.
        has_inf: whether it has infinities (bfloat16 and float8e5m2 do).
    """

    elem_type: int
    name: str
    bits: int
    max_finite: float
    has_inf: bool

    @property
    def bits_dtype(self) -> np.dtype:
        """The unsigned integer dtype that holds one element's bits."""
        return np.dtype(np.uint16 if self.bits == 16 else np.uint8)


def _types() -> dict[int, NarrowFloat]:
    table = (
        ("BFLOAT16", "bfloat16", 16, float.fromhex("0x1.fep127"), True),
        ("FLOAT8E4M3FN", "float8e4m3fn", 8, 448.0, False),
        ("FLOAT8E4M3FNUZ", "float8e4m3fnuz", 8, 240.0, False),
        ("FLOAT8E5M2", "float8e5m2", 8, 57344.0, True),
        ("FLOAT8E5M2FNUZ", "float8e5m2fnuz", 8, 57344.0, False),
    )
    # onnx versions without the float8 types (before 1.14) simply have fewer entries
    return {
        getattr(TensorProto, enum): NarrowFloat(getattr(TensorProto, enum), name, bits, top, inf)
        for enum, name, bits, top, inf in table
        if hasattr(TensorProto, enum)
    }


NARROW_FLOATS: dict[int, NarrowFloat] = _types()
"""The floating-point element types numpy cannot hold that onnxruntime's CPU provider takes as graph
inputs, by ONNX element type number."""

_BY_NAME = {f"tensor({kind.name})": kind for kind in NARROW_FLOATS.values()}

NARROW_TYPE_NAMES = frozenset(_BY_NAME)
"""onnxruntime's names of the tensor types of :data:`NARROW_FLOATS` (``tensor(bfloat16)``, ...)."""

_ML_DTYPES_NAMES = {
    "bfloat16": "bfloat16",
    "float8e4m3fn": "float8_e4m3fn",
    "float8e4m3fnuz": "float8_e4m3fnuz",
    "float8e5m2": "float8_e5m2",
    "float8e5m2fnuz": "float8_e5m2fnuz",
}
"""ml_dtypes' name of each type (numpy arrays of these names hold the type's bits)."""

_CAST_OPSET = 19
"""The first opset whose Cast converts to the float8 types (bfloat16 needs 13)."""


def is_narrow_float(elem_type: int) -> bool:
    """Whether an ONNX element type is one of :data:`NARROW_FLOATS`."""
    return int(elem_type) in NARROW_FLOATS


def _kind(elem_type: int) -> NarrowFloat:
    try:
        return NARROW_FLOATS[int(elem_type)]
    except KeyError:
        message = f"element type {elem_type} is not bfloat16 or a float8 type"
        raise BadInputError(message, value=elem_type) from None


def narrow_elem_type(dtype: Any) -> int | None:
    """The ONNX element type of an ml_dtypes dtype of :data:`NARROW_FLOATS` (bfloat16, a float8 type), else
    None. Not by ``dtype.kind``: ml_dtypes makes bfloat16 a ``V`` kind but float8_e5m2 an ``f``."""
    try:
        elem = int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (KeyError, TypeError, ValueError):
        return None
    return elem if elem in NARROW_FLOATS else None


def borrowed_ortvalue(array: np.ndarray) -> Any:
    """An ``onnxruntime.OrtValue`` over ``array``'s memory (C-contiguous; no copy: the caller keeps
    ``array`` alive while the OrtValue is used), of the ONNX type of its dtype: an ml_dtypes array of a
    :data:`NARROW_FLOATS` type, which ``ortvalue_from_numpy`` refuses, as its bits with that type."""
    from ..runtime.real import ort

    elem = narrow_elem_type(array.dtype)
    if elem is None:
        return ort.OrtValue.ortvalue_from_numpy(array)
    bits = array.view(NARROW_FLOATS[elem].bits_dtype)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx_element_type=elem)


def from_bits(bits: np.ndarray, elem_type: int) -> Any:
    """An ``onnxruntime.OrtValue`` of ``elem_type`` holding these raw bits (unsigned integers of the type's
    width; the OrtValue keeps its own contiguous copy alive)."""
    from ..runtime.real import ort

    kind = _kind(elem_type)
    held = np.array(bits, dtype=kind.bits_dtype, copy=True, order="C")
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(held, onnx_element_type=kind.elem_type)


@functools.lru_cache(maxsize=2 * len(NARROW_FLOATS) or 1)
def _cast_session(source: int, target: int) -> Any:
    """A one-node onnxruntime CPU session casting ``source`` to ``target`` (onnxruntime's own rounding)."""
    from ..runtime.real import OrtInferenceSession, ort

    graph = helper.make_graph(
        [helper.make_node("Cast", ["values"], ["cast"], to=target)],
        "dmlshim_narrow_float_cast",
        [helper.make_tensor_value_info("values", source, None)],
        [helper.make_tensor_value_info("cast", target, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", _CAST_OPSET)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    return OrtInferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def from_float32(values: np.ndarray, elem_type: int, name: str = "") -> Any:
    """float32 values rounded to ``elem_type`` by onnxruntime's ``Cast`` (round to nearest even), as an
    ``onnxruntime.OrtValue`` of that type.

    Raises:
        BadInputError: a value (other than NaN, or an infinity the type has) beyond the type's largest
            finite value.
    """
    from ..runtime.real import ort

    kind = _kind(elem_type)
    array = np.ascontiguousarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        beyond = ~np.isnan(array) & (np.abs(array) > kind.max_finite)
        if kind.has_inf:
            beyond &= ~np.isinf(array)
    if beyond.any():
        where = tuple(int(i) for i in np.argwhere(beyond)[0])
        label = f"input {name!r}" if name else "a value"
        raise BadInputError(
            f"{label} is {kind.name}, and its float32 value {float(array[where])!r} at {list(where)} is "
            f"beyond the largest finite {kind.name} ({kind.max_finite:g}): onnxruntime's Cast would "
            "saturate it and torch would not, so it is refused; clip the values, or give the raw bits "
            f"as {kind.bits_dtype} (see docs/commands.md)",
            tensor=name or None,
            value=float(array[where]),
            rule=f"float32 values given for a {kind.name} input must lie within its finite range",
        )
    session = _cast_session(TensorProto.FLOAT, kind.elem_type)
    fed = ort.OrtValue.ortvalue_from_numpy(array)
    # the returned OrtValue owns its memory (onnxruntime allocated it)
    return session.run_with_ort_values(["cast"], {"values": fed})[0]


def narrow_type(value: Any) -> NarrowFloat | None:
    """The type of a tensor OrtValue of a bfloat16 or float8 type; None for any other value."""
    from ..runtime.real import ort

    if not isinstance(value, ort.OrtValue) or not value.is_tensor():
        return None
    return _BY_NAME.get(value.data_type())


def decoded(value: Any) -> np.ndarray | None:
    """A CPU tensor OrtValue of a bfloat16 or float8 type as the float32 array of its values (exact: every
    such value is a float32 value; -0.0 stays -0.0), or None for any other value."""
    kind = narrow_type(value)
    if kind is None:
        return None
    if kind.bits == 16:  # bfloat16 is the upper half of a float32: payloads and signs kept
        return (bits_of(value).astype(np.uint32) << 16).view(np.float32)
    widened = _cast_session(kind.elem_type, TensorProto.FLOAT).run(["cast"], {"values": value})[0]
    return np.asarray(widened, dtype=np.float32).reshape(tuple(value.shape()))


# Bits per element of the tensor types numpy has no dtype for: the narrow floats and the packed 4-bit ones.
_BITS = {kind.name: kind.bits for kind in NARROW_FLOATS.values()} | {"int4": 4, "uint4": 4, "float4e2m1": 4}


def ortvalue_bits(value: Any) -> np.ndarray:
    """A CPU tensor OrtValue's raw bytes (as unsigned integers of the element's width, or bytes for
    packed 4-bit types), so values numpy cannot hold compare bit for bit."""
    try:
        return np.asarray(value.numpy()).reshape(-1)
    except (RuntimeError, TypeError):
        pass
    import ctypes
    import math

    name = value.data_type().removeprefix("tensor(").removesuffix(")")
    bits = _BITS.get(name, 8)
    count = math.prod(value.shape())
    nbytes = (count * bits + 7) // 8
    raw = ctypes.string_at(value.data_ptr(), nbytes) if nbytes else b""
    return np.frombuffer(raw, dtype=np.uint16 if bits == 16 else np.uint8).copy()


def bits_of(value: Any) -> np.ndarray:
    """A bfloat16 or float8 OrtValue's raw bits as unsigned integers of its width, in its shape."""
    return ortvalue_bits(value).reshape(tuple(value.shape()))


def run_any_outputs(session: Any, feeds: Mapping[str, Any]) -> None:
    """Run an onnxruntime session on ``feeds`` for its verdict only, whatever its outputs' types: ``run``
    cannot return a bfloat16 or float8 output, so the outputs it can return are asked for, and when there
    is none the session runs through ``run_with_ort_values``.

    Raises:
        whatever onnxruntime raises for the run.
    """
    names = [o.name for o in session.get_outputs() if o.type not in NARROW_TYPE_NAMES]
    if names:
        session.run(names, dict(feeds))
        return
    session.run_with_ort_values(None, as_ortvalues(feeds))


def as_ortvalues(feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Feeds as ``run_with_ort_values`` takes them: arrays wrapped as OrtValues (over their memory, which
    the OrtValue keeps alive), OrtValues as they are."""
    from ..runtime.real import ort

    return {
        k: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()
    }


def as_file_arrays(feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Feeds as an inputs file holds them: a bfloat16 or float8 OrtValue as its raw bits (which
    :func:`narrow_feeds` reads back as the same values); other feeds unchanged."""
    return {name: bits_of(v) if narrow_type(v) is not None else v for name, v in feeds.items()}


def _forms(kind: NarrowFloat) -> str:
    return (
        f"give its raw bits as {kind.bits_dtype} or its values as float32 (rounded to nearest even by "
        "onnxruntime's Cast); see docs/commands.md"
    )


def feed_from_array(name: str, array: np.ndarray, elem_type: int) -> Any:
    """The OrtValue for a graph input of a bfloat16 or float8 type given as an array (the convention of the
    module docstring: raw bits as unsigned integers of the type's width, or float32 values, or an ml_dtypes
    array of the type, or the void array ``numpy.savez`` writes for one).

    Raises:
        BadInputError: any other dtype (a float16 or float64 array, integers of another width, ...), or a
            float32 value beyond the type's finite range.
    """
    kind = _kind(elem_type)
    dtype = array.dtype
    if dtype == kind.bits_dtype:
        return from_bits(array, elem_type)
    if dtype == np.float32:
        return from_float32(array, elem_type, name)
    if dtype.name == _ML_DTYPES_NAMES[kind.name] or (
        dtype.kind == "V" and dtype.itemsize * 8 == kind.bits and dtype.names is None and not dtype.subdtype
    ):
        return from_bits(np.ascontiguousarray(array).view(kind.bits_dtype), elem_type)
    raise BadInputError(
        f"input {name!r} is {kind.name} (the model says so) but the array given is {dtype}; {_forms(kind)}",
        tensor=name,
        value=str(dtype),
        rule=f"a {kind.name} input is given as {kind.bits_dtype} bits or float32 values",
    )


def narrow_inputs(graph: onnx.GraphProto) -> dict[str, int]:
    """The graph inputs of a bfloat16 or float8 type: name -> ONNX element type."""
    return {
        vi.name: vi.type.tensor_type.elem_type
        for vi in graph.input
        if vi.type.WhichOneof("value") == "tensor_type" and is_narrow_float(vi.type.tensor_type.elem_type)
    }


def narrow_feeds(graph: onnx.GraphProto, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """The feeds read from an inputs file, with every array given for a bfloat16 or float8 graph input made
    the OrtValue onnxruntime takes for it (:func:`feed_from_array`); other feeds unchanged.

    Raises:
        BadInputError: such an array of a dtype the convention does not take, or a float32 value beyond
            the type's finite range; an array in the other byte order.
    """
    for name, value in feeds.items():
        if isinstance(value, np.ndarray) and not value.dtype.isnative:
            # onnxruntime would read these bytes in the machine's order, other numbers than the file holds
            raise BadInputError(
                f"array {name!r} is stored in the other byte order ({value.dtype.str}); its values would be "
                f"read as other numbers: save it with .astype({value.dtype.newbyteorder('=').str!r})",
                tensor=name,
                value=value.dtype.str,
                rule="an inputs file holds arrays in the machine's byte order",
            )
    out = dict(feeds)
    for name, elem_type in narrow_inputs(graph).items():
        value = out.get(name)
        if isinstance(value, np.ndarray):
            out[name] = feed_from_array(name, value, elem_type)
            logger.debug("input %r: %s array read as %s", name, value.dtype, NARROW_FLOATS[elem_type].name)
    return out
