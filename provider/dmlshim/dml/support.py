"""What DirectML's gather/scatter operators accept at each feature level, kept as data.

``SUPPORT_TABLE`` transcribes the "Tensor support" tables of the DirectML reference pages (the seeds) plus the
feature-level history of ``docs/directml-facts.md`` section 3: one row per (operator, first feature level),
read as "from this level on, until the next row of the same operator". Like onnxruntime's DML EP registration
table, a row only lists what is accepted; ``validate.py`` holds the rules that relate fields to each other.

Every reference table gives InputTensor, UpdatesTensor and OutputTensor the same column, so a row carries one
set for the data tensors and one for IndicesTensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .enums import (
    DML_TENSOR_DIMENSION_COUNT_MAX,
    DML_TENSOR_DIMENSION_COUNT_MAX1,
    DataType,
    FeatureLevel,
    OperatorType,
)
from .operators import DESC_TYPES

FL = FeatureLevel
DT = DataType

INDICES_TENSOR = "IndicesTensor"
"""The one tensor of every gather/scatter operator that holds indices rather than data."""

EXACTLY_4 = range(4, 5)
"""Before FL 3_0 every table reads "4"."""

ONE_TO_8 = range(1, DML_TENSOR_DIMENSION_COUNT_MAX1 + 1)
"""From FL 3_0 every table reads "1 to 8"."""

FLOAT_16_32 = frozenset({DT.FLOAT32, DT.FLOAT16})
DATA_8_TO_32 = FLOAT_16_32 | {DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8}
DATA_8_TO_64 = DATA_8_TO_32 | {DT.FLOAT64, DT.INT64, DT.UINT64}
INDEX_UINT32 = frozenset({DT.UINT32})
INDEX_32_64 = frozenset({DT.INT64, DT.INT32, DT.UINT64, DT.UINT32})


@dataclass(frozen=True)
class SupportRow:
    """One "DML_FEATURE_LEVEL_x_y and above" table of one operator.

    Attributes:
        operator: the DirectML operator.
        since: the first feature level the row applies to.
        dimension_counts: the DimensionCount every tensor of the operator may have.
        data_types: accepted DataType of InputTensor, UpdatesTensor and OutputTensor.
        index_types: accepted DataType of IndicesTensor.
        source: where the row comes from (a seed page or the facts sheet).
    """

    operator: OperatorType
    since: FeatureLevel
    dimension_counts: range
    data_types: frozenset[DataType]
    index_types: frozenset[DataType]
    source: str

    def data_types_of(self, tensor_field: str) -> frozenset[DataType]:
        """The accepted DataType of one tensor field (``"IndicesTensor"``, ``"InputTensor"``, ...)."""
        return self.index_types if tensor_field == INDICES_TENSOR else self.data_types


_GATHER_DOC = "DML_GATHER_OPERATOR_DESC docs; facts §3"
_FACTS_4_1 = "facts §3 (64-bit data from FL 4_1)"

SUPPORT_TABLE: tuple[SupportRow, ...] = (
    # operator                       since     dims        data types    index types   source
    SupportRow(OperatorType.GATHER, FL.FL_1_0, EXACTLY_4, FLOAT_16_32, INDEX_UINT32, _GATHER_DOC),
    SupportRow(OperatorType.GATHER, FL.FL_2_1, EXACTLY_4, DATA_8_TO_32, INDEX_UINT32, _GATHER_DOC),
    SupportRow(OperatorType.GATHER, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, _GATHER_DOC),
    SupportRow(OperatorType.GATHER, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, _GATHER_DOC),
    SupportRow(OperatorType.GATHER_ELEMENTS, FL.FL_2_1, EXACTLY_4, DATA_8_TO_32, INDEX_UINT32, "seed"),
    SupportRow(OperatorType.GATHER_ELEMENTS, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, "seed"),
    SupportRow(OperatorType.GATHER_ELEMENTS, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, _FACTS_4_1),
    SupportRow(OperatorType.GATHER_ND, FL.FL_2_1, EXACTLY_4, DATA_8_TO_32, INDEX_UINT32, "seed"),
    SupportRow(OperatorType.GATHER_ND, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, "seed"),
    SupportRow(OperatorType.GATHER_ND, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, _FACTS_4_1),
    SupportRow(OperatorType.GATHER_ND1, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, "seed (GATHER_ND)"),
    SupportRow(OperatorType.GATHER_ND1, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, _FACTS_4_1),
    SupportRow(OperatorType.SCATTER, FL.FL_1_0, EXACTLY_4, FLOAT_16_32, INDEX_UINT32, "seed"),
    SupportRow(OperatorType.SCATTER, FL.FL_2_1, EXACTLY_4, DATA_8_TO_32, INDEX_UINT32, "seed"),
    SupportRow(OperatorType.SCATTER, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, "seed"),
    SupportRow(OperatorType.SCATTER, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, "seed"),
    SupportRow(OperatorType.SCATTER_ND, FL.FL_2_1, EXACTLY_4, DATA_8_TO_32, INDEX_UINT32, "seed"),
    SupportRow(OperatorType.SCATTER_ND, FL.FL_3_0, ONE_TO_8, DATA_8_TO_32, INDEX_32_64, "seed"),
    SupportRow(OperatorType.SCATTER_ND, FL.FL_4_1, ONE_TO_8, DATA_8_TO_64, INDEX_32_64, _FACTS_4_1),
)
"""Per operator, ascending by ``since``; an operator is available from its first row on."""

BUFFER_TENSOR_MAX_DIMENSIONS: tuple[tuple[FeatureLevel, int], ...] = (
    (FL.FL_1_0, DML_TENSOR_DIMENSION_COUNT_MAX),
    (FL.FL_3_0, DML_TENSOR_DIMENSION_COUNT_MAX1),
)
"""The DimensionCount limit of any DML_BUFFER_TENSOR_DESC, whatever the operator (DirectML constants page)."""


def _rows(op: OperatorType) -> Iterator[SupportRow]:
    return (row for row in SUPPORT_TABLE if row.operator == op)


def _known(op: OperatorType) -> OperatorType:
    op = OperatorType(op)
    if op not in DESC_TYPES:
        raise ValueError(f"{op.dml_name} is not a gather/scatter operator dmlshim models")
    return op


def support_row(op: OperatorType, feature_level: FeatureLevel) -> SupportRow | None:
    """The row of ``SUPPORT_TABLE`` in force for ``op`` at ``feature_level``, None if not yet available."""
    # Translation and validation ask this many times per node: answer the known levels from a table.
    found = _ROW_AT.get((op, feature_level), _MISSING)
    if found is not _MISSING:
        return found  # type: ignore[return-value]
    return _support_row(op, feature_level)


def _support_row(op: OperatorType, feature_level: FeatureLevel) -> SupportRow | None:
    current: SupportRow | None = None
    for row in _rows(_known(op)):
        if row.since <= feature_level:
            current = row
    return current


def first_feature_level(op: OperatorType) -> FeatureLevel:
    """The feature level that introduced ``op`` (DML_OPERATOR_SCATTER and SCATTER_ELEMENTS are one value).

    Raises:
        ValueError: ``op`` is not one of the gather/scatter operators.
    """
    return min(row.since for row in _rows(_known(op)))


def operator_available(op: OperatorType, fl: FeatureLevel) -> bool:
    """Whether a device at feature level ``fl`` can create ``op``."""
    return support_row(op, fl) is not None


def supported_data_types(op: OperatorType, tensor_field: str, fl: FeatureLevel) -> frozenset[DataType]:
    """The DataType values ``tensor_field`` of ``op`` accepts at ``fl`` (empty if ``op`` is unavailable).

    Args:
        op: the operator.
        tensor_field: a DirectML tensor field of the operator's struct, e.g. ``"IndicesTensor"``.
        fl: the target feature level.

    Raises:
        ValueError: the operator's struct has no such tensor field.
    """
    found = _DATA_TYPES_AT.get((op, tensor_field, fl))
    if found is not None:
        return found
    if tensor_field not in DESC_TYPES[_known(op)].TENSOR_FIELDS:
        raise ValueError(f"{OperatorType(op).dml_name} has no tensor field {tensor_field!r}")
    row = support_row(op, fl)
    return row.data_types_of(tensor_field) if row is not None else frozenset()


def supported_dimension_counts(op: OperatorType, fl: FeatureLevel) -> range | tuple[int, ...]:
    """The DimensionCount values the tensors of ``op`` accept at ``fl``; ``()`` if ``op`` is unavailable."""
    row = support_row(op, fl)
    return row.dimension_counts if row is not None else ()


def max_dimension_count(fl: FeatureLevel) -> int:
    """DML_TENSOR_DIMENSION_COUNT_MAX (5) before FL 3_0, DML_TENSOR_DIMENSION_COUNT_MAX1 (8) from it on."""
    found = _MAX_DIMENSIONS_AT.get(fl)
    if found is not None:
        return found
    limit = 0
    for since, count in BUFFER_TENSOR_MAX_DIMENSIONS:
        if since <= fl:
            limit = count
    return limit


def first_level_supporting_data_type(
    op: OperatorType, tensor_field: str, data_type: DataType
) -> FeatureLevel | None:
    """The lowest feature level at which ``tensor_field`` of ``op`` accepts ``data_type``, if any."""
    for row in _rows(_known(op)):
        if data_type in row.data_types_of(tensor_field):
            return row.since
    return None


def first_level_supporting_dimension_count(op: OperatorType, dimension_count: int) -> FeatureLevel | None:
    """The lowest feature level at which the tensors of ``op`` may have ``dimension_count`` dimensions."""
    for row in _rows(_known(op)):
        if dimension_count in row.dimension_counts:
            return row.since
    return None


def describe_dimension_counts(counts: range | tuple[int, ...]) -> str:
    """``"4"``, ``"1 to 8"`` or ``"none"``, as the reference tables write them."""
    values = list(counts)
    if not values:
        return "none"
    if len(values) == 1:
        return str(values[0])
    return f"{values[0]} to {values[-1]}"


def describe_data_types(data_types: frozenset[DataType]) -> str:
    """``"FLOAT32, FLOAT16"``: the names in the order the reference tables list them."""
    return ", ".join(t.name for t in sorted(data_types, key=_table_order)) or "none"


def support_table_markdown(op: OperatorType) -> str:
    """The tensor-support tables of ``op`` in the layout of the DirectML reference pages, newest first."""
    fields = DESC_TYPES[_known(op)].TENSOR_FIELDS
    lines: list[str] = []
    for row in sorted(_rows(op), key=lambda r: r.since, reverse=True):
        lines += [
            f"### {row.since.dml_name} and above",
            "| Tensor | Kind | Supported dimension counts | Supported data types |",
            "| --- | --- | --- | --- |",
        ]
        for name in fields:
            kind = "Output" if name == "OutputTensor" else "Input"
            types = describe_data_types(row.data_types_of(name))
            lines.append(f"| {name} | {kind} | {describe_dimension_counts(row.dimension_counts)} | {types} |")
        lines.append("")
    return "\n".join(lines)


_MISSING = object()

_ROW_AT: dict[tuple[OperatorType, FeatureLevel], SupportRow | None] = {
    (op, fl): _support_row(op, fl) for op in DESC_TYPES for fl in FeatureLevel
}
"""``support_row`` of every modelled operator at every named feature level."""

_DATA_TYPES_AT: dict[tuple[OperatorType, str, FeatureLevel], frozenset[DataType]] = {
    (op, name, fl): (row.data_types_of(name) if row is not None else frozenset())
    for (op, fl), row in _ROW_AT.items()
    for name in DESC_TYPES[op].TENSOR_FIELDS
}
"""``supported_data_types`` of every tensor field of every modelled operator at every named level."""

_MAX_DIMENSIONS_AT: dict[FeatureLevel, int] = {
    fl: [0, *(count for since, count in BUFFER_TENSOR_MAX_DIMENSIONS if since <= fl)][-1]
    for fl in FeatureLevel
}
"""``max_dimension_count`` at every named feature level."""


_TABLE_ORDER = (
    DT.FLOAT64, DT.FLOAT32, DT.FLOAT16, DT.INT64, DT.INT32, DT.INT16, DT.INT8,
    DT.UINT64, DT.UINT32, DT.UINT16, DT.UINT8, DT.INT4, DT.UINT4, DT.UNKNOWN,
)  # fmt: skip


def _table_order(data_type: DataType) -> int:
    # The reference pages list types widest-first, floats before signed before unsigned.
    return _TABLE_ORDER.index(data_type)
