"""Structural checks every kernel needs before it can run, and the shared binding step.

These are only the relations a kernel cannot run without (binding names, one DimensionCount, Sizes
formulas, matching DataTypes). Feature-level rules live in ``dmlshim.dml.validate``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NoReturn

from ..dml.enums import DataType, FeatureLevel
from ..dml.operators import OperatorDesc
from ..dml.tensor import BufferTensorDesc
from ..errors import BadInputError, InvalidDescriptorError
from .buffers import TensorView, view_tensor
from .indices import IndexContext
from .options import IndexMode, KernelOptions

logger = logging.getLogger(__name__)

INDEX_DATA_TYPES = (DataType.INT32, DataType.INT64, DataType.UINT32, DataType.UINT64)
"""What IndicesTensor.DataType may be (the DirectML tensor-support tables, FL 3_0 and later)."""


def fail(desc: OperatorDesc, message: str, *, field: str | None = None, value: Any = None) -> NoReturn:
    """Raise InvalidDescriptorError about ``desc`` naming the operator and the field."""
    raise InvalidDescriptorError(
        message, op_type=desc.operator_type.dml_name, tensor=field, value=value, rule=None
    )


def bind(desc: OperatorDesc, inputs: Mapping[str, Any]) -> dict[str, TensorView]:
    """Check the descriptor's tensors and the binding names, and view every input array.

    ``OutputTensor`` may appear in ``inputs`` (a runner binding every buffer) and is ignored.

    Raises:
        InvalidDescriptorError: a tensor field is missing or malformed, DimensionCounts differ, a binding
            name is unknown, or an input is not bound.
        BadInputError: an input array cannot be viewed as its tensor.
    """
    tensors = desc.tensors()
    for name, tensor in tensors.items():
        if not isinstance(tensor, BufferTensorDesc):
            fail(desc, f"{name} is not a DML_BUFFER_TENSOR_DESC (got {type(tensor).__name__})", field=name)
        if tensor.strides is not None and len(tensor.strides) != len(tensor.sizes):
            fail(
                desc,
                f"{name}.Strides has {len(tensor.strides)} entries but Sizes has {len(tensor.sizes)}",
                field=name,
                value=tensor.strides,
            )
        if any(s < 0 for s in tensor.sizes) or any(s < 0 for s in tensor.effective_strides):
            fail(desc, f"{name} has a negative size or stride", field=name, value=tensor.sizes)
    counts = {name: t.dimension_count for name, t in tensors.items()}
    if len(set(counts.values())) != 1:
        listing = ", ".join(f"{n} {c}" for n, c in counts.items())
        fail(desc, f"all tensors must share one DimensionCount; got {listing}", value=counts)
    if next(iter(counts.values())) == 0:
        fail(desc, "DimensionCount must be at least 1", value=0)

    allowed = set(desc.INPUT_TENSOR_FIELDS)
    unknown = sorted(set(inputs) - allowed - {"OutputTensor"})
    if unknown:
        fail(
            desc,
            f"unknown binding name(s) {unknown}; {desc.operator_type.dml_name} binds "
            f"{list(desc.INPUT_TENSOR_FIELDS)}",
            value=unknown,
        )
    missing = [n for n in desc.INPUT_TENSOR_FIELDS if n not in inputs]
    if missing:
        fail(desc, f"input(s) {missing} are not bound", field=missing[0], value=missing)
    if "OutputTensor" in inputs:
        logger.debug("%s: ignoring the bound OutputTensor", desc.operator_type.dml_name)
    return {name: view_tensor(desc, name, tensors[name], inputs[name]) for name in desc.INPUT_TENSOR_FIELDS}


def require_same_data_type(desc: OperatorDesc, *names: str) -> None:
    """All named tensors must have the DataType of the first one."""
    tensors = desc.tensors()
    first = tensors[names[0]].data_type
    for name in names[1:]:
        other = tensors[name].data_type
        if other != first:
            fail(
                desc,
                f"{name}.DataType {other.dml_name} must match {names[0]}.DataType {first.dml_name}",
                field=name,
                value=other.dml_name,
            )


def require_sizes(desc: OperatorDesc, name: str, expected: tuple[int, ...], why: str) -> None:
    """``name``'s Sizes must equal ``expected``."""
    actual = desc.tensors()[name].sizes
    if tuple(actual) != tuple(expected):
        fail(
            desc,
            f"{name}.Sizes {list(actual)} must be {list(expected)} ({why})",
            field=name,
            value=list(actual),
        )


def require_leading_ones(desc: OperatorDesc, name: str, meaningful: int, count_field: str) -> None:
    """Dimensions before the last ``meaningful`` ones are padding and must be 1."""
    sizes = desc.tensors()[name].sizes
    lead = sizes[: len(sizes) - meaningful]
    if any(s != 1 for s in lead):
        fail(
            desc,
            f"{name}.Sizes {list(sizes)}: only the last {count_field} = {meaningful} dimensions are "
            f"meaningful, so the leading ones must be 1",
            field=name,
            value=list(sizes),
        )


def index_context(desc: OperatorDesc, options: KernelOptions, target: str) -> IndexContext:
    """The IndexContext of ``desc`` under ``options``, after checking IndicesTensor.DataType."""
    data_type = desc.tensors()["IndicesTensor"].data_type
    if data_type not in INDEX_DATA_TYPES:
        allowed = ", ".join(t.name for t in INDEX_DATA_TYPES)
        fail(
            desc,
            f"IndicesTensor.DataType {data_type.dml_name} is not an index type ({allowed})",
            field="IndicesTensor",
            value=data_type.dml_name,
        )
    try:
        # Plain values ("clamp", 0x3000) are accepted: the enums compare by identity below.
        mode = IndexMode(options.index_mode)
        level = FeatureLevel(options.feature_level)
    except ValueError as e:
        raise BadInputError(
            f"invalid KernelOptions: {e}", op_type=desc.operator_type.dml_name, node=options.node
        ) from e
    return IndexContext(
        op=desc.operator_type,
        node=options.node,
        data_type=data_type,
        feature_level=level,
        mode=mode,
        target=target,
    )
