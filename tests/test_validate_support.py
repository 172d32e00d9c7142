"""The support table of ``dmlshim.dml.support`` against the reference pages and the facts sheet.

The expected tables are written out here from the docs; one test also reads the seeds' own "Tensor support"
tables and checks every row of them against the data in code.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from dmlshim.dml import DataType, FeatureLevel, OperatorType
from dmlshim.dml.support import (
    SUPPORT_TABLE,
    describe_dimension_counts,
    first_feature_level,
    max_dimension_count,
    operator_available,
    support_table_markdown,
    supported_data_types,
    supported_dimension_counts,
)

FL = FeatureLevel
OP = OperatorType

INTRODUCED = {
    OP.GATHER: FL.FL_1_0,
    OP.SCATTER: FL.FL_1_0,
    OP.GATHER_ELEMENTS: FL.FL_2_1,
    OP.GATHER_ND: FL.FL_2_1,
    OP.SCATTER_ND: FL.FL_2_1,
    OP.GATHER_ND1: FL.FL_3_0,
}
NAME = {op: op.dml_name.removeprefix("DML_OPERATOR_") for op in INTRODUCED}
FIELDS = {
    op: ("InputTensor", "IndicesTensor", "UpdatesTensor", "OutputTensor")
    if op in (OP.SCATTER, OP.SCATTER_ND)
    else ("InputTensor", "IndicesTensor", "OutputTensor")
    for op in INTRODUCED
}

FLOAT = "FLOAT32 FLOAT16"
UP_TO_32 = "FLOAT32 FLOAT16 INT32 INT16 INT8 UINT32 UINT16 UINT8"
UP_TO_64 = UP_TO_32 + " FLOAT64 INT64 UINT64"
INDEX_OLD = "UINT32"
INDEX_NEW = "INT64 INT32 UINT64 UINT32"


def expected_types(op: OperatorType, field: str, fl: FeatureLevel) -> set[str]:
    """The docs' tables: FL 1_0 floats, 2_1 integers, 3_0 signed/64-bit indices, 4_1 64-bit data."""
    if fl < INTRODUCED[op]:
        return set()
    if field == "IndicesTensor":
        return set((INDEX_OLD if fl < FL.FL_3_0 else INDEX_NEW).split())
    if fl >= FL.FL_4_1:
        return set(UP_TO_64.split())
    return set((UP_TO_32 if fl >= FL.FL_2_1 else FLOAT).split())


@pytest.mark.parametrize("fl", list(FL), ids=lambda fl: f"fl{fl.short}")
@pytest.mark.parametrize("op", list(INTRODUCED), ids=NAME.get)
def test_availability(op: OperatorType, fl: FeatureLevel) -> None:
    assert first_feature_level(op) == INTRODUCED[op]
    assert operator_available(op, fl) == (fl >= INTRODUCED[op])


@pytest.mark.parametrize("fl", list(FL), ids=lambda fl: f"fl{fl.short}")
@pytest.mark.parametrize("op", list(INTRODUCED), ids=NAME.get)
def test_data_types_and_dimension_counts(op: OperatorType, fl: FeatureLevel) -> None:
    for field in FIELDS[op]:
        got = {t.name for t in supported_data_types(op, field, fl)}
        assert got == expected_types(op, field, fl), field
    counts = supported_dimension_counts(op, fl)
    if fl < INTRODUCED[op]:
        assert tuple(counts) == ()
    elif fl < FL.FL_3_0:
        assert list(counts) == [4]
    else:
        assert list(counts) == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize(
    ("fl", "limit"),
    [(FL.FL_1_0, 5), (FL.FL_2_0, 5), (FL.FL_2_1, 5), (FL.FL_3_0, 8), (FL.FL_4_1, 8), (FL.FL_6_4, 8)],
    ids=lambda v: f"fl{v.short}" if isinstance(v, FL) else str(v),
)
def test_max_dimension_count(fl: FeatureLevel, limit: int) -> None:
    assert max_dimension_count(fl) == limit


def test_scatter_alias_shares_the_table() -> None:
    assert OP.SCATTER is OP.SCATTER_ELEMENTS
    assert supported_data_types(OP.SCATTER_ELEMENTS, "UpdatesTensor", FL.FL_1_0) == {
        DataType.FLOAT32,
        DataType.FLOAT16,
    }


