"""Each WebNN case as the DirectML descriptor onnxruntime's DirectML provider builds for the ONNX op.

See :mod:`dmlshim.conformance.webnn` for the op -> operator and DimensionCount table.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...dml.operators import (
    GatherElementsDesc,
    GatherNd1Desc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
)
from ...dml.tensor import BufferTensorDesc, right_align
from .cases import WebnnCase, WebnnCaseError, WebnnTensor


def _buffer(
    tensor: WebnnTensor, dimension_count: int, shape: Sequence[int] | None = None
) -> BufferTensorDesc:
    sizes = right_align(tensor.shape if shape is None else shape, dimension_count)
    return BufferTensorDesc(tensor.dml_data_type, sizes)


def _webnn_axis(case: WebnnCase, rank: int) -> int:
    # MLGatherOptions/MLScatterOptions declare axis as "[EnforceRange] unsigned long axis = 0": a negative
    # value is a TypeError in WebNN (no Python-style wrap), and axis >= rank is rejected by the builder.
    axis = 0 if case.axis is None else case.axis
    if not 0 <= axis < rank:
        raise WebnnCaseError(
            f"options.axis {axis} is outside [0, {rank}): WebNN's axis is an unsigned long below the input "
            "rank, so a WebNN graph builder rejects this case",
            node=case.name,
            op_type=case.op,
            value=axis,
        )
    return axis


def build_descriptor(case: WebnnCase) -> OperatorDesc:
    """The DirectML descriptor for a case, built as the DML EP builds it for the matching ONNX op.

    Sizes are the case's shapes right-aligned into one DimensionCount (see the module docstring), with
    no Strides; the index tensor keeps the case's type; an omitted axis is 0 and the scatter axis is
    shifted by the padding.

    Raises:
        WebnnCaseError: the case's axis is not one WebNN accepts, or a scatter case has no updates.
    """
    r = len(case.input.shape)
    q = len(case.indices.shape)
    if case.op == "gatherElements":
        axis = _webnn_axis(case, r)
        d = r
        return GatherElementsDesc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            output_tensor=_buffer(case.input, d, case.indices.shape),
            axis=axis,
        )
    if case.op == "gatherND":
        # WebNN gatherND: output = indices.shape[:-1] + input.shape[indices.shape[-1]:].
        tuple_size = case.indices.shape[-1] if q else 0
        out_shape = case.indices.shape[:-1] + case.input.shape[tuple_size:]
        d = max(r, q, len(out_shape))
        return GatherNd1Desc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            output_tensor=_buffer(case.input, d, out_shape),
            input_dimension_count=r,
            indices_dimension_count=q,
            batch_dimension_count=0,
        )
    if case.updates is None:
        raise WebnnCaseError("a scatter case needs an updates operand", node=case.name, op_type=case.op)
    if case.op == "scatterElements":
        axis = _webnn_axis(case, r)
        # The DML EP pads only the scatter-elements family to at least 4 dimensions.
        d = max(r, 4)
        return ScatterDesc(
            input_tensor=_buffer(case.input, d),
            indices_tensor=_buffer(case.indices, d),
            updates_tensor=_buffer(case.updates, d),
            output_tensor=_buffer(case.input, d),
            axis=axis + (d - r),
        )
    d = max(r, q, len(case.updates.shape))
    return ScatterNdDesc(
        input_tensor=_buffer(case.input, d),
        indices_tensor=_buffer(case.indices, d),
        updates_tensor=_buffer(case.updates, d),
        output_tensor=_buffer(case.input, d),
        input_dimension_count=r,
        indices_dimension_count=q,
    )


def case_inputs(case: WebnnCase, desc: OperatorDesc) -> dict[str, np.ndarray]:
    """The case's operands as packed arrays of the descriptor's Sizes, keyed by DirectML binding name."""
    tensors = desc.tensors()
    operands = {"InputTensor": case.input, "IndicesTensor": case.indices}
    if case.updates is not None:
        operands["UpdatesTensor"] = case.updates
    return {name: t.array().reshape(tensors[name].sizes) for name, t in operands.items()}
