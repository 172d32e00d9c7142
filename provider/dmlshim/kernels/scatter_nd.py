"""DML_OPERATOR_SCATTER_ND.

``output = input``, then ``output[indices[n..., :], tail...] = updates[n..., tail...]`` for every index
tuple ``n``. UpdatesTensor.Sizes is the GATHER_ND output formula with no batch dimensions. Tuples are
applied in row-major order over IndicesTensor, so the last tuple naming a block wins; DirectML calls
overlapping writes invalid and guarantees no winner, dmlshim is deterministic and counts them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..dml import shapes
from ..dml.operators import ScatterNdDesc
from .common import bind, fail, index_context, require_same_data_type, require_sizes
from .gather_nd import check_nd_counts, tuple_offsets
from .indices import last_writes
from .options import KernelOptions, KernelResult
from .scatter_elements import copy_input

logger = logging.getLogger(__name__)


def run(desc: ScatterNdDesc, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
    """Execute DML_OPERATOR_SCATTER_ND; see :func:`dmlshim.kernels.execute`."""
    views = bind(desc, inputs)
    require_same_data_type(desc, "InputTensor", "UpdatesTensor", "OutputTensor")
    ctx = index_context(desc, options, "OutputTensor")
    r, q, t = check_nd_counts(desc, 0)
    in_sizes = desc.input_tensor.sizes
    try:
        expected = shapes.scatter_nd_updates_sizes(in_sizes, desc.indices_tensor.sizes, r, q)
    except ValueError as e:
        fail(desc, str(e), field="UpdatesTensor")
    require_sizes(desc, "UpdatesTensor", expected, "DML_SCATTER_ND UpdatesTensor Sizes formula")
    require_sizes(desc, "OutputTensor", in_sizes, "it must equal InputTensor.Sizes")

    d = len(in_sizes)
    block = math.prod(in_sizes[d - r + t :])
    out_desc = desc.output_tensor
    offsets = tuple_offsets(
        views["IndicesTensor"].array(), out_desc, out_desc.packed_strides, r, q, 0, ctx
    ).reshape(-1)
    out = copy_input(views["InputTensor"])
    duplicates = 0
    if offsets.size and block:
        updates = views["UpdatesTensor"].packed().reshape(offsets.size, block)
        rows = offsets // block  # a packed output: each tuple selects one run of `block` elements
        row_count = out.size // block
        mask, duplicates = last_writes(rows, row_count)
        if mask is not None:
            logger.debug("%s: %d writes overwritten by later ones", desc.operator_type.dml_name, duplicates)
            rows, updates = rows[mask], updates[mask]
        if block == 1:
            np.put(out, rows, updates.reshape(-1), mode="clip")
        else:
            # Rows are unique now, so the assignment order cannot matter.
            out.reshape(row_count, block)[rows] = updates
    if not options.detect_duplicates:
        duplicates = 0
    return KernelResult(out.reshape(out_desc.sizes), duplicates)