def test_unknown_field_or_operator_raises() -> None:
    with pytest.raises(ValueError, match="UpdatesTensor"):
        supported_data_types(OP.GATHER, "UpdatesTensor", FL.FL_4_1)
    with pytest.raises(ValueError, match="ELEMENT_WISE_IDENTITY"):
        first_feature_level(OP.ELEMENT_WISE_IDENTITY)


def test_table_rows_are_ordered_and_never_drop_support() -> None:
    # Later rows of one operator only ever add dimension counts or types (the docs' history is additive).
    for op in INTRODUCED:
        rows = [r for r in SUPPORT_TABLE if r.operator == op]
        assert [r.since for r in rows] == sorted(r.since for r in rows)
        for older, newer in itertools.pairwise(rows):
            assert set(older.dimension_counts) <= set(newer.dimension_counts)
            assert older.data_types <= newer.data_types
            assert older.index_types <= newer.index_types


def test_describe_dimension_counts() -> None:
    assert describe_dimension_counts(range(4, 5)) == "4"
    assert describe_dimension_counts(range(1, 9)) == "1 to 8"
    assert describe_dimension_counts(()) == "none"


# The seeds' own tables --------------------------------------------------------------------------------------

SEED_PAGES = {
    "dml_gather_elements.md": (OP.GATHER_ELEMENTS,),
    "dml_gather_nd.md": (OP.GATHER_ND, OP.GATHER_ND1),
    "dml_scatter_elements.md": (OP.SCATTER,),
    "dml_scatter_nd.md": (OP.SCATTER_ND,),
}
_SECTION = re.compile(r"^### DML_FEATURE_LEVEL_(\d+_\d+) and above")
_ROW = re.compile(r"^\|\s*(\w+Tensor)\s*\|\s*(Input|Output)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|")


def seed_rows(path: Path) -> list[tuple[FeatureLevel, str, str, set[str]]]:
    rows = []
    level: FeatureLevel | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := _SECTION.match(line):
            level = FL.parse(m.group(1))
        elif level is not None and (m := _ROW.match(line)):
            rows.append((level, m.group(1), m.group(3), {t.strip() for t in m.group(4).split(",")}))
    return rows


SHIPPED_TABLES = Path(__file__).resolve().parent / "seeds" / "support_tables.json"
"""The pages' tables as data, shipped in the repository so a clone runs this test with nothing skipped."""
SHARED_SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def shipped_rows(page: str) -> list[tuple[FeatureLevel, str, str, set[str]]]:
    pages = json.loads(SHIPPED_TABLES.read_text(encoding="utf-8"))["pages"]
    return [
        (FL.parse(r["feature_level"]), r["tensor"], r["dimension_counts"], set(r["data_types"]))
        for r in pages[page]
    ]


@pytest.mark.parametrize("page", list(SEED_PAGES))
def test_table_matches_seed_pages(page: str) -> None:
    rows = shipped_rows(page)
    assert rows, f"no Tensor support table for {page} in {SHIPPED_TABLES}"
    if (SHARED_SEEDS / page).is_file():
        # Beside the shared pages, the shipped transcription must still say what they say.
        assert rows == seed_rows(SHARED_SEEDS / page)
    for op in SEED_PAGES[page]:
        for level, field, counts, types in rows:
            if level < INTRODUCED[op]:
                continue  # GATHER_ND1 shares GATHER_ND's page but exists only from FL 3_0
            got_counts = describe_dimension_counts(supported_dimension_counts(op, level))
            assert got_counts == counts, (op, level, field)
            assert {t.name for t in supported_data_types(op, field, level)} == types, (op, level, field)


def test_markdown_renders_the_seed_layout() -> None:
    text = support_table_markdown(OP.SCATTER)
    assert "### DML_FEATURE_LEVEL_1_0 and above" in text
    assert "| UpdatesTensor | Input | 4 | FLOAT32, FLOAT16 |" in text
    assert (
        "| OutputTensor | Output | 1 to 8 | FLOAT64, FLOAT32, FLOAT16, INT64, INT32, INT16, INT8, "
        "UINT64, UINT32, UINT16, UINT8 |"
    ) in text
    assert text.index("4_1 and above") < text.index("1_0 and above")
