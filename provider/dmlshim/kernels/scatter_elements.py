"""DML_OPERATOR_SCATTER (= DML_OPERATOR_SCATTER_ELEMENTS).

``output = input``, then ``output[i, index[i, j, k, ...], k, ...] = updates[i, j, k, ...]`` (the index
replaces the Axis coordinate). Writes happen in row-major order over IndicesTensor, so when two indices
hit one element the later write wins (the seed's 1-D example: indices [3,1,3,0] leave the second update
for 3 in place). DirectML calls overlapping writes invalid and guarantees no winner; dmlshim is
deterministic and counts them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml.operators import ScatterDesc
from .buffers import TensorView
from .common import bind, index_context, require_same_data_type, require_sizes
from .gather_elements import check_axis_shapes, element_offsets
from .indices import count_duplicates, normalize_indices, write_in_order
from .options import KernelOptions, KernelResult

logger = logging.getLogger(__name__)


def copy_input(inp: TensorView) -> np.ndarray:
    """The one copy a scatter makes: InputTensor, packed, as a flat writable array."""
    if inp.contiguous:
        return inp.flat[: inp.element_count].copy()
    return np.array(inp.array(), order="C").reshape(-1)


def run(desc: ScatterDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_SCATTER; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    require_same_data_type(desc, "InputTensor", "UpdatesTensor", "OutputTensor")
    ctx = index_context(desc, options, "OutputTensor")
    check_axis_shapes(desc)
    idx_sizes = desc.indices_tensor.sizes
    require_sizes(desc, "UpdatesTensor", idx_sizes, "it must equal IndicesTensor.Sizes")
    require_sizes(desc, "OutputTensor", desc.input_tensor.sizes, "it must equal InputTensor.Sizes")

    inp = views["InputTensor"]
    axis = desc.axis
    idx = normalize_indices(views["IndicesTensor"].array(), (inp.sizes[axis],), (axis,), ctx)
    out = copy_input(inp)
    duplicates = 0
    if idx.size:
        offsets = element_offsets(idx, idx_sizes, desc.output_tensor.packed_strides, axis)
        if options.detect_duplicates:
            duplicates = count_duplicates(offsets, out.size)
            if duplicates:
                logger.debug("%s: %d writes overwritten", desc.operator_type.dml_name, duplicates)
        updates = views["UpdatesTensor"].packed().reshape(-1)
        write_in_order(out, offsets, updates, unique=options.detect_duplicates and not duplicates)
    return KernelResult(out.reshape(desc.output_tensor.sizes), duplicates)
