"""What every converter shares: the context of one node, failures with reasons, and the lowering recipe.

Every converter follows DirectMLX's five steps: read the input tensors (types and static shapes), check the
node, compute the DirectML Sizes (as a :class:`View`: the un-padded shapes of every DirectML tensor), fill
the descriptor, and let the translator validate it. The per-op part is only the View: which shapes the
DirectML tensors have and which fields the operator gets. Padding, data types, host steps and bindings are
built here, the same way for every op.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from onnx import TensorProto

from ...dml import support
from ...dml.enums import DML_MAX_TENSOR_ELEMENTS, DataType, FeatureLevel, OperatorType
from ...dml.operators import DESC_TYPES, OperatorDesc, snake_case
from ...dml.tensor import BufferTensorDesc, packed_strides, right_align
from ..plan import (
    HostStep,
    HostStepKind,
    InputBinding,
    Layout,
    OutputBinding,
    Reason,
    Reinterpret,
    TensorInfo,
    assemble,
    elem_type_name,
)
from ..support_table import SupportRow, dml_data_type
from ..symbolic import is_symbolic, placeholder_shape

MAX_ONNX_RANK = 8
"""DML_TENSOR_DIMENSION_COUNT_MAX1: the DML EP refuses ranks above it."""


class NodeFailure(Exception):
    """Ends a conversion: the node is malformed/unknown (``fallback=False``) or inexpressible (True)."""

    def __init__(self, *reasons: Reason, fallback: bool) -> None:
        super().__init__("; ".join(r.message for r in reasons))
        self.reasons = reasons
        self.fallback = fallback


def malformed(code: str, message: str, value: object = None) -> NodeFailure:
    """A node ONNX itself rejects, or that cannot be translated statically (status ``error``)."""
    return NodeFailure(Reason(code, message, value), fallback=False)


def inexpressible(code: str, message: str, value: object = None) -> NodeFailure:
    """A valid node DirectML cannot express at the level (status ``fallback``)."""
    return NodeFailure(Reason(code, message, value), fallback=True)


@dataclass(frozen=True)
class ConvertContext:
    """One node to convert at one feature level.

    Attributes:
        op_type: the ONNX op.
        since_version: the schema since_version.
        attributes: the node's attributes as Python values.
        input_names: ONNX input names ("" for an omitted optional input).
        output_name: the ONNX output name.
        inputs: static info per input (None = unknown).
        feature_level: the target level.
        row: the support-table row.
        symbolic: translate inputs whose rank and type are known but whose sizes are symbolic, with
            placeholder sizes (:mod:`..symbolic`); otherwise such inputs are ``SHAPE_UNKNOWN``.
    """

    op_type: str
    since_version: int
    attributes: tuple[tuple[str, object], ...]
    input_names: tuple[str, ...]
    output_name: str
    inputs: tuple[TensorInfo | None, ...]
    feature_level: FeatureLevel
    row: SupportRow
    symbolic: bool = False

    def attr(self, name: str, default: object) -> object:
        for key, value in self.attributes:
            if key == name:
                return value
        return default

    def int_attr(self, name: str, default: int) -> int:
        value = self.attr(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise malformed("ATTRIBUTE_INVALID", f"attribute {name!r} must be an integer", value)
        return value

    def str_attr(self, name: str, default: str) -> str:
        value = self.attr(name, default)
        if isinstance(value, bytes):
            value = value.decode()
        if not isinstance(value, str):
            raise malformed("ATTRIBUTE_INVALID", f"attribute {name!r} must be a string", value)
        return value

    def tensor(self, index: int, role: str) -> tuple[tuple[int, ...], int]:
        """(static shape, elem type) of input ``index``; an error reason when missing or not static."""
        if index >= len(self.input_names) or not self.input_names[index]:
            raise malformed("INPUT_MISSING", f"{self.op_type} needs input {index} ({role})", index)
        info = self.inputs[index] if index < len(self.inputs) else None
        dims = info.static_dims if info is not None and info.elem_type else None
        if dims is not None:
            return dims, info.elem_type  # type: ignore[union-attr]
        name = self.input_names[index]
        if info is None or info.shape is None or not info.elem_type:
            raise malformed(
                "SHAPE_UNKNOWN",
                f"the type or rank of {role} {name!r} is not known statically; give --input-shape for "
                "the symbolic model inputs it depends on, or run the model (run and validate translate "
                "the node with the real shapes)",
                name,
            )
        if self.symbolic:
            return placeholder_shape(info.shape, index), info.elem_type
        if not info.is_static:
            raise malformed(
                "SHAPE_UNKNOWN",
                f"{role} {name!r} has shape {list(info.shape)} with unknown dimensions; the descriptor "
                "needs concrete sizes: give --input-shape for the symbolic model inputs",
                [d if isinstance(d, int) else str(d) for d in info.shape],
            )
        return info.static_shape, info.elem_type


# View, DataPlan, Lowering and Target are built on every lowering attempt and never leave the translator:
# named tuples, which cost half of what a frozen dataclass costs to build.


class View(NamedTuple):
    """The un-padded shapes of the DirectML tensors and the operator fields in view coordinates.

    ``fields`` holds the UINT fields (Axis counted in the view's InputTensor dimensions, before the shift
    for padding). ``input_strides`` is set for a strided window of the data.
    """

    input: tuple[int, ...]
    indices: tuple[int, ...]
    output: tuple[int, ...]
    updates: tuple[int, ...] | None = None
    input_strides: tuple[int, ...] | None = None
    axis: int | None = None
    fields: tuple[tuple[str, int], ...] = ()

    @property
    def ranks(self) -> tuple[int, ...]:
        shapes = [self.input, self.indices, self.output]
        if self.updates is not None:
            shapes.append(self.updates)
        return tuple(len(s) for s in shapes)


class DataPlan(NamedTuple):
    """How data (and updates, output) bytes are bound."""

    onnx_type: int
    dml_type: DataType
    reinterpret: Reinterpret

    @property
    def pairs(self) -> bool:
        return self.reinterpret is Reinterpret.UINT32_PAIRS


class Lowering(NamedTuple):
    """A converter's result: the descriptor and the plan."""

    operator: OperatorDesc
    layout: Layout
    inputs: tuple[InputBinding, ...]
    output: OutputBinding
    notes: tuple[Reason, ...] = ()
    attributes: tuple[tuple[str, object], ...] = ()


