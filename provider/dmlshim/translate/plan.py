"""The result of translating one ONNX node: frozen dataclasses, rendered to JSON from the same objects.

A :class:`NodeTranslation` says which DirectML operator a node becomes (``operator``), whether that is what
runs (``status``), where onnxruntime's DirectML provider would place it (``ort_placement``), why
(``reasons``), and the *plan*: for every DirectML input binding, which ONNX input feeds it and how
(host-side steps, reinterpretation, reshape to Sizes or a strided window), and how the DirectML output
becomes the ONNX output again.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from onnx import TensorProto, helper

from ..dml.enums import FeatureLevel
from ..dml.operators import OperatorDesc
from ..dml.tensor import BufferTensorDesc
from .deferred import LevelField

__all__ = [
    "CPU_PROVIDER",
    "DML_PROVIDER",
    "HostStep",
    "HostStepKind",
    "InputBinding",
    "Layout",
    "NodeTranslation",
    "OutputBinding",
    "Reason",
    "Reinterpret",
    "Status",
    "TensorInfo",
    "elem_type_name",
]

DML_PROVIDER = "DmlExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


class Status(str, enum.Enum):
    """What happens to a node.

    Attributes:
        DML: the node is translated to a DirectML operator at the target feature level.
        FALLBACK: the node is valid ONNX that DirectML cannot express at the target level (reasons say
            why); the runtime computes ONNX's answer on the CPU.
        ERROR: the node could not be translated: it is malformed (bad attribute, inconsistent shapes), its
            operator/opset is unknown, or its shapes are not known statically (reason ``SHAPE_UNKNOWN``).
    """

    DML = "dml"
    FALLBACK = "fallback"
    ERROR = "error"


@dataclass(frozen=True)
class Reason:
    """Why a node falls back, errs or is placed somewhere: a stable code, a message, the offending value."""

    code: str
    message: str
    value: object = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.value is not None:
            out["value"] = _jsonable(self.value)
        return out


@dataclass(frozen=True)
class TensorInfo:
    """Static type and shape of an ONNX tensor.

    Attributes:
        shape: dims (an int, a symbolic name, or None for unknown), or None when even the rank is unknown.
        elem_type: the ONNX ``TensorProto`` element type (0 = unknown).
    """

    shape: tuple[int | str | None, ...] | None
    elem_type: int

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known non-negative integer."""
        return self.static_dims is not None

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape as ints; ValueError when it is not static."""
        dims = self.static_dims
        if dims is None:
            raise ValueError(f"shape {self.shape} is not static")
        return dims

    @property
    def static_dims(self) -> tuple[int, ...] | None:
        """The shape as ints, or None when it is not static."""
        # Translation reads the shapes of every input several times; the instance is frozen, so keep
        # them (in __dict__, as functools.cached_property would, without its lock).
        try:
            return self.__dict__["_static_dims"]
        except KeyError:
            pass
        dims = None
        if self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape):
            dims = tuple(int(d) for d in self.shape)  # type: ignore[arg-type]
        self.__dict__["_static_dims"] = dims
        return dims


def elem_type_name(elem_type: int) -> str:
    """``TensorProto.FLOAT`` -> ``"float"`` (ONNX's lower-case names, as in ``tensor(float)``)."""
    try:
        return str(TensorProto.DataType.Name(elem_type)).lower()
    except ValueError:
        return f"type{elem_type}"


class Reinterpret(str, enum.Enum):
    """How an ONNX tensor's bytes are viewed as a DirectML data type (no conversion, no copy).

    Attributes:
        NONE: same element type.
        BOOL_AS_UINT8: ONNX bool is one byte 0/1, bound as UINT8 (as the DML EP does).
        UINT32_PAIRS: each 64-bit element viewed as two UINT32 (low word first), in an extra trailing
            dimension of size 2; used below FL 4_1, where DirectML has no 64-bit data.
    """

    NONE = "none"
    BOOL_AS_UINT8 = "bool_as_uint8"
    UINT32_PAIRS = "uint32_pairs"


class HostStepKind(str, enum.Enum):
    """A host-side step of a plan (runs on the CPU before or after the DirectML operator).

    Attributes:
        NORMALIZE_INDICES: check every index against the dimension it addresses (ONNX: out of range is an
            error), add the dimension size to negative ones, cast to UINT32. Needed below FL 3_0, where
            DirectML takes only UINT32 indices and no negative ones.
        DUPLICATE_FOR_PAIRS: repeat every index along a new trailing dimension of 2, so an element-wise
            gather/scatter moves both 32-bit halves of a 64-bit element.
        WRITE_BACK_WINDOW: the scatter ran on a window of the data (indices smaller than data); the ONNX
            output is a copy of data with that window replaced by the DirectML output.
        FOLD_BATCH_INTO_INDICES: GatherND with batch_dims below FL 3_0 (no GATHER_ND1): data's batch
            dimensions and the next one are read as one, and each index tuple's first coordinate ``i``
            becomes ``p * d + i`` (``p`` its flat batch position, ``d`` that next dimension), so GATHER_ND
            without batch dimensions addresses the same elements. ``bounds``: the batch dimensions, then d.
    """

    NORMALIZE_INDICES = "normalize_indices"
    DUPLICATE_FOR_PAIRS = "duplicate_for_pairs"
    WRITE_BACK_WINDOW = "write_back_window"
    FOLD_BATCH_INTO_INDICES = "fold_batch_into_indices"


@dataclass(frozen=True)
class HostStep:
    """One host-side step.

    Attributes:
        kind: what the step does.
        description: one sentence for people.
        bounds: NORMALIZE_INDICES: the size of the dimension each index addresses; one value for every
            index, or (``per_component``) one per position along the last axis (GatherND/ScatterND tuples).
        per_component: see ``bounds``.
        window: WRITE_BACK_WINDOW: the window's extent per ONNX dimension, starting at 0.
    """

    kind: HostStepKind
    description: str
    bounds: tuple[int, ...] = ()
    per_component: bool = False
    window: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "description": self.description}
        if self.bounds:
            out["bounds"] = list(self.bounds)
            out["per_component"] = self.per_component
        if self.window:
            out["window"] = list(self.window)
        return out


