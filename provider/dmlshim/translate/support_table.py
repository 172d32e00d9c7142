"""The support table as data: one row per (ONNX op, since_version), like the DML EP's registration table.

Each row says which DirectML operator the node becomes, the ONNX tensors it reads and the ONNX types that
DirectML can take for them, the first feature level at which the row translates, how onnxruntime's
DirectML execution provider places it, and caveats. The README's Markdown table is rendered from
:data:`SUPPORT_TABLE` by :func:`render_markdown`; nothing parses Markdown.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onnx import TensorProto

from ..dml.enums import DataType, FeatureLevel, OperatorType
from .plan import CPU_PROVIDER, DML_PROVIDER, Reason, elem_type_name

__all__ = [
    "DML_DATA_TYPES",
    "EXPRESSIBLE_DATA_TYPES",
    "INDEX_TYPES",
    "SUPPORT_TABLE",
    "EpRule",
    "SupportRow",
    "TensorRole",
    "dml_data_type",
    "find_row",
    "ort_placement",
    "render_markdown",
]

# ONNX element type -> the DirectML type its bytes are bound as (bool is one byte 0/1: UINT8, as the EP).
DML_DATA_TYPES: Mapping[int, DataType] = {
    TensorProto.FLOAT: DataType.FLOAT32,
    TensorProto.FLOAT16: DataType.FLOAT16,
    TensorProto.DOUBLE: DataType.FLOAT64,
    TensorProto.INT8: DataType.INT8,
    TensorProto.INT16: DataType.INT16,
    TensorProto.INT32: DataType.INT32,
    TensorProto.INT64: DataType.INT64,
    TensorProto.UINT8: DataType.UINT8,
    TensorProto.UINT16: DataType.UINT16,
    TensorProto.UINT32: DataType.UINT32,
    TensorProto.UINT64: DataType.UINT64,
    TensorProto.BOOL: DataType.UINT8,
}

EXPRESSIBLE_DATA_TYPES: tuple[int, ...] = tuple(DML_DATA_TYPES)
"""ONNX data types DirectML can hold (string, complex, bfloat16, float8 and 4-bit types cannot)."""

INDEX_TYPES: tuple[int, ...] = (TensorProto.INT32, TensorProto.INT64)


def dml_data_type(elem_type: int) -> DataType | None:
    """The DirectML type an ONNX element type is bound as, or None when DirectML has none."""
    return DML_DATA_TYPES.get(elem_type)


class EpRule(str, enum.Enum):
    """How onnxruntime's DirectML provider treats a row.

    Attributes:
        REGISTERED: registered for every type DirectML can take (its AllScalars list).
        REDUCTION_NONE_ONLY: registered with a support query that sends reduction != "none" to the CPU.
        NOT_REGISTERED: no DML kernel for this since_version: the node always runs on the CPU.
    """

    REGISTERED = "registered"
    REDUCTION_NONE_ONLY = "reduction none only"
    NOT_REGISTERED = "not registered"


@dataclass(frozen=True)
class TensorRole:
    """An ONNX input and the DirectML binding it feeds.

    Attributes:
        onnx_input: the ONNX input name in the schema (data, indices, updates).
        binding: the DirectML tensor field.
        onnx_types: the ONNX element types DirectML can take for it.
    """

    onnx_input: str
    binding: str
    onnx_types: tuple[int, ...]


@dataclass(frozen=True)
class SupportRow:
    """One (op, since_version) row.

    Attributes:
        op_type: the ONNX op.
        since_version: the schema's since_version.
        dml_operator: the operator at FL 3_0 and above (what the DML EP builds).
        lower_operator: the operator below FL 3_0 when it differs (GatherND: GATHER_ND), else None.
        roles: ONNX inputs and their bindings.
        first_feature_level: the lowest level at which some node of this row translates (float32 data,
            small ranks, no reduction).
        attributes: attributes read, with the values DirectML can express where restricted.
        ep_rule: how the DML EP places the row.
        caveats: short notes for the README.
    """

    op_type: str
    since_version: int
    dml_operator: OperatorType
    lower_operator: OperatorType | None
    roles: tuple[TensorRole, ...]
    first_feature_level: FeatureLevel
    attributes: tuple[str, ...]
    ep_rule: EpRule
    caveats: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return (self.op_type, self.since_version)


def _data(binding: str = "InputTensor") -> TensorRole:
    return TensorRole("data", binding, EXPRESSIBLE_DATA_TYPES)


def _indices(types: tuple[int, ...] = INDEX_TYPES) -> TensorRole:
    return TensorRole("indices", "IndicesTensor", types)


def _updates() -> TensorRole:
    return TensorRole("updates", "UpdatesTensor", EXPRESSIBLE_DATA_TYPES)


_ELEMENTS = (_data(), _indices())
_ND = (_data(), _indices((TensorProto.INT64,)))
_SCATTER = (_data(), _indices(), _updates())
_SCATTER_ND = (_data(), _indices((TensorProto.INT64,)), _updates())

_LOWER = "below FL 3_0: 4 dimensions (merged where needed), indices normalised and cast to UINT32 on the host"
_PAIRS = "64-bit data below FL 4_1 as UINT32 pairs"
_WINDOW = "indices smaller than data on non-axis dims: strided window (the DML EP's descriptor is invalid)"
_BF16 = "bfloat16 data falls back"

# fmt: off
SUPPORT_TABLE: tuple[SupportRow, ...] = (
    SupportRow("Gather", 1, OperatorType.GATHER, None, _ELEMENTS, FeatureLevel.FL_1_0, ("axis",),
               EpRule.REGISTERED, (_LOWER, _PAIRS, "FL 1_0/2_0: float data only")),
    SupportRow("Gather", 11, OperatorType.GATHER, None, _ELEMENTS, FeatureLevel.FL_1_0, ("axis",),
               EpRule.REGISTERED, ("negative indices",)),
    SupportRow("Gather", 13, OperatorType.GATHER, None, _ELEMENTS, FeatureLevel.FL_1_0, ("axis",),
               EpRule.REGISTERED, (_BF16,)),
    SupportRow("GatherElements", 11, OperatorType.GATHER_ELEMENTS, None, _ELEMENTS, FeatureLevel.FL_2_1,
               ("axis",), EpRule.REGISTERED, (_WINDOW,)),
    SupportRow("GatherElements", 13, OperatorType.GATHER_ELEMENTS, None, _ELEMENTS, FeatureLevel.FL_2_1,
               ("axis",), EpRule.REGISTERED, (_BF16,)),
    SupportRow("GatherND", 11, OperatorType.GATHER_ND1, OperatorType.GATHER_ND, _ND, FeatureLevel.FL_2_1,
               (), EpRule.REGISTERED, ("the DML EP always builds GATHER_ND1",)),
    SupportRow("GatherND", 12, OperatorType.GATHER_ND1, OperatorType.GATHER_ND, _ND, FeatureLevel.FL_2_1,
               ("batch_dims",), EpRule.REGISTERED,
               ("batch_dims > 0 below FL 3_0: batch folded into the tuples",)),
    SupportRow("GatherND", 13, OperatorType.GATHER_ND1, OperatorType.GATHER_ND, _ND, FeatureLevel.FL_2_1,
               ("batch_dims",), EpRule.REGISTERED, (_BF16,)),
    SupportRow("Scatter", 9, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0, ("axis",),
               EpRule.REGISTERED, ("deprecated", "padded to at least 4 dimensions")),
    SupportRow("Scatter", 11, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0, ("axis",),
               EpRule.REGISTERED, ("gone from opset 11: onnxruntime refuses the model, so dmlshim does",)),
    SupportRow("ScatterElements", 11, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0,
               ("axis",), EpRule.REGISTERED, (_WINDOW,)),
    SupportRow("ScatterElements", 13, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0,
               ("axis",), EpRule.REGISTERED, (_BF16,)),
    SupportRow("ScatterElements", 16, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0,
               ("axis", "reduction=none"), EpRule.REDUCTION_NONE_ONLY, ("add/mul fall back",)),
    SupportRow("ScatterElements", 18, OperatorType.SCATTER_ELEMENTS, None, _SCATTER, FeatureLevel.FL_1_0,
               ("axis", "reduction=none"), EpRule.NOT_REGISTERED, ("add/mul/max/min fall back",)),
    SupportRow("ScatterND", 11, OperatorType.SCATTER_ND, None, _SCATTER_ND, FeatureLevel.FL_2_1, (),
               EpRule.REGISTERED, ()),
    SupportRow("ScatterND", 13, OperatorType.SCATTER_ND, None, _SCATTER_ND, FeatureLevel.FL_2_1, (),
               EpRule.REGISTERED, (_BF16,)),
    SupportRow("ScatterND", 16, OperatorType.SCATTER_ND, None, _SCATTER_ND, FeatureLevel.FL_2_1,
               ("reduction=none",), EpRule.REDUCTION_NONE_ONLY, ("add/mul fall back",)),
    SupportRow("ScatterND", 18, OperatorType.SCATTER_ND, None, _SCATTER_ND, FeatureLevel.FL_2_1,
               ("reduction=none",), EpRule.NOT_REGISTERED, ("add/mul/max/min fall back",)),
)
# fmt: on
"""Every (op, since_version) dmlshim translates, in README order."""

_BY_KEY: dict[tuple[str, int], SupportRow] = {row.key: row for row in SUPPORT_TABLE}
SUPPORTED_OPS: tuple[str, ...] = tuple(dict.fromkeys(row.op_type for row in SUPPORT_TABLE))


def find_row(op_type: str, since_version: int) -> SupportRow | None:
    """The row of an exact (op, since_version), or None."""
    return _BY_KEY.get((op_type, since_version))


def ort_placement(
    row: SupportRow, reduction: str, elem_types: Sequence[int]
) -> tuple[str | None, tuple[Reason, ...]]:
    """Where onnxruntime's DirectML provider would run a node of this row, with the reason if on the CPU.

    Args:
        row: the node's support row.
        reduction: the node's reduction attribute ("none" when it has none).
        elem_types: the element types of the node's inputs (0 = unknown, ignored).
    """
    if row.ep_rule is EpRule.NOT_REGISTERED:
        return CPU_PROVIDER, (
            Reason(
                "EP_NOT_REGISTERED",
                f"onnxruntime's DirectML provider registers no kernel for {row.op_type}-{row.since_version}; "
                "it runs on the CPU provider",
                f"{row.op_type}-{row.since_version}",
            ),
        )
    if row.ep_rule is EpRule.REDUCTION_NONE_ONLY and reduction != "none":
        return CPU_PROVIDER, (
            Reason(
                "EP_REDUCTION_ON_CPU",
                f"onnxruntime's DirectML provider sends {row.op_type} with reduction={reduction!r} "
                "to the CPU",
                reduction,
            ),
        )
    for role, elem in zip(row.roles, elem_types, strict=False):
        if elem and elem not in role.onnx_types:
            return CPU_PROVIDER, (
                Reason(
                    "EP_TYPE_ON_CPU",
                    f"onnxruntime's DirectML provider takes no tensor({elem_type_name(elem)}) for "
                    f"{row.op_type} {role.onnx_input}; it runs on the CPU provider",
                    elem_type_name(elem),
                ),
            )
    return DML_PROVIDER, ()


def _types_cell(types: tuple[int, ...]) -> str:
    if types == EXPRESSIBLE_DATA_TYPES:
        return "all but string/complex/bfloat16/float8"
    return ", ".join(elem_type_name(t) for t in types)


def render_markdown(rows: Sequence[SupportRow] = SUPPORT_TABLE) -> str:
    """The README's support table, rendered from the rows."""
    lines = [
        "| ONNX op | since | DirectML operator | data | indices | first FL | DML EP | caveats |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        op = f"`{row.dml_operator.dml_name}`"
        if row.lower_operator is not None:
            op += f" (`{row.lower_operator.dml_name}` below 3_0)"
        data = _types_cell(row.roles[0].onnx_types)
        indices = _types_cell(row.roles[1].onnx_types)
        ep = {
            EpRule.REGISTERED: "DML",
            EpRule.REDUCTION_NONE_ONLY: "DML if reduction=none, else CPU",
            EpRule.NOT_REGISTERED: "CPU (not registered)",
        }[row.ep_rule]
        lines.append(
            f"| {row.op_type} | {row.since_version} | {op} | {data} | {indices} | "
            f"{row.first_feature_level.short} | {ep} | {'; '.join(row.caveats)} |"
        )
    return "\n".join(lines) + "\n"
