"""GatherND 11/12/13 -> DML_OPERATOR_GATHER_ND1 (FL 3_0 on, as the DML EP always builds) or GATHER_ND.

The DML EP's rule (facts §5): D = max(r, q, rank(out)), InputDimensionCount = r, IndicesDimensionCount = q,
BatchDimensionCount = batch_dims. Below FL 3_0 only GATHER_ND exists, which has no batch dimensions: data's
batch dimensions and the first addressed dimension are read as one, and a host step folds each index
tuple's batch position into its first coordinate. GATHER_ND then addresses exactly the elements
GatherND's batch_dims selects: ``data[p, i, j...]`` (``p`` the tuple's own flat batch position) is
``data'[p * d + i, j...]`` for data' = data reshaped to ``[N * d, ...]``.
"""

from __future__ import annotations

import math
from typing import ClassVar

from ...dml.enums import FeatureLevel, OperatorType
from ...dml.symbolic import any_differ, describe, is_symbolic
from ..plan import HostStep, HostStepKind, Reason
from .base import (
    ConvertContext,
    Converter,
    Implementations,
    Lowering,
    Target,
    View,
    check_common,
    malformed,
    read_inputs,
)

EP_SCALAR_OUTPUT = Reason(
    "EP_REJECTS",
    "onnxruntime's DirectML provider rejects a GatherND whose output is a scalar; DirectML itself takes it "
    "as Sizes of 1s",
)


def nd_shapes(
    ctx: ConvertContext, data_shape: tuple[int, ...], idx_shape: tuple[int, ...], batch_dims: int
) -> tuple[int, tuple[int, ...]]:
    """ONNX GatherND/ScatterND shape rules: (k, the gathered/updates shape)."""
    r, q = len(data_shape), len(idx_shape)
    if r < 1 or q < 1:
        raise malformed("RANK_INVALID", f"{ctx.op_type} data and indices must have rank >= 1", [r, q])
    if not 0 <= batch_dims < min(r, q):
        raise malformed(
            "ATTRIBUTE_INVALID",
            f"batch_dims {batch_dims} must be in [0, min(rank(data), rank(indices)) - 1] = "
            f"[0, {min(r, q) - 1}]",
            batch_dims,
        )
    if any_differ(data_shape[:batch_dims], idx_shape[:batch_dims]):
        raise malformed(
            "INDICES_SHAPE_INVALID",
            f"the first {batch_dims} dims of data {list(data_shape)} and indices {list(idx_shape)} "
            "must match",
            {"data": list(data_shape), "indices": list(idx_shape)},
        )
    k = idx_shape[-1]
    if is_symbolic(k):
        raise malformed(
            "SHAPE_UNKNOWN",
            f"the last dim of indices ({k!r}) is symbolic, so the rank of the output is not known statically",
            repr(k),
        )
    if not 1 <= k <= r - batch_dims:
        raise malformed(
            "INDICES_SHAPE_INVALID",
            f"the last dim of indices ({k}) must be in [1, rank(data) - batch_dims] = [1, {r - batch_dims}]",
            k,
        )
    return k, idx_shape[:-1] + data_shape[batch_dims + k :]