class Layout(str, enum.Enum):
    """How the ONNX shapes were laid onto DirectML dimensions.

    Attributes:
        EP: right-aligned with leading 1s to the DimensionCount rule of onnxruntime's DirectML provider.
        PADDED: right-aligned with leading 1s to exactly 4 dimensions (feature levels below 3_0).
        MERGED: dimensions the operator treats alike merged (e.g. all dimensions before the axis), then
            right-aligned; needed when the real ranks do not fit the level's dimension count.
    """

    EP = "ep"
    PADDED = "padded"
    MERGED = "merged"


@dataclass(frozen=True)
class InputBinding:
    """How one DirectML input tensor is fed from one ONNX input.

    Attributes:
        binding: the DirectML field (``InputTensor``, ``IndicesTensor``, ``UpdatesTensor``).
        onnx_index: position of the ONNX input in ``node.input``.
        onnx_name: the ONNX tensor name.
        onnx_shape: the ONNX tensor's shape.
        onnx_elem_type: the ONNX element type.
        host_steps: applied in order to the ONNX array before reinterpretation.
        reinterpret: how the bytes are viewed as ``tensor.data_type``.
        tensor: the DirectML tensor desc this binding fills (Sizes, Strides, DataType).
        window: when the ONNX input is larger than what the tensor reads (a window of the data starting
            at 0): the window's extent per ONNX dimension. With Strides the whole ONNX buffer is bound
            and the Strides address the window; without, the window is copied out.
    """

    binding: str
    onnx_index: int
    onnx_name: str
    onnx_shape: tuple[int, ...]
    onnx_elem_type: int
    host_steps: tuple[HostStep, ...]
    reinterpret: Reinterpret
    tensor: BufferTensorDesc
    window: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return _binding_json(self, "onnx_input", strides=True, window=self.window)


