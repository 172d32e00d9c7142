"""Steps 3 and 4 of every lowering: choose the layout of the View, fill the descriptor, build the bindings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from onnx import TensorProto

from ...dml.enums import DataType, OperatorType
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
    assemble,
)
from .checks import max_dims, native_indices, plan_data, require_operator
from .context import ConvertContext, NodeFailure, inexpressible
from .views import DataPlan, Lowering, View

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
