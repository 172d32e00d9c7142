"""The node a converter works on: its context, the failures that end a conversion, and reading its inputs."""

from __future__ import annotations

from dataclasses import dataclass

from ...dml.enums import FeatureLevel
from ...dml.symbolic import placeholder_shape
from ..plan import (
    Reason,
    TensorInfo,
    elem_type_name,
)
from ..support_table import SupportRow

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