@dataclass(frozen=True)
class OutputBinding:
    """How the DirectML OutputTensor becomes the ONNX output.

    Attributes:
        binding: ``OutputTensor``.
        onnx_index: position in ``node.output`` (always 0).
        onnx_name: the ONNX output name.
        onnx_shape: the ONNX output shape.
        onnx_elem_type: the ONNX element type.
        tensor: the DirectML OutputTensor desc.
        reinterpret: how the DirectML bytes are viewed back as the ONNX type.
        view_shape: the ONNX-typed shape the DirectML output holds (the ONNX shape, or the window for a
            windowed scatter), before ``host_steps``.
        host_steps: applied after the operator (e.g. WRITE_BACK_WINDOW).
    """

    binding: str
    onnx_index: int
    onnx_name: str
    onnx_shape: tuple[int, ...]
    onnx_elem_type: int
    tensor: BufferTensorDesc
    reinterpret: Reinterpret
    view_shape: tuple[int, ...]
    host_steps: tuple[HostStep, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _binding_json(self, "onnx_output", strides=False)


@dataclass(frozen=True)
class NodeTranslation:
    """The translation of one ONNX node at one feature level.

    Attributes:
        name: the node's name, prefixed with its subgraph path (``loop/body/scatter_1``).
        op_type: the ONNX op type.
        domain: the ONNX domain ("" for ai.onnx).
        since_version: the since_version of the operator schema the node uses.
        feature_level: the target DirectML feature level.
        status: see :class:`Status`.
        operator: the DirectML descriptor (None unless status is DML, or when a descriptor was built but
            fails validation).
        min_feature_level: the lowest feature level at which the node translates, or None (computed on
            first read when the translator defers it).
        ort_placement: where onnxruntime's DirectML provider would run the node, or None when it would
            reject the node or it is not known.
        reasons: why (fallback/error causes first, then notes such as the EP's placement).
        layout: how the ONNX shapes were laid onto DirectML dimensions (None without a plan).
        inputs: the plan's input bindings, in descriptor order.
        output: the plan's output binding.
        attributes: the node attributes the translation used (normalised, e.g. ``axis`` non-negative).
    """

    name: str
    op_type: str
    domain: str
    since_version: int
    feature_level: FeatureLevel
    status: Status
    operator: OperatorDesc | None
    ort_placement: str | None
    reasons: tuple[Reason, ...]
    layout: Layout | None = None
    inputs: tuple[InputBinding, ...] = ()
    output: OutputBinding | None = None
    attributes: tuple[tuple[str, object], ...] = field(default=())
    min_feature_level: LevelField = LevelField()  # noqa: RUF009 (a data descriptor, read through)

    @property
    def ok(self) -> bool:
        """True when the node runs as a DirectML operator."""
        return self.status is Status.DML

    @property
    def reason_codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def host_steps(self) -> tuple[HostStep, ...]:
        """Every host step of the plan, inputs first."""
        steps = [s for b in self.inputs for s in b.host_steps]
        if self.output is not None:
            steps.extend(self.output.host_steps)
        return tuple(steps)

    def to_json(self, *, plan: bool = True) -> dict[str, Any]:
        """The node record of ``dmlshim inspect --json`` (schema_version 1), plus ``plan`` when asked."""
        from ..dml.json_form import operator_to_json

        out: dict[str, Any] = {
            "name": self.name,
            "op_type": self.op_type,
            "domain": self.domain,
            "since_version": self.since_version,
            "status": self.status.value,
            "min_feature_level": self.min_feature_level.dml_name if self.min_feature_level else None,
            "ort_placement": self.ort_placement,
            "operator": operator_to_json(self.operator) if self.operator is not None else None,
            "reasons": [r.to_json() for r in self.reasons],
        }
        if plan and self.output is not None:
            out["plan"] = {
                "layout": self.layout.value if self.layout else None,
                "inputs": [b.to_json() for b in self.inputs],
                "output": self.output.to_json(),
            }
        if self.symbolic:
            from ..dml.symbolic import render_json

            out = render_json(out)
        return out

    @property
    def symbolic(self) -> bool:
        """Whether the descriptor's sizes stand for symbolic dimensions (a ``SIZES_SYMBOLIC`` note)."""
        return any(r.code == "SIZES_SYMBOLIC" for r in self.reasons)


_T = TypeVar("_T")


def assemble(cls: type[_T], **fields: Any) -> _T:
    """``cls(**fields)`` for the frozen dataclasses of a plan, every field given, built without running
    the generated ``__init__``.

    Translation builds a dozen of these per node, and a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``; these classes have no ``__post_init__`` and no converting fields, so
    storing the values is the same object, in a third of the time.

    Raises:
        TypeError: ``fields`` does not name exactly the fields of ``cls``.
    """
    names, descriptors = _ASSEMBLY[cls]
    if fields.keys() != names:
        raise TypeError(f"{cls.__name__} needs the fields {sorted(names)}, got {sorted(fields)}")
    out = object.__new__(cls)
    for name, descriptor in descriptors:
        descriptor.__set__(out, fields.pop(name))
    out.__dict__.update(fields)
    return out


_ASSEMBLY: dict[type, tuple[frozenset[str], tuple[tuple[str, Any], ...]]] = {
    cls: (
        frozenset(f.name for f in dataclasses.fields(cls)),
        tuple(
            (f.name, cls.__dict__[f.name])
            for f in dataclasses.fields(cls)
            if hasattr(cls.__dict__.get(f.name), "__set__")
        ),
    )
    for cls in (HostStep, InputBinding, OutputBinding, NodeTranslation)
}
"""The classes ``assemble`` builds: their field names, and the fields kept by a data descriptor."""
for _cls in _ASSEMBLY:
    assert not hasattr(_cls, "__post_init__"), _cls


def replace_translation(t: NodeTranslation, **changes: Any) -> NodeTranslation:
    """``dataclasses.replace(t, **changes)`` that keeps a deferred ``min_feature_level`` deferred."""
    fields = {
        f.name: getattr(t, f.name)
        for f in dataclasses.fields(NodeTranslation)
        if f.name != "min_feature_level"
    }
    fields["min_feature_level"] = t.__dict__["_min_feature_level"]
    fields.update(changes)
    return assemble(NodeTranslation, **fields)


def _binding_json(
    binding: InputBinding | OutputBinding,
    position_key: str,
    *,
    strides: bool,
    window: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """A binding's plan record; ``position_key`` names its ONNX position, Strides and window on demand."""
    out: dict[str, Any] = {
        "binding": binding.binding,
        position_key: binding.onnx_index,
        "onnx_name": binding.onnx_name,
        "onnx_shape": list(binding.onnx_shape),
        "onnx_type": elem_type_name(binding.onnx_elem_type),
        "reinterpret": binding.reinterpret.value,
        "host_steps": [s.to_json() for s in binding.host_steps],
        "sizes": list(binding.tensor.sizes),
    }
    if strides:
        out["strides"] = list(binding.tensor.strides) if binding.tensor.strides is not None else None
    out["data_type"] = binding.tensor.data_type.dml_name
    if window is not None:
        out["window"] = list(window)
    return out


def _jsonable(value: object) -> Any:
    if isinstance(value, enum.Enum):
        return getattr(value, "dml_name", None) or value.value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


@functools.lru_cache(maxsize=64)
def np_dtype_of(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX element type (bool stays bool)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


@functools.lru_cache(maxsize=64)
def elem_type_of(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype."""
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
