"""GatherElements 11/13 -> DML_OPERATOR_GATHER_ELEMENTS, and the element-wise view shared with Scatter.

The DML EP's rule (facts §5): D = r, Axis = the normalised axis. DirectML requires IndicesTensor.Sizes to
equal InputTensor.Sizes on every dimension but Axis; ONNX lets indices be smaller there. Then InputTensor
is described as a strided window of data (Sizes from indices, Strides of the whole data), which reads
exactly the elements ONNX reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ...dml.enums import OperatorType
from ...dml.symbolic import any_differ, describe, differ
from ...dml.tensor import packed_strides
from ..plan import Reason
from .base import (
    ConvertContext,
    Converter,
    DataPlan,
    Implementations,
    Lowering,
    Target,
    View,
    check_common,
    malformed,
    normalize_axis,
    read_inputs,
)

OP = OperatorType.GATHER_ELEMENTS


def check_elementwise_shapes(
    ctx: ConvertContext, data_shape: tuple[int, ...], idx_shape: tuple[int, ...], axis: int
) -> tuple[int, ...] | None:
    """ONNX: indices have data's rank and are no larger on other dims. Returns the window, or None."""
    r = len(data_shape)
    if len(idx_shape) != r:
        raise malformed(
            "INDICES_SHAPE_INVALID",
            f"{ctx.op_type} indices must have the rank of data ({r}), not {len(idx_shape)}",
            list(idx_shape),
        )
    for dim in range(r):
        if dim != axis and differ(idx_shape[dim], data_shape[dim]) and idx_shape[dim] > data_shape[dim]:
            raise malformed(
                "INDICES_SHAPE_INVALID",
                f"{ctx.op_type} indices {list(idx_shape)} exceed data {list(data_shape)} on dimension {dim}",
                {"data": list(data_shape), "indices": list(idx_shape)},
            )
    window = tuple(data_shape[dim] if dim == axis else idx_shape[dim] for dim in range(r))
    return None if window == data_shape else window


def _merge(
    window: tuple[int, ...], strides: tuple[int, ...], axis: int
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Merge neighbouring dims on one side of the axis where the window's memory is contiguous.

    The element-wise ops treat every dim but the axis alike (indices match the window there), so two
    neighbours merge whenever the outer one's stride equals the inner one's span.
    """
    sizes: list[int] = []
    out_strides: list[int] = []
    new_axis = 0
    for dim, (size, stride) in enumerate(zip(window, strides, strict=False)):
        mergeable = dim != axis and sizes and dim - 1 != axis and out_strides[-1] == stride * size
        if mergeable:
            sizes[-1] *= size
            out_strides[-1] = stride
        else:
            if dim == axis:
                new_axis = len(sizes)
            sizes.append(size)
            out_strides.append(stride)
    return tuple(sizes), tuple(out_strides), new_axis


def elementwise_view_builder(
    data_shape: tuple[int, ...],
    idx_shape: tuple[int, ...],
    axis: int,
    window: tuple[int, ...] | None,
    data: DataPlan,
    *,
    scatter: bool,
) -> Callable[[bool], View]:
    """Views for GatherElements and Scatter: data (window), indices (= updates), output."""
    pair = (2,) if data.pairs else ()
    win = window if window is not None else data_shape
    # Strides of the window inside the whole data buffer, in units of the bound DirectML type.
    base = packed_strides(data_shape)
    strides = (*tuple(s * 2 for s in base), 1) if data.pairs else base
    full = win + pair
    idx_full = idx_shape + pair

    def build(merge: bool) -> View:
        sizes, st, ax = (full, strides, axis) if not merge else _merge(full, strides, axis)
        idx = (
            idx_full
            if not merge
            else tuple(sizes[i] if i != ax else idx_shape[axis] for i in range(len(sizes)))
        )
        if scatter:
            return View(sizes, idx, sizes, updates=idx, input_strides=st, axis=ax)
        return View(sizes, idx, idx, input_strides=st, axis=ax)

    return build


def window_note(data_shape: tuple[int, ...], idx_shape: tuple[int, ...], axis: int) -> Reason:
    uncertain = [
        dim
        for dim, (i, d) in enumerate(zip(idx_shape, data_shape, strict=True))
        if dim != axis and i != d and not differ(i, d)
    ]
    if uncertain:
        shown_i, shown_d = [describe(i) for i in idx_shape], [describe(d) for d in data_shape]
        return Reason(
            "WINDOW_IF_SMALLER",
            f"whether indices {shown_i} are smaller than data {shown_d} on dimensions {uncertain} depends on "
            "runtime sizes: InputTensor is described as a strided window of data, which reads all of data "
            "when they match (where they are smaller, onnxruntime's DirectML provider builds a descriptor "
            "DirectML rejects)",
            {"data": shown_d, "indices": shown_i},
        )
    return Reason(
        "STRIDED_WINDOW",
        f"indices {list(idx_shape)} are smaller than data {list(data_shape)} on non-axis dimensions: "
        "InputTensor is a window of data (onnxruntime's DirectML provider builds a descriptor DirectML "
        "rejects for this)",
        {"data": list(data_shape), "indices": list(idx_shape)},
    )


def lower_elementwise(
    ctx: ConvertContext, op: OperatorType, dimension_count: Callable[[View], int], *, scatter: bool
) -> Lowering:
    """The recipe of GatherElements and (``scatter``) Scatter/ScatterElements, whose updates match indices."""
    tensors = read_inputs(ctx, updates=scatter)
    (data_shape, data_elem), (idx_shape, _) = tensors[:2]
    axis = normalize_axis(ctx, len(data_shape))
    if scatter and any_differ(tensors[2][0], idx_shape):
        upd_shape = tensors[2][0]
        raise malformed(
            "UPDATES_SHAPE_INVALID",
            f"{ctx.op_type} updates {list(upd_shape)} must have the shape of indices {list(idx_shape)}",
            list(upd_shape),
        )
    window = check_elementwise_shapes(ctx, data_shape, idx_shape, axis)
    # A scatter writes into (a window of) data; a gather's output has the shape of indices.
    roles = {"updates": idx_shape, "output": data_shape} if scatter else {"output": idx_shape}
    shapes = {"data": data_shape, "indices": idx_shape, **roles}
    check_common(ctx, shapes)
    target = Target.plan(ctx, op, data_elem, shapes)
    build = elementwise_view_builder(data_shape, idx_shape, axis, window, target.data, scatter=scatter)
    return target.lower(
        build,
        dimension_count,
        index_bounds=(data_shape[axis],),
        duplicate_indices=target.data.pairs,
        window=window,
        notes=(window_note(data_shape, idx_shape, axis),) if window else (),
        attributes=(("axis", axis),),
    )


class GatherElementsConverter(Converter):
    """ONNX GatherElements: output[i..] = data[i.. with axis replaced by indices[i..]]."""

    op_type = "GatherElements"
    OPERATORS: ClassVar[tuple[OperatorType, ...]] = (OP,)

    def _lower(self, ctx: ConvertContext) -> Lowering:
        return lower_elementwise(ctx, OP, lambda v: len(v.input), scatter=False)

    # Opset 13 only adds bfloat16, which DirectML cannot hold.
    IMPLEMENTATIONS: ClassVar[Implementations] = {11: _lower, 13: _lower}
