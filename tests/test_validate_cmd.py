"""``dmlshim validate`` and the random input generator it uses (:mod:`dmlshim.inputs`).

The reference in every comparison is onnxruntime CPU, single-threaded; the shipped models come from a real
converter (onnx_models/export_models.py) or are hand-built (onnx_models/build_handmade.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from dmlshim.cli.main import main
from dmlshim.dml.operators import GatherDesc, GatherElementsDesc
from dmlshim.errors import BadInputError
from dmlshim.inputs import generate_inputs, plan_inputs, resolve_input_shapes
from dmlshim.kernels import _KERNELS, KernelOptions, KernelResult
from dmlshim.validate import compare_arrays, validate_model
from tests.oracle import IR_VERSION, make_node_model, ort_run

# Faults are planted in the numpy kernels' table (dmlshim.kernels._KERNELS).
pytestmark = pytest.mark.usefixtures("numpy_kernels")

MODELS_DIR = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted(MODELS_DIR.glob("*.onnx"))


def _models() -> list[Path]:
    if not MODELS:
        pytest.skip("onnx_models/ holds no models")
    return MODELS


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["validate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- every shipped model validates -------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_shipped_model_with_its_sample_inputs(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    npz = model.with_suffix(".npz")
    assert npz.is_file(), f"{model.name} has no sample input file"
    code, out, err = _run(capsys, str(model), "--inputs", str(npz))
    assert code == 0, out + err
    assert "verdict: MATCH" in out


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
@pytest.mark.parametrize("seed", [0, 1])
def test_shipped_model_with_random_inputs(model: Path, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(model), "--seed", str(seed), "--json")
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["match"] is True
    assert doc["inputs"]["source"] == "random" and doc["inputs"]["seed"] == seed


def test_shipped_models_exist() -> None:
    assert len(_models()) >= 6


@pytest.mark.parametrize("level", ["3_0", "2_1"])
def test_shipped_models_at_lower_levels(level: str) -> None:
    for model in _models():
        report = validate_model(model, inputs=model.with_suffix(".npz"), feature_level=level)
        assert report.match, f"{model.name} at {level}: {[o.to_json() for o in report.mismatched]}"


# --- JSON schema ---------------------------------------------------------------------------------------


def test_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    model = MODELS_DIR / "gnn_scatter_reduce.onnx"
    if not model.is_file():
        pytest.skip("gnn_scatter_reduce.onnx not shipped")
    code, out, _ = _run(capsys, str(model), "--inputs", str(model.with_suffix(".npz")), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 2
    assert doc["reference"] == "partitioned-onnxruntime" and doc["exact"] is True
    assert doc["optimization_levels"] == {
        "dmlshim": "disabled",
        "reference": "disabled",
        "whole_model": "disabled",
    }
    assert doc["whole_model_error"] is None
    assert doc["model"] == str(model)
    assert doc["feature_level"] == "DML_FEATURE_LEVEL_5_0"
    assert doc["match"] is True
    assert [o["name"] for o in doc["outputs"]] == ["node_out", "graph_pooled"]
    for o in doc["outputs"]:
        assert {"name", "match", "max_abs_diff", "first_mismatch"} <= set(o)
        assert o["match"] is True and o["max_abs_diff"] == 0.0 and o["first_mismatch"] is None
        assert o["whole_model"]["identical"] is True and o["whole_model"]["cause"] == "identical"
    inspect_keys = {"name", "op_type", "status", "min_feature_level", "ort_placement", "operator", "reasons"}
    for n in doc["nodes"]:
        assert inspect_keys <= set(n), n.keys()
        assert n["placement"] in ("dml", "onnxruntime-cpu")
        assert n["attribution"] in ("match", "not_compared")
    by_name = {n["name"]: n for n in doc["nodes"]}
    # ScatterND add and ScatterElements max: DirectML has no reduction, so both ran on the CPU.
    assert by_name["node_ScatterND_18"]["placement"] == "onnxruntime-cpu"
    assert by_name["node_scatter_reduce"]["placement"] == "onnxruntime-cpu"
    assert by_name["node_index_select"]["placement"] == "dml"
    codes = {(w["code"], w["node"]) for w in doc["warnings"]}
    assert ("FALLBACK_TO_CPU", "node_ScatterND_18") in codes
    assert ("ORT_DML_EP_RUNS_ON_CPU", "node_scatter_reduce") in codes
    for w in doc["warnings"]:
        assert set(w) == {"code", "node", "message"}


def test_text_and_json_come_from_the_same_report(capsys: pytest.CaptureFixture[str]) -> None:
    model = _models()[0]
    code_text, text, _ = _run(capsys, str(model))
    code_json, out, _ = _run(capsys, str(model), "--json")
    doc = json.loads(out)
    assert code_text == code_json == 0
    for o in doc["outputs"]:
        assert o["name"] in text
    for n in doc["nodes"]:
        assert n["name"] in text


# --- a planted mismatch ----------------------------------------------------------------------------
#
# dmlshim and onnxruntime execute the same model, so no edit of the *model* can make them disagree: any
# change reaches both sides. What validate exists to catch is a divergence in the DirectML path itself -
# a descriptor built wrongly or a kernel that misreads its indices. The honest planting is therefore a
# fault injected below the translation, in the DirectML kernel that executes the node's descriptor, leaving
# onnxruntime untouched: here the kernel answers as if it read one element off (its output rolled by one
# element in memory order), a typical stride/offset bug. The injection goes through the kernel
# registry with monkeypatch, so it is undone after each test.


def _plant(
    monkeypatch: pytest.MonkeyPatch, desc_type: type, only_node: str | None = None
) -> Callable[..., KernelResult]:
    real = _KERNELS[desc_type]

    def faulty(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        if only_node is not None and options.node != only_node:
            return result
        shifted = np.roll(result.output.reshape(-1), 1).reshape(result.output.shape)
        return KernelResult(np.ascontiguousarray(shifted), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, desc_type, faulty)
    return faulty


def test_planted_gather_elements_fault_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = MODELS_DIR / "gather_elements_torch_gather.onnx"
    if not model.is_file():
        pytest.skip("gather_elements_torch_gather.onnx not shipped")
    _plant(monkeypatch, GatherElementsDesc)
    code, out, _ = _run(capsys, str(model), "--inputs", str(model.with_suffix(".npz")))
    assert code == 1, out
    assert "MISMATCH in output 'nll'" in out
    assert "divergence starts at: node_gather" in out
    code, out, _ = _run(capsys, str(model), "--inputs", str(model.with_suffix(".npz")), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["match"] is False
    (nll,) = doc["outputs"]
    assert nll["name"] == "nll" and nll["match"] is False
    assert nll["first_mismatch"] is not None and nll["max_abs_diff"] > 0
    assert nll["upstream_nodes"] == ["node_gather"] and nll["suspect_nodes"] == ["node_gather"]
    assert ("NODE_OUTPUT_DIFFERS", "node_gather") in {(w["code"], w["node"]) for w in doc["warnings"]}


def test_planted_fault_is_pinned_to_the_right_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Gathers feed the output; only the faulty one is named where the divergence starts."""
    model = MODELS_DIR / "embedding_gather.onnx"
    if not model.is_file():
        pytest.skip("embedding_gather.onnx not shipped")
    _plant(monkeypatch, GatherDesc, only_node="node_embedding_1")
    report = validate_model(model, inputs=model.with_suffix(".npz"))
    assert not report.match and report.exit_code == 1
    (out,) = report.mismatched
    assert set(out.upstream_nodes) == {"node_embedding", "node_embedding_1"}
    assert out.suspect_nodes == ("node_embedding_1",)
    assert out.first_mismatch is not None
    own = {n.name: n.output_match for n in report.nodes}
    assert own == {"node_embedding": True, "node_embedding_1": False}