def normalize_axis(ctx: ConvertContext, rank: int) -> int:
    """ONNX: data of rank ``r`` >= 1, axis in [-r, r-1]; negative counts from the back."""
    if rank < 1:
        raise malformed("RANK_INVALID", f"{ctx.op_type} data must have rank >= 1", rank)
    axis = ctx.int_attr("axis", 0)
    if not -rank <= axis < rank:
        raise malformed(
            "AXIS_OUT_OF_RANGE", f"axis {axis} is outside [-{rank}, {rank - 1}] for data of rank {rank}", axis
        )
    return axis + rank if axis < 0 else axis


def check_index_type(ctx: ConvertContext, elem: int, name: str) -> None:
    allowed = ctx.row.roles[1].onnx_types
    if elem not in allowed:
        raise malformed(
            "INDEX_TYPE_INVALID",
            f"{ctx.op_type} indices must be {' or '.join(elem_type_name(t) for t in allowed)}, "
            f"{name!r} is {elem_type_name(elem)}",
            elem_type_name(elem),
        )


StaticTensor = tuple[tuple[int, ...], int]
"""(static shape, ONNX element type) of one input."""


def read_inputs(ctx: ConvertContext, *, updates: bool = False) -> tuple[StaticTensor, ...]:
    """Step 1: (shape, type) of data, indices and (``updates``) a scatter's updates.

    Checks the index type and that updates have data's type, once every input is known.
    """
    roles = ("data", "indices", "updates") if updates else ("data", "indices")
    tensors = tuple(ctx.tensor(index, role) for index, role in enumerate(roles))
    (_, data_elem), (_, index_elem) = tensors[:2]
    check_index_type(ctx, index_elem, ctx.input_names[1])
    if updates and tensors[2][1] != data_elem:
        raise malformed("TYPE_MISMATCH", f"{ctx.op_type} updates must have data's type", tensors[2][1])
    return tensors


