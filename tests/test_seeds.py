"""Golden tests: every worked example of the DirectML reference pages (the seeds), as DxDispatch models.

Each ``tests/seeds/<name>/model.json`` was written by hand from its page; its ``comment`` member records how
the page's typos were resolved (facts section 4). Expected outputs below are typed in from the pages, never
computed by dmlshim. Each example is checked three ways: the descriptor read through ``json_form`` validates
at the lowest feature level where the page's example is valid; ``kernels.execute`` gives the page's output;
``dmlshim replay`` (the CLI) writes a ``.npy`` holding the page's output.

Levels: the page examples are checked at the level where their operator appears (SCATTER 1_0; GATHER_ND,
GATHER_ELEMENTS, SCATTER_ND 2_1). Those levels take exactly 4 dimensions, so the model files right-align
the page's Sizes to 4-D with leading 1s (shifting Axis accordingly); the 5-D Sizes-formula examples need 3_0.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dmlshim.cli.main import main
from dmlshim.dml import shapes
from dmlshim.dml.enums import DataType, FeatureLevel
from dmlshim.dml.json_form import operator_from_json
from dmlshim.dml.operators import GatherElementsDesc, OperatorDesc, ScatterDesc, ScatterNdDesc
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.dml.validate import check, min_feature_level, validate
from dmlshim.dxdispatch import DispatchCommand, load_model_file
from dmlshim.errors import InvalidDescriptorError
from dmlshim.kernels import execute

SEEDS = Path(__file__).resolve().parent / "seeds"


def _formula_input() -> np.ndarray:
    return np.arange(3 * 4 * 5 * 6 * 7, dtype=np.float32).reshape(3, 4, 5, 6, 7)


def _gather_nd_formula_expected() -> np.ndarray:
    # The page fixes only Sizes; our model's input is 0..2519 and its tuples (0,1,2), (2,3,4).
    data = _formula_input()
    return np.stack([data[0, 1, 2], data[2, 3, 4]]).reshape(1, 1, 2, 6, 7)


def _scatter_nd_formula_expected() -> np.ndarray:
    out = _formula_input().copy()
    updates = -np.arange(1, 85, dtype=np.float32).reshape(2, 6, 7)
    out[0, 1, 2] = updates[0]
    out[2, 3, 4] = updates[1]
    return out


@dataclass(frozen=True)
class Seed:
    name: str
    level: FeatureLevel
    expected: np.ndarray
    duplicates: int = 0


SEED_CASES = [
    # dml_scatter_nd.md, Examples.
    Seed("scatter_nd", FeatureLevel.FL_2_1, np.array([1, 11, 3, 10, 9, 6, 7, 12], np.float32)),
    # dml_gather_nd.md, Example 1 (1D remapping).
    Seed("gather_nd_example1", FeatureLevel.FL_2_1, np.array([[2, 3], [0, 1]], np.float32)),
    # dml_gather_nd.md, Example 2 (2D remapping).
    Seed("gather_nd_example2", FeatureLevel.FL_2_1, np.array([[[[2, 3], [4, 5]]]], np.float32)),
    # dml_scatter_elements.md, Example 1: index 3 twice, the page shows the later write (7) winning.
    Seed("scatter_example1", FeatureLevel.FL_1_0, np.array([8, 6, 2, 7, 4], np.float32), duplicates=1),
    # dml_scatter_elements.md, Example 2.
    Seed(
        "scatter_example2",
        FeatureLevel.FL_1_0,
        np.array([[20, 11, 0], [10, 0, 22], [0, 21, 12]], np.float32),
    ),
    # dml_gather_elements.md, Examples.
    Seed("gather_elements", FeatureLevel.FL_2_1, np.array([[4, 8, 3], [7, 2, 3]], np.float32)),
    # The Sizes-formula examples (InputTensor.Sizes {3,4,5,6,7}).
    Seed("gather_nd_sizes_formula", FeatureLevel.FL_3_0, _gather_nd_formula_expected()),
    Seed("scatter_nd_sizes_formula", FeatureLevel.FL_3_0, _scatter_nd_formula_expected()),
]


def _desc(name: str) -> OperatorDesc:
    obj = json.loads((SEEDS / name / "model.json").read_text(encoding="utf-8"))
    return operator_from_json(obj["dispatchables"]["op"], path="$.dispatchables.op")


def _inputs(name: str) -> dict[str, np.ndarray]:
    model = load_model_file(SEEDS / name / "model.json")
    (command,) = [c for c in model.commands if isinstance(c, DispatchCommand)]
    desc = model.dispatchables["op"].desc
    tensors = desc.tensors()
    return {
        field: model.resources[command.bindings[field]].values().reshape(tensors[field].sizes)
        for field in desc.INPUT_TENSOR_FIELDS
    }


def _with_tensor(desc: OperatorDesc, field: str, tensor: BufferTensorDesc) -> OperatorDesc:
    return dataclasses.replace(desc, **{field: tensor})  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", SEED_CASES, ids=lambda s: s.name)
def test_seed_validates_at_its_lowest_level(seed: Seed) -> None:
    desc = _desc(seed.name)
    check(desc, seed.level)
    assert min_feature_level(desc) == seed.level
    check(desc, FeatureLevel.FL_5_0)


@pytest.mark.parametrize("seed", SEED_CASES, ids=lambda s: s.name)
def test_seed_kernel_gives_page_output(seed: Seed) -> None:
    desc = _desc(seed.name)
    result = execute(desc, _inputs(seed.name))
    out_sizes = desc.tensors()["OutputTensor"].sizes
    assert result.output.shape == out_sizes
    np.testing.assert_array_equal(result.output.reshape(seed.expected.shape), seed.expected)
    assert result.duplicate_indices == seed.duplicates


@pytest.mark.parametrize("seed", SEED_CASES, ids=lambda s: s.name)
def test_seed_replay_cli_writes_page_output(
    seed: Seed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    model = SEEDS / seed.name / "model.json"
    code = main(["replay", str(model), "--output-path", "out", "--feature-level", seed.level.short])
    assert code == 0
    written = np.load(tmp_path / "out" / "output.npy", allow_pickle=False)
    assert written.dtype == np.float32
    assert written.shape == seed.expected.shape
    np.testing.assert_array_equal(written, seed.expected)
    stdout = capsys.readouterr().out
    assert "Dispatch 'op': done" in stdout
    assert "written to" in stdout


def test_scatter_nd_seed_print_command_shows_page_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["replay", str(SEEDS / "scatter_nd" / "model.json"), "--output-path", str(tmp_path)]) == 0
    assert "Resource 'output': 1, 11, 3, 10, 9, 6, 7, 12" in capsys.readouterr().out


# --- the seed typos (facts section 4) -----------------------------------------------------------------


def test_scatter_nd_seed_with_float32_indices_as_printed_is_invalid() -> None:
    # The page's IndicesTensor is FLOAT32; no feature level accepts float indices.
    desc = _desc("scatter_nd")
    assert isinstance(desc, ScatterNdDesc)
    typo = _with_tensor(desc, "indices_tensor", desc.indices_tensor.with_data_type(DataType.FLOAT32))
    assert min_feature_level(typo) is None
    for level in FeatureLevel:
        found = {(v.rule, v.field) for v in validate(typo, level)}
        if level >= FeatureLevel.FL_2_1:
            assert ("DATA_TYPE_UNSUPPORTED", "IndicesTensor.DataType") in found
        else:
            assert any(rule == "OPERATOR_UNAVAILABLE" for rule, _ in found)
    with pytest.raises(InvalidDescriptorError) as info:
        check(typo, FeatureLevel.FL_6_4)
    assert info.value.rule == "DATA_TYPE_UNSUPPORTED"


def test_scatter_nd_seed_ranks_as_printed_are_invalid_and_padding_fixes_them() -> None:
    # The page's ranks {8}, {4,1}, {4} break "same DimensionCount"; padded to 2-D they are valid from 3_0
    # (1 to 8 dimensions), and padded to 4-D (the model file) from 2_1.
    desc = _desc("scatter_nd")
    assert isinstance(desc, ScatterNdDesc)
    as_printed = dataclasses.replace(
        desc,
        input_tensor=desc.input_tensor.with_sizes((8,)),
        indices_tensor=desc.indices_tensor.with_sizes((4, 1)),
        updates_tensor=desc.updates_tensor.with_sizes((4,)),
        output_tensor=desc.output_tensor.with_sizes((8,)),
    )
    assert min_feature_level(as_printed) is None
    assert any(v.rule == "DIMENSION_COUNT_MISMATCH" for v in validate(as_printed, FeatureLevel.FL_6_4))
    padded_2d = dataclasses.replace(
        as_printed,
        input_tensor=desc.input_tensor.with_sizes((1, 8)),
        updates_tensor=desc.updates_tensor.with_sizes((1, 4)),
        output_tensor=desc.output_tensor.with_sizes((1, 8)),
    )
    assert min_feature_level(padded_2d) == FeatureLevel.FL_3_0
    inputs = {k: v.reshape(-1) for k, v in _inputs("scatter_nd").items()}
    out = execute(padded_2d, inputs).output
    np.testing.assert_array_equal(out.reshape(-1), [1, 11, 3, 10, 9, 6, 7, 12])


def test_gather_elements_seed_with_uint32_output_as_printed_is_invalid() -> None:
    desc = _desc("gather_elements")
    assert isinstance(desc, GatherElementsDesc)
    typo = _with_tensor(desc, "output_tensor", desc.output_tensor.with_data_type(DataType.UINT32))
    assert min_feature_level(typo) is None
    assert any(v.rule == "DATA_TYPE_MISMATCH" for v in validate(typo, FeatureLevel.FL_5_0))


def test_scatter_2d_seed_with_input_sizes_as_printed_is_invalid() -> None:
    # The page writes InputTensor Sizes {2,3} with a {3,3} output: OutputTensor must match InputTensor.
    desc = _desc("scatter_example2")
    assert isinstance(desc, ScatterDesc)
    typo = _with_tensor(desc, "input_tensor", desc.input_tensor.with_sizes((1, 1, 2, 3)))
    assert min_feature_level(typo) is None
    assert any(v.rule == "SIZES_MISMATCH" for v in validate(typo, FeatureLevel.FL_5_0))


# --- the Sizes-formula examples -------------------------------------------------------------------------


def test_gather_nd_output_sizes_formula_example() -> None:
    # dml_gather_nd.md: {3,4,5,6,7}, InputDimensionCount 5, {1,1,1,2,3}, IndicesDimensionCount 3
    # give {1,1,2,6,7}.
    assert shapes.gather_nd_output_sizes((3, 4, 5, 6, 7), (1, 1, 1, 2, 3), 5, 3) == (1, 1, 2, 6, 7)
    assert _desc("gather_nd_sizes_formula").tensors()["OutputTensor"].sizes == (1, 1, 2, 6, 7)


def test_scatter_nd_updates_sizes_formula_example() -> None:
    # dml_scatter_nd.md: the same Sizes give UpdatesTensor.Sizes [1,1,2,6,7].
    assert shapes.scatter_nd_updates_sizes((3, 4, 5, 6, 7), (1, 1, 1, 2, 3), 5, 3) == (1, 1, 2, 6, 7)
    assert _desc("scatter_nd_sizes_formula").tensors()["UpdatesTensor"].sizes == (1, 1, 2, 6, 7)