def test_tolerance_absorbs_small_float_differences(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_node_model(
        "GatherElements",
        {"data": np.ones((2, 3), np.float32), "indices": np.zeros((2, 3), np.int64)},
        {"axis": 1},
    )
    real = _KERNELS[GatherElementsDesc]

    def nudged(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        return KernelResult((result.output + np.float32(1e-5)).astype(np.float32), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, GatherElementsDesc, nudged)
    assert not validate_model(model).match
    assert validate_model(model, atol=1e-4).match


# --- warnings that matter on real DirectML ----------------------------------------------------------


def test_duplicate_scatter_indices_warn_but_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = np.zeros((4,), np.float32)
    indices = np.array([1, 1, 2], np.int64)
    updates = np.array([1.0, 2.0, 3.0], np.float32)
    model = make_node_model(
        "ScatterElements", {"data": data, "indices": indices, "updates": updates}, {"axis": 0}
    )
    path = tmp_path / "dup.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "dup.npz", data=data, indices=indices, updates=updates)
    code, out, _ = _run(capsys, str(path), "--inputs", str(tmp_path / "dup.npz"), "--json")
    assert code == 0
    doc = json.loads(out)
    dup = [w for w in doc["warnings"] if w["code"] == "DUPLICATE_SCATTER_INDICES"]
    assert len(dup) == 1 and dup[0]["node"] == "ScatterElements_0"
    assert doc["nodes"][0]["run"]["duplicate_indices"] == 1


def test_negative_indices_warn_below_fl_3_0(tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([-1, 0], np.int64)
    model = make_node_model("Gather", {"data": data, "indices": indices}, {"axis": 0})
    feeds: dict[str, np.ndarray] = {"data": data, "indices": indices}
    low = validate_model(model, inputs=feeds, feature_level="2_1")
    high = validate_model(model, inputs=feeds, feature_level="5_0")
    assert low.match and high.match
    assert "NEGATIVE_INDICES_BELOW_FL_3_0" in {w.code for w in low.warnings}
    assert "NEGATIVE_INDICES_BELOW_FL_3_0" not in {w.code for w in high.warnings}


# --- exit code 2 -----------------------------------------------------------------------------------------


def test_missing_model_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, str(tmp_path / "nope.onnx"))
    assert code == 2 and "not found" in err


def test_garbage_model_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00not an onnx model at all")
    code, _, err = _run(capsys, str(path))
    assert code == 2, err


def test_inputs_missing_a_feed_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _models()[0]
    feeds = dict(np.load(model.with_suffix(".npz")))
    feeds.pop(next(iter(feeds)))
    np.savez(tmp_path / "short.npz", **feeds)
    code, _, err = _run(capsys, str(model), "--inputs", str(tmp_path / "short.npz"))
    assert code == 2, err


def test_out_of_range_index_in_inputs_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = np.zeros((3,), np.float32)
    model = make_node_model("Gather", {"data": data, "indices": np.array([0], np.int64)})
    onnx.save(model, tmp_path / "g.onnx")
    np.savez(tmp_path / "bad.npz", data=data, indices=np.array([7], np.int64))
    code, _, err = _run(capsys, str(tmp_path / "g.onnx"), "--inputs", str(tmp_path / "bad.npz"))
    assert code == 2, err
    assert "Gather" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--input-shape", "nonsense"],
        ["--input-shape", "no_such_input=3"],
        ["--rtol", "-1"],
        ["--feature-level", "9_9"],
    ],
)
def test_usage_errors_are_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    model = _models()[0]
    try:
        code = main(["validate", str(model), *argv])
    except SystemExit as exc:  # argparse rejects the value itself
        code = int(exc.code or 0)
    capsys.readouterr()
    assert code == 2