def nd_view(
    data_shape: tuple[int, ...],
    idx_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    batch_dims: int,
    k: int,
    pairs: bool,
    merge: bool,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
    """(input, indices, gathered/updates, batch count) shapes of the DirectML tensors.

    Merged: batch dims become one, the leading index dims one, the trailing (ungathered) data dims one;
    the k addressed data dims stay as they are (each tuple coordinate addresses one of them).
    """
    pair = (2,) if pairs else ()
    if not merge:
        return data_shape + pair, idx_shape, out_shape + pair, batch_dims
    b = batch_dims
    batch = (math.prod(data_shape[:b]),) if b else ()
    lead = (math.prod(idx_shape[b:-1]),) if len(idx_shape) - 1 > b else ()
    has_tail = len(data_shape) > b + k or pairs
    tail = (math.prod(data_shape[b + k :]) * (2 if pairs else 1),) if has_tail else ()
    return batch + data_shape[b : b + k] + tail, batch + lead + (k,), batch + lead + tail, 1 if b else 0


class GatherNDConverter(Converter):
    """ONNX GatherND: output = indices.shape[:-1] + data.shape[batch_dims + k:]."""

    op_type = "GatherND"
    OPERATORS: ClassVar[tuple[OperatorType, ...]] = (OperatorType.GATHER_ND, OperatorType.GATHER_ND1)

    def _impl_v11(self, ctx: ConvertContext) -> Lowering:
        return self._lower(ctx, batch_dims=0)

    def _impl_v12(self, ctx: ConvertContext) -> Lowering:
        # Opset 12 adds batch_dims.
        return self._lower(ctx, batch_dims=ctx.int_attr("batch_dims", 0))

    # Opset 13 only adds bfloat16, which DirectML cannot hold.
    IMPLEMENTATIONS: ClassVar[Implementations] = {11: _impl_v11, 12: _impl_v12, 13: _impl_v12}

    def _lower(self, ctx: ConvertContext, batch_dims: int) -> Lowering:
        (data_shape, data_elem), (idx_shape, _) = read_inputs(ctx)
        k, out_shape = nd_shapes(ctx, data_shape, idx_shape, batch_dims)
        shapes = {"data": data_shape, "indices": idx_shape, "output": out_shape}
        check_common(ctx, shapes)
        # The DML EP always builds GATHER_ND1 (FL 3_0); below it only GATHER_ND, which has no batch dims.
        op = OperatorType.GATHER_ND1 if ctx.feature_level >= FeatureLevel.FL_3_0 else OperatorType.GATHER_ND
        target = Target.plan(ctx, op, data_elem, shapes)
        # The shapes GATHER_ND(1) sees: as they are, or with the batch folded into the index tuples.
        view_shapes, view_b = (data_shape, idx_shape, out_shape), batch_dims
        fold: tuple[HostStep, ...] = ()
        if batch_dims and op is OperatorType.GATHER_ND:
            view_shapes, fold = fold_batch(ctx, data_shape, idx_shape, out_shape, batch_dims)
            view_b = 0

        def build(merge: bool) -> View:
            inp, idx, out, b = nd_view(*view_shapes, view_b, k, target.data.pairs, merge)
            fields = [("InputDimensionCount", len(inp)), ("IndicesDimensionCount", len(idx))]
            if op is OperatorType.GATHER_ND1:
                fields.append(("BatchDimensionCount", b))
            return View(inp, idx, out, fields=tuple(fields))

        return target.lower(
            build,
            lambda v: max(v.ranks),
            index_bounds=data_shape[batch_dims : batch_dims + k],
            per_component=True,
            attributes=(("batch_dims", batch_dims),),
            notes=(EP_SCALAR_OUTPUT,) if not out_shape else (),
            index_host_steps=fold,
        )


def fold_batch(
    ctx: ConvertContext,
    data_shape: tuple[int, ...],
    idx_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    batch_dims: int,
) -> tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], tuple[HostStep, ...]]:
    """GatherND with batch dimensions as GATHER_ND without: ((data, indices, output) shapes, host step).

    Data's batch dimensions and the first dimension a tuple addresses are read as one dimension of size
    N * d (a reshape), and each tuple's first coordinate i becomes ``batch_position * d + i``: the tuple
    keeps its size k, so every case that fits the level's dimension count without batch dimensions fits
    with them too. Indices and output keep one leading dimension of size N.
    """
    batch = data_shape[:batch_dims]
    n, first = math.prod(batch), data_shape[batch_dims]
    shapes = (
        (n * first, *data_shape[batch_dims + 1 :]),
        (n, *idx_shape[batch_dims:]),
        (n, *out_shape[batch_dims:]),
    )
    names = ", ".join(str(describe(b)) for b in batch)
    step = HostStep(
        HostStepKind.FOLD_BATCH_INTO_INDICES,
        f"fold each index tuple's batch position into it (batch dimensions [{names}] flattened to "
        f"{describe(n)}, read with data's next dimension of size {describe(first)} as one of size "
        f"{describe(n * first)}: the first coordinate i becomes position * {describe(first)} + i), so "
        "DML_OPERATOR_GATHER_ND, which has no batch dimensions, "
        f"runs batch_dims={batch_dims} ({ctx.feature_level.dml_name} has no DML_OPERATOR_GATHER_ND1)",
        bounds=data_shape[: batch_dims + 1],
    )
    return shapes, (step,)