_COMMON_LIMITS: tuple[tuple[str, Callable[[tuple[int, ...]], object], str], ...] = (
    (
        "RANK_TOO_LARGE",
        lambda shape: len(shape) if len(shape) > MAX_ONNX_RANK else None,
        f"{{role}} has rank {{value}}; DirectML tensors have at most {MAX_ONNX_RANK} dimensions "
        "(onnxruntime's DirectML provider rejects the node)",
    ),
    (
        "EMPTY_TENSOR",
        lambda shape: list(shape) if 0 in shape else None,
        "{role} has shape {value}; DirectML forbids a size of 0, so the node runs on the CPU (ONNX's result)",
    ),
    (
        "TOO_MANY_ELEMENTS",
        lambda shape: math.prod(shape) if math.prod(shape) > DML_MAX_TENSOR_ELEMENTS else None,
        "{role} holds {value} elements; a DirectML tensor holds at most 2^32-1",
    ),
)
"""(reason code, the offending value of a shape or None, message) of each level-independent limit."""


def check_common(ctx: ConvertContext, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Level-independent fallbacks: rank above 8, empty tensors, too many elements.

    With symbolic sizes only the rank is decided; the size limits wait for the real shapes.
    """
    if any(is_symbolic(d) for shape in shapes.values() for d in shape):
        shapes = {role: (1,) * len(shape) for role, shape in shapes.items()}
    if all(
        len(shape) <= MAX_ONNX_RANK and 0 not in shape and math.prod(shape) <= DML_MAX_TENSOR_ELEMENTS
        for shape in shapes.values()
    ):
        return
    # Limit by limit, not shape by shape: a rank above 8 anywhere is the reason before an empty tensor.
    for code, offending, message in _COMMON_LIMITS:
        for role, shape in shapes.items():
            value = offending(shape)
            if value is not None:
                raise inexpressible(code, message.format(role=role, value=value), value)


def check_reduction(ctx: ConvertContext) -> str:
    """Scatter reductions: DirectML's scatter descriptors have no reduction field (up to FL 6_4)."""
    allowed = ("none", "add", "mul") if ctx.since_version < 18 else ("none", "add", "mul", "max", "min")
    reduction = ctx.str_attr("reduction", "none")
    if reduction not in allowed:
        raise malformed(
            "ATTRIBUTE_INVALID",
            f"{ctx.op_type}-{ctx.since_version} reduction must be one of {', '.join(allowed)}",
            reduction,
        )
    if reduction != "none":
        raise inexpressible(
            "SCATTER_REDUCTION_UNSUPPORTED",
            f"DirectML has no scatter reduction (reduction={reduction!r}); the node runs on the CPU",
            reduction,
        )
    return reduction


def plan_data(ctx: ConvertContext, op: OperatorType, elem: int, role: str) -> DataPlan:
    """Bind the data type as is, bool as UINT8, or 64-bit as UINT32 pairs where the level has no 64-bit."""
    dml = dml_data_type(elem)
    if dml is None:
        raise inexpressible(
            "DATA_TYPE_UNSUPPORTED",
            f"DirectML has no data type for tensor({elem_type_name(elem)}) ({role})",
            elem_type_name(elem),
        )
    fl = ctx.feature_level
    accepted = support.supported_data_types(op, "InputTensor", fl)
    if dml in accepted:
        how = Reinterpret.BOOL_AS_UINT8 if elem == TensorProto.BOOL else Reinterpret.NONE
        return DataPlan(elem, dml, how)
    if dml.is_64bit and DataType.UINT32 in accepted:
        return DataPlan(elem, DataType.UINT32, Reinterpret.UINT32_PAIRS)
    since = support.first_level_supporting_data_type(op, "InputTensor", dml)
    later = f"; supported from {since.dml_name}" if since is not None else ""
    raise inexpressible(
        "DATA_TYPE_UNSUPPORTED",
        f"{op.dml_name} at {fl.dml_name} takes no {dml.name} data (tensor({elem_type_name(elem)})){later}",
        elem_type_name(elem),
    )


def require_operator(ctx: ConvertContext, op: OperatorType, why: str = "") -> None:
    if not support.operator_available(op, ctx.feature_level):
        since = support.first_feature_level(op)
        raise inexpressible(
            "OPERATOR_UNAVAILABLE",
            f"{op.dml_name} is not available at {ctx.feature_level.dml_name} (introduced in "
            f"{since.dml_name}){why}",
            op.dml_name,
        )


def native_indices(ctx: ConvertContext, op: OperatorType) -> bool:
    """FL 3_0 and up take signed INT32/INT64 indices (negatives included); below, only UINT32."""
    return DataType.INT64 in support.supported_data_types(op, "IndicesTensor", ctx.feature_level)


def max_dims(ctx: ConvertContext, op: OperatorType) -> tuple[int, bool]:
    """(largest DimensionCount, whether it is the only one) for the operator at the level."""
    return _max_dims(op, ctx.feature_level)


@functools.lru_cache(maxsize=256)
def _max_dims(op: OperatorType, fl: FeatureLevel) -> tuple[int, bool]:
    counts = list(support.supported_dimension_counts(op, fl))
    return max(counts), len(counts) == 1


for _desc_type in DESC_TYPES.values():
    # Target.lower builds descriptors positionally from TENSOR_FIELDS and UINT_FIELDS.
    assert [f.name for f in dataclasses.fields(_desc_type)] == [
        snake_case(n) for n in (*_desc_type.TENSOR_FIELDS, *_desc_type.UINT_FIELDS)
    ], _desc_type


ViewBuilder = Callable[[bool], View]
"""Builds the View; the argument says whether to merge dimensions."""


def choose_view(
    ctx: ConvertContext,
    op: OperatorType,
    build: ViewBuilder,
    dimension_count: Callable[[View], int],
    *,
    extended: bool,
) -> tuple[View, Layout, int]:
    """Pick the layout: the EP's rule (FL 3_0+) or padding to 4, else merged dimensions, else fall back.

    ``extended`` says the view already deviates from the EP (64-bit pairs); then merging may rescue a
    DimensionCount above 8. Without it, a DimensionCount above 8 falls back as the EP's does.
    """
    limit, exact = max_dims(ctx, op)
    plain = build(False)
    if exact:
        if max(plain.ranks) <= limit:
            return plain, Layout.PADDED, limit
        merged = build(True)
        if max(merged.ranks) <= limit:
            return merged, Layout.MERGED, limit
        raise inexpressible(
            "DIMENSION_COUNT_UNSUPPORTED",
            f"{op.dml_name} at {ctx.feature_level.dml_name} takes exactly {limit} dimensions; even with "
            f"dimensions merged the node needs {max(merged.ranks)}",
            max(merged.ranks),
        )
    d = dimension_count(plain)
    if d <= limit:
        return plain, Layout.EP, d
    if extended:
        merged = build(True)
        d = dimension_count(merged)
        if d <= limit:
            return merged, Layout.MERGED, d
    raise inexpressible(
        "RANK_TOO_LARGE",
        f"{op.dml_name} would need DimensionCount {d}; DirectML allows at most {limit} "
        "(onnxruntime's DirectML provider rejects the node)",
        d,
    )


def _pad_strides(strides: tuple[int, ...], sizes: tuple[int, ...], d: int) -> tuple[int, ...]:
    span = strides[0] * sizes[0] if strides else 1
    return (span,) * (d - len(strides)) + strides


def index_steps(
    ctx: ConvertContext, op: OperatorType, bounds: tuple[int, ...], per_component: bool, elem: int
) -> tuple[tuple[HostStep, ...], DataType]:
    """Indices: bound as is from FL 3_0 (DML handles negatives), else normalised and cast to UINT32."""
    if native_indices(ctx, op):
        return (), DataType.INT64 if elem == TensorProto.INT64 else DataType.INT32
    step = HostStep(
        HostStepKind.NORMALIZE_INDICES,
        "check every index against its dimension, add the size to negative ones, cast to UINT32 "
        f"({ctx.feature_level.dml_name} takes only non-negative UINT32 indices)",
        bounds,
        per_component,
    )
    return (step,), DataType.UINT32


class Target(NamedTuple):
    """Step 2's result: the DirectML operator a node lowers to, how its data is bound, and its ONNX shapes.

    Attributes:
        ctx: the node.
        op: the DirectML operator, available at the level.
        data: how data (and updates, output) bytes are bound for ``op``.
        shapes: the ONNX shapes by role: ``data``, ``indices``, ``updates`` (scatters), ``output``.
    """

    ctx: ConvertContext
    op: OperatorType
    data: DataPlan
    shapes: Mapping[str, tuple[int, ...]]

    @classmethod
    def plan(
        cls, ctx: ConvertContext, op: OperatorType, data_elem: int, shapes: Mapping[str, tuple[int, ...]]
    ) -> Target:
        """Check ``op`` exists at the level and plan how data of type ``data_elem`` is bound to it."""
        require_operator(ctx, op)
        return cls(ctx, op, plan_data(ctx, op, data_elem, "data"), shapes)

    def lower(
        self,
        build: ViewBuilder,
        dimension_count: Callable[[View], int],
        *,
        index_bounds: tuple[int, ...],
        per_component: bool = False,
        duplicate_indices: bool = False,
        window: tuple[int, ...] | None = None,
        notes: tuple[Reason, ...] = (),
        attributes: tuple[tuple[str, object], ...] = (),
        index_host_steps: tuple[HostStep, ...] = (),
    ) -> Lowering:
        """Steps 3 and 4: choose the View and its layout, then fill the descriptor and build the bindings.

        ``window`` (indices smaller than data on non-axis dimensions) reads data through Strides: the view
        then already deviates from the EP, so merging dimensions may rescue its DimensionCount.
        ``index_host_steps`` run on the indices after their normalisation.
        """
        ctx, op, data, onnx_shapes = self.ctx, self.op, self.data, self.shapes
        try:
            view, layout, d = choose_view(
                ctx, op, build, dimension_count, extended=data.pairs or window is not None
            )
        except NodeFailure as failure:
            if window is None:
                raise
            data_shape, idx_shape = list(onnx_shapes["data"]), list(onnx_shapes["indices"])
            raise inexpressible(
                "INDICES_SMALLER_THAN_DATA",
                f"indices {idx_shape} are smaller than data {data_shape} on non-axis dimensions and "
                f"the strided window does not fit: {failure}",
                {"data": data_shape, "indices": idx_shape},
            ) from failure
        _, index_elem = ctx.tensor(1, "indices")
        steps, index_type = index_steps(ctx, op, index_bounds, per_component, index_elem)
        steps += index_host_steps
        if duplicate_indices:
            steps = (
                *steps,
                HostStep(
                    HostStepKind.DUPLICATE_FOR_PAIRS,
                    "repeat every index along a trailing dimension of 2 so both UINT32 halves of each "
                    "64-bit element move",
                ),
            )
        strides = None
        if view.input_strides is not None and view.input_strides != packed_strides(view.input):
            strides = _pad_strides(view.input_strides, view.input, d)
        # right_align gives tuples of ints, _pad_strides too: BufferTensorDesc.of needs no conversion.
        input_desc = BufferTensorDesc.of(data.dml_type, right_align(view.input, d), strides)
        indices_desc = BufferTensorDesc.of(index_type, right_align(view.indices, d))
        output_desc = BufferTensorDesc.of(data.dml_type, right_align(view.output, d))
        tensors: dict[str, BufferTensorDesc] = {
            "InputTensor": input_desc,
            "IndicesTensor": indices_desc,
            "OutputTensor": output_desc,
        }
        updates_desc = None
        if view.updates is not None:
            updates_desc = BufferTensorDesc.of(data.dml_type, right_align(view.updates, d))
            tensors["UpdatesTensor"] = updates_desc
        uints = dict(view.fields)
        if view.axis is not None:
            # The EP's rule: the axis counted in the data's real dims, shifted past the padding 1s.
            uints["Axis"] = view.axis + d - len(view.input)
        desc_type = DESC_TYPES[op]
        # desc_type.from_fields(tensors, uints), positionally: the struct's order (checked below).
        fields: list[Any] = [tensors[name] for name in desc_type.TENSOR_FIELDS]
        fields.extend(int(uints[name]) for name in desc_type.UINT_FIELDS)
        desc: OperatorDesc = desc_type(*fields)

        names = ctx.input_names
        bindings = [
            assemble(
                InputBinding,
                binding="InputTensor",
                onnx_index=0,
                onnx_name=names[0],
                onnx_shape=onnx_shapes["data"],
                onnx_elem_type=data.onnx_type,
                host_steps=(),
                reinterpret=data.reinterpret,
                tensor=input_desc,
                window=window,
            ),
            assemble(
                InputBinding,
                binding="IndicesTensor",
                onnx_index=1,
                onnx_name=names[1],
                onnx_shape=onnx_shapes["indices"],
                onnx_elem_type=index_elem,
                host_steps=steps,
                reinterpret=Reinterpret.NONE,
                tensor=indices_desc,
                window=None,
            ),
        ]
        if updates_desc is not None:
            bindings.append(
                assemble(
                    InputBinding,
                    binding="UpdatesTensor",
                    onnx_index=2,
                    onnx_name=names[2],
                    onnx_shape=onnx_shapes["updates"],
                    onnx_elem_type=data.onnx_type,
                    host_steps=(),
                    reinterpret=data.reinterpret,
                    tensor=updates_desc,
                    window=None,
                )
            )
        out_steps: tuple[HostStep, ...] = ()
        view_shape = onnx_shapes["output"]
        if window is not None and view.updates is not None:
            out_steps = (
                HostStep(
                    HostStepKind.WRITE_BACK_WINDOW,
                    "the scatter ran on a window of data; the output is data with that window replaced",
                    window=window,
                ),
            )
            view_shape = window
        output = assemble(
            OutputBinding,
            binding="OutputTensor",
            onnx_index=0,
            onnx_name=ctx.output_name,
            onnx_shape=onnx_shapes["output"],
            onnx_elem_type=data.onnx_type,
            tensor=output_desc,
            reinterpret=data.reinterpret,
            view_shape=view_shape,
            host_steps=out_steps,
        )
        return Lowering(desc, layout, tuple(bindings), output, notes, attributes)


Implementations = Mapping[int, Callable[[Any, ConvertContext], Lowering]]
"""since_version -> the converter method for it (Any: each subclass's table holds its own methods)."""


def scatter_implementations(lower: Callable[[Any, ConvertContext], Lowering]) -> Implementations:
    """The opsets ScatterElements and ScatterND share, all lowered by ``lower``.

    13 adds bfloat16 (DirectML cannot hold it), 16 adds reduction add/mul and 18 max/min: DirectML has no
    reduction, so from 16 on only ``reduction="none"`` lowers.
    """

    def lower_without_reduction(converter: Any, ctx: ConvertContext) -> Lowering:
        check_reduction(ctx)
        return lower(converter, ctx)

    return {11: lower, 13: lower, 16: lower_without_reduction, 18: lower_without_reduction}


class Converter:
    """Base of the converters: one subclass per ONNX op, one lowering method per opset that changed it.

    ``IMPLEMENTATIONS`` maps each since_version to its method explicitly (no discovery by name); the
    opsets that change nothing DirectML sees map to the same method.
    """

    op_type: ClassVar[str]
    domain: ClassVar[str] = ""
    IMPLEMENTATIONS: ClassVar[Implementations]
    OPERATORS: ClassVar[tuple[OperatorType, ...]]
    """Every DirectML operator a lowering may choose: where none is available, none can succeed."""

    def convert(self, ctx: ConvertContext) -> Lowering:
        impl = self.IMPLEMENTATIONS.get(ctx.since_version)
        if impl is None:
            known = ", ".join(str(v) for v in sorted(self.IMPLEMENTATIONS))
            raise malformed(
                "OPSET_UNSUPPORTED",
                f"{self.op_type}-{ctx.since_version} has no converter (implemented: {known})",
                ctx.since_version,
            )
        return impl(self, ctx)