def test_symbolic_dim_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    model = MODELS_DIR / "gather_beam_reorder_dynamic.onnx"
    if not model.is_file():
        pytest.skip("gather_beam_reorder_dynamic.onnx not shipped")
    code, out, _ = _run(capsys, str(model), "--input-shape", "beams=5", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["inputs"]["shapes"] == {"past_keys": [5, 2, 5, 8], "beam_idx": [5]}


# --- the comparison ----------------------------------------------------------------------------------------


def test_compare_arrays_rules() -> None:
    a = np.array([1.0, np.nan, np.inf], np.float32)
    assert compare_arrays(a, a.copy()).match  # NaN equals NaN, inf equals inf
    assert not compare_arrays(a, a.astype(np.float64)).match  # dtype must be identical
    assert not compare_arrays(np.array([1, 2]), np.array([[1, 2]])).match
    c = compare_arrays(np.array([1, 2, 3], np.int64), np.array([1, 5, 3], np.int64), rtol=1.0, atol=10.0)
    assert not c.match  # integers are exact whatever the tolerance
    assert c.first_mismatch is not None and c.first_mismatch.index == (1,)
    assert c.first_mismatch.dmlshim == 2 and c.first_mismatch.onnxruntime == 5
    assert compare_arrays(np.array([1.0]), np.array([1.05]), rtol=0.1).match
    # NaN against a number is as far apart as values get (it used to drop out of the maximum).
    nan_vs_zero = compare_arrays(np.array([np.nan, 1.0], np.float32), np.array([0.0, 1.5], np.float32))
    assert not nan_vs_zero.match and nan_vs_zero.max_abs_diff == np.inf and nan_vs_zero.mismatches == 2
    big = compare_arrays(np.array([0], np.uint64), np.array([2**64 - 1], np.uint64))
    assert big.max_abs_diff == float(2**64 - 1)  # exact at the uint64 extreme


# --- the input generator ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_generated_inputs_are_valid_for_onnxruntime(model: Path) -> None:
    proto = onnx.load(model)
    for seed in range(10):
        feeds = generate_inputs(proto, seed=seed, negative_indices=seed % 2 == 1)
        ort_run(proto, feeds)  # raises on any out-of-range index


def test_generated_inputs_are_reproducible() -> None:
    proto = onnx.load(_models()[0])
    a = generate_inputs(proto, seed=5)
    b = generate_inputs(proto, seed=5)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def _scatter_model(reduction: str | None, axis: int = 1) -> onnx.ModelProto:
    attrs: dict[str, Any] = {"axis": axis}
    if reduction:
        attrs["reduction"] = reduction
    return make_node_model(
        "ScatterElements",
        {"data": np.zeros((3, 5), np.float32), "indices": np.zeros((3, 4), np.int64),
         "updates": np.zeros((3, 4), np.float32)},
        attrs,
        opset=18,
    )  # fmt: skip


def test_scatter_indices_are_unique_per_line_without_reduction() -> None:
    for seed in range(20):
        idx = generate_inputs(_scatter_model(None), seed=seed)["indices"]
        assert idx.min() >= 0 and idx.max() < 5
        for row in idx:
            assert len(set(row.tolist())) == len(row)


def test_scatter_indices_may_repeat_with_a_reduction() -> None:
    repeats = 0
    for seed in range(20):
        idx = generate_inputs(_scatter_model("add"), seed=seed)["indices"]
        assert idx.min() >= 0 and idx.max() < 5
        repeats += sum(len(set(row.tolist())) < len(row) for row in idx)
    assert repeats > 0


def test_scatternd_tuples_are_distinct() -> None:
    model = make_node_model(
        "ScatterND",
        {"data": np.zeros((3, 2, 4), np.float32), "indices": np.zeros((5, 2), np.int64),
         "updates": np.zeros((5, 4), np.float32)},
    )  # fmt: skip
    for seed in range(20):
        idx = generate_inputs(model, seed=seed)["indices"]
        assert (idx[:, 0] < 3).all() and (idx[:, 1] < 2).all() and (idx >= 0).all()
        assert len({tuple(t) for t in idx.tolist()}) == 5


def test_indices_traced_through_arithmetic_and_reshapes() -> None:
    """lengths -> Sub 1 -> Unsqueeze -> Concat -> GatherND: lengths must land in [1, bound]."""
    model = MODELS_DIR / "gathernd_advanced_indexing.onnx"
    if not model.is_file():
        pytest.skip("gathernd_advanced_indexing.onnx not shipped")
    (spec,) = [s for s in plan_inputs(onnx.load(model)) if s.constraints]
    assert spec.name == "lengths"
    assert spec.constraints[0].offset == -1
    low, high = spec.bounds or (0, 0)
    assert low == 1 and high >= 2


def test_symbolic_dims_by_input_or_by_dim_name() -> None:
    data = helper.make_tensor_value_info("data", onnx.TensorProto.FLOAT, ["n", 4])
    idx = helper.make_tensor_value_info("idx", onnx.TensorProto.INT64, ["k"])
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)
    graph = helper.make_graph([node], "g", [data, idx], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    assert resolve_input_shapes(model) == {"data": (2, 4), "idx": (2,)}
    assert resolve_input_shapes(model, {"n": 7, "k": [3]}) == {"data": (7, 4), "idx": (3,)}
    assert resolve_input_shapes(model, {"data": (6, 4)})["data"] == (6, 4)
    feeds = generate_inputs(model, input_shapes={"n": 7, "k": 50}, seed=1)
    assert feeds["idx"].shape == (50,) and feeds["idx"].max() < 7
    with pytest.raises(BadInputError):
        resolve_input_shapes(model, {"data": (6, 5)})  # dim 1 is fixed at 4
    with pytest.raises(BadInputError):
        resolve_input_shapes(model, {"data": (6,)})  # wrong rank
    with pytest.raises(BadInputError):
        resolve_input_shapes(model, {"nothing": (1,)})
