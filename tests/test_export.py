"""``dmlshim export``: every shipped model exported, replayed and compared; the DxDispatch rules of the
shared doc checked on every written model.json by a checker that does not use dmlshim's reader."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.dml.enums import DataType
from dmlshim.dml.tensor import BufferTensorDesc
from dmlshim.dxdispatch.compare import compare_export
from dmlshim.dxdispatch.export import ExportResult, export_model, prepare_input, sanitize_name
from dmlshim.errors import BadInputError
from dmlshim.translate import InputBinding, Reinterpret

from .dxdispatch_rules import dxdispatch_rule_violations
from .oracle import IR_VERSION

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "onnx_models"
MODEL_NAMES = sorted(p.stem for p in MODELS.glob("*.onnx"))

# (exported, skipped) per shipped model at the default feature level, with its .npz inputs.
EXPECTED_COUNTS = {
    "embedding_gather": (2, 0),
    "gather_beam_reorder_dynamic": (1, 0),
    "gather_elements_torch_gather": (1, 0),
    "gathernd_advanced_indexing": (1, 0),
    "gathernd_batch_dims1": (1, 0),
    "gathernd_batch_dims2": (1, 0),
    "gathernd_batch_dims3": (1, 0),
    "gathernd_dynamic_batch": (1, 0),
    "gnn_scatter_reduce": (3, 2),
    "loop_scatternd": (3, 0),  # the Loop body's nodes, captured in its first iteration
    "scatter_add_histogram": (0, 1),
    "scatter_deprecated_opset10": (1, 0),
    "scatter_elements_scatter": (1, 0),
    "scatternd_kv_cache": (2, 0),
    "tiny_decoder_step": (5, 0),
    "topk_gather": (1, 0),
}


def npz_inputs(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS / f"{name}.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ExportResult]:
    """Export a shipped model (once per module) with its sample inputs."""
    cache: dict[str, ExportResult] = {}
    root = tmp_path_factory.mktemp("exports")

    def get(name: str) -> ExportResult:
        if name not in cache:
            cache[name] = export_model(MODELS / f"{name}.onnx", root / name, inputs=npz_inputs(name))
        return cache[name]

    return get


def test_every_shipped_model_is_listed() -> None:
    assert set(MODEL_NAMES) == set(EXPECTED_COUNTS)


# --------------------------------------------------------------------------------------------------
# Export, replay, compare on every shipped model


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_export_replay_compare(name: str, exported: Callable[[str], ExportResult], capsys: Any) -> None:
    result = exported(name)
    directory = result.directory
    assert (len(result.exported), len(result.skipped)) == EXPECTED_COUNTS[name]

    index = json.loads((directory / "index.json").read_text(encoding="utf-8"))
    assert index["feature_level"] == "DML_FEATURE_LEVEL_5_0"
    assert index["model"].endswith(f"{name}.onnx")
    assert [e["folder"] for e in index["exported"]] == [e.folder for e in result.exported]
    assert [s["node"] for s in index["skipped"]] == [s.node for s in result.skipped]
    assert all(s["reason"] and s["code"] for s in index["skipped"])

    for node in result.exported:
        folder = directory / node.folder
        names = {p.name for p in folder.iterdir()}
        assert {"model.json", "expected_output.npy", "README.txt", "input.npy", "indices.npy"} <= names
        # dmlshim's answer mapped back through the plan equals onnxruntime's value for the node.
        assert node.matches_onnxruntime, node.node
        expected = np.load(folder / "expected_output.npy")
        assert list(expected.shape) == list(node.output_shape)
        desc = json.loads((folder / "model.json").read_text())["dispatchables"]["op"]["desc"]
        assert list(expected.shape) == desc["OutputTensor"]["Sizes"]

        code = main(["replay", str(folder / "model.json"), "--output-path", str(folder)])
        assert code == 0
        actual = np.load(folder / "dml_output.npy")
        assert actual.dtype == expected.dtype
        assert actual.shape == expected.shape
        assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind == "f")

    report = compare_export(directory)
    assert report.all_match
    assert len(report.nodes) == len(result.exported)
    capsys.readouterr()
    assert main(["compare", str(directory)]) == 0
    out = capsys.readouterr().out
    assert f"{len(result.exported)} match, 0 mismatch, 0 missing" in out


def test_gather_output_is_the_onnx_output_reshaped(exported: Callable[[str], ExportResult]) -> None:
    # Independent of dmlshim's kernels: an embedding lookup is numpy's take on the weight initializer.
    result = exported("embedding_gather")
    model = onnx.load(str(MODELS / "embedding_gather.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    feeds = npz_inputs("embedding_gather")
    gather = model.graph.node[0]
    reference = np.take(weights[gather.input[0]], feeds[gather.input[1]], axis=0)
    node = result.exported[0]
    assert node.node == "node_embedding"
    expected = np.load(result.directory / node.folder / "expected_output.npy")
    assert np.array_equal(expected.reshape(reference.shape), reference)


def test_loop_body_nodes_are_exported_in_graph_order(exported: Callable[[str], ExportResult]) -> None:
    result = exported("loop_scatternd")
    assert [(e.folder, e.node) for e in result.exported] == [
        ("002_loop_body_gather_row", "loop/body/gather_row"),
        ("002_loop_body_gather_target", "loop/body/gather_target"),
        ("002_loop_body_scatter_row", "loop/body/scatter_row"),
    ]
    assert all(e.iterations == (("loop", 0),) for e in result.exported)


def test_fallback_nodes_are_skipped_with_their_reason(exported: Callable[[str], ExportResult]) -> None:
    result = exported("scatter_add_histogram")
    (skipped,) = result.skipped
    assert skipped.code == "NOT_DML"
    assert "SCATTER_REDUCTION_UNSUPPORTED" in skipped.reason


# --------------------------------------------------------------------------------------------------
def _model_files(directory: Path) -> Iterator[Path]:
    yield from sorted(directory.glob("*/model.json"))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_exported_model_files_follow_the_dxdispatch_rules(
    name: str, exported: Callable[[str], ExportResult]
) -> None:
    result = exported(name)
    files = list(_model_files(result.directory))
    assert len(files) == len(result.exported)
    for path in files:
        assert dxdispatch_rule_violations(path) == [], path
        text = path.read_text()
        assert "SCATTER_ELEMENTS" not in text
        assert "NaN" not in text and "Infinity" not in text


def _handmade_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Bool data, windows (copied and strided), 64-bit data, int32 and negative indices, NaN/inf data."""
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("GatherElements", ["b", "i"], ["y_bool"], axis=1, name="bool_window"),
        helper.make_node("GatherElements", ["f", "i"], ["y_strided"], axis=0, name="strided_window"),
        helper.make_node("ScatterElements", ["f", "i", "u"], ["y_scatter"], axis=1, name="scatter_window"),
        helper.make_node("Gather", ["l", "j"], ["y_int64"], axis=0, name="int64_data"),
        helper.make_node("GatherND", ["f", "k"], ["y_nd"], name="gather_nd"),
    ]
    graph = helper.make_graph(
        nodes,
        "handmade",
        [
            vi("b", TensorProto.BOOL, [4, 5]),
            vi("i", TensorProto.INT64, [2, 3]),
            vi("f", TensorProto.FLOAT, [4, 5]),
            vi("u", TensorProto.FLOAT, [2, 3]),
            vi("l", TensorProto.INT64, [4, 3]),
            vi("j", TensorProto.INT32, [2]),
            vi("k", TensorProto.INT64, [3, 2]),
        ],
        [onnx.ValueInfoProto(name=n) for n in ("y_bool", "y_strided", "y_scatter", "y_int64", "y_nd")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    rng = np.random.default_rng(7)
    f = rng.standard_normal((4, 5)).astype(np.float32)
    f[0, 0], f[1, 1], f[2, 2] = np.nan, np.inf, -np.inf
    feeds = {
        "b": rng.random((4, 5)) > 0.5,
        "i": np.array([[0, 1, -1], [3, 2, -4]], dtype=np.int64),
        "f": f,
        "u": rng.standard_normal((2, 3)).astype(np.float32),
        "l": rng.integers(-(2**40), 2**40, (4, 3)),
        "j": np.array([3, -1], dtype=np.int32),
        "k": np.array([[0, 0], [3, -1], [1, 1]], dtype=np.int64),
    }
    return model, feeds


@pytest.mark.parametrize("level", ["5_0", "4_1", "3_0", "2_1"])
def test_handmade_cases_follow_the_rules_and_round_trip(tmp_path: Path, level: str) -> None:
    model, feeds = _handmade_model()
    result = export_model(model, tmp_path / "out", inputs=feeds, feature_level=level)
    assert result.exported, result.skipped
    for node in result.exported:
        assert node.matches_onnxruntime, node.node
        folder = tmp_path / "out" / node.folder
        assert dxdispatch_rule_violations(folder / "model.json") == []
        assert (
            main(
                ["replay", str(folder / "model.json"), "--output-path", str(folder), "--feature-level", level]
            )
            == 0
        )
        expected = np.load(folder / "expected_output.npy")
        assert np.array_equal(
            np.load(folder / "dml_output.npy"), expected, equal_nan=expected.dtype.kind == "f"
        )
        for npy in folder.glob("*.npy"):
            assert np.load(npy).dtype != np.bool_
    assert compare_export(tmp_path / "out").all_match


def test_host_steps_are_applied_and_described(tmp_path: Path) -> None:
    model, feeds = _handmade_model()
    result = export_model(model, tmp_path / "out", inputs=feeds, feature_level="2_1")
    by_node = {e.node: e for e in result.exported}
    node = by_node["int64_data"]
    folder = tmp_path / "out" / node.folder
    indices = np.load(folder / "indices.npy")
    # Below FL 3_0: UINT32 indices, negatives normalised on the host.
    assert indices.dtype == np.uint32
    assert sorted(indices.reshape(-1).tolist()) == [3, 3]
    data = np.load(folder / "input.npy")
    assert data.dtype == np.uint32 and data.shape[-1] == 2  # 64-bit values as UINT32 pairs
    readme = (folder / "README.txt").read_text()
    assert "normalize_indices" in readme
    assert "two UINT32" in readme
    assert "dxdispatch.exe model.json --output_path ." in readme
    assert "dmlshim compare" in readme
    assert "DML_OPERATOR_GATHER" in readme and "int64_data" in readme

    bool_folder = tmp_path / "out" / by_node["bool_window"].folder
    assert np.load(bool_folder / "input.npy").dtype == np.uint8
    assert "bool bytes reinterpreted as UINT8" in (bool_folder / "README.txt").read_text()


def test_rule_checker_catches_each_violation(tmp_path: Path, exported: Callable[[str], ExportResult]) -> None:
    result = exported("scatter_elements_scatter")
    source = result.directory / result.exported[0].folder
    base = json.loads((source / "model.json").read_text())

    def violations(
        mutate: Callable[[dict[str, Any]], None], text_edit: Callable[[str], str] | None = None
    ) -> list[str]:
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        for npy in source.glob("*.npy"):
            (folder / npy.name).write_bytes(npy.read_bytes())
        doc = json.loads(json.dumps(base))
        mutate(doc)
        text = json.dumps(doc)
        if text_edit is not None:
            text = text_edit(text)
        (folder / "model.json").write_text(text)
        return dxdispatch_rule_violations(folder / "model.json")

    assert violations(lambda d: None) == []

    def set_type(d: dict[str, Any]) -> None:
        d["dispatchables"]["op"]["type"] = "DML_OPERATOR_SCATTER_ELEMENTS"

    def float_size(d: dict[str, Any]) -> None:
        d["dispatchables"]["op"]["desc"]["InputTensor"]["Sizes"][0] = 2.0

    def bad_binding(d: dict[str, Any]) -> None:
        bindings = d["commands"][0]["bindings"]
        bindings["UpdateTensor"] = bindings.pop("UpdatesTensor")

    def no_dimensions(d: dict[str, Any]) -> None:
        del d["commands"][1]["dimensions"]

    def missing_file(d: dict[str, Any]) -> None:
        d["resources"]["input"]["initialValues"]["sourcePath"] = "nope.npy"

    def wrong_dtype(d: dict[str, Any]) -> None:
        d["resources"]["indices"]["initialValuesDataType"] = "INT32"

    def small_output(d: dict[str, Any]) -> None:
        d["resources"]["output"]["initialValues"]["valueCount"] = 1

    def missing_axis(d: dict[str, Any]) -> None:
        del d["dispatchables"]["op"]["desc"]["Axis"]

    def negative_axis(d: dict[str, Any]) -> None:
        d["dispatchables"]["op"]["desc"]["Axis"] = -1

    def float_axis(d: dict[str, Any]) -> None:
        d["dispatchables"]["op"]["desc"]["Axis"] = 1.0

    def inline_output(d: dict[str, Any]) -> None:
        d["resources"]["output"]["initialValues"] = {"valueCount": 4, "value": 0.5}
        d["resources"]["output"]["initialValuesDataType"] = "INT32"

    for mutate in (
        set_type,
        float_size,
        bad_binding,
        no_dimensions,
        missing_file,
        wrong_dtype,
        small_output,
        missing_axis,
        negative_axis,
        float_axis,
        inline_output,
    ):
        assert violations(mutate), mutate.__name__

    def nan_literal(d: dict[str, Any]) -> None:
        d["resources"]["output"]["initialValues"]["value"] = "__NAN__"

    assert violations(nan_literal, lambda t: t.replace('"__NAN__"', "NaN"))


# --------------------------------------------------------------------------------------------------
# The export directory: refusal, --overwrite, hostile node names


def _tiny_model(names: list[str]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Gather", ["data", "idx"], [f"out{i}"], axis=0, name=name)
        for i, name in enumerate(names)
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [vi("data", TensorProto.FLOAT, [3, 2]), vi("idx", TensorProto.INT64, [2])],
        [vi(f"out{i}", TensorProto.FLOAT, [2, 2]) for i in range(len(names))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    feeds: dict[str, np.ndarray] = {
        "data": np.arange(6, dtype=np.float32).reshape(3, 2),
        "idx": np.array([2, 0], dtype=np.int64),
    }
    return model, feeds


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def test_non_empty_directory_is_refused_without_overwrite(tmp_path: Path, capsys: Any) -> None:
    model, feeds = _tiny_model(["g"])
    model_path = tmp_path / "m.onnx"
    onnx.save(model, str(model_path))
    np.savez(tmp_path / "in.npz", data=feeds["data"], idx=feeds["idx"])
    out = tmp_path / "out"
    args = ["export", str(model_path), "--inputs", str(tmp_path / "in.npz"), "-o", str(out)]
    assert main(args) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert _snapshot(out) == before

    other = tmp_path / "user_dir"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(BadInputError):
        export_model(model, other, inputs=feeds)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]

    # An existing empty directory is fine.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_model(model, empty, inputs=feeds).exported


def test_overwrite_replaces_the_previous_export_only(tmp_path: Path) -> None:
    out = tmp_path / "out"
    model_a, feeds = _tiny_model(["first", "second"])
    export_model(model_a, out, inputs=feeds)
    (out / "my_notes.txt").write_text("keep me")
    assert {p.name for p in out.iterdir()} == {"index.json", "000_first", "001_second", "my_notes.txt"}

    model_b, feeds = _tiny_model(["third"])
    result = export_model(model_b, out, inputs=feeds, overwrite=True)
    assert [e.folder for e in result.exported] == ["000_third"]
    assert {p.name for p in out.iterdir()} == {"index.json", "000_third", "my_notes.txt"}
    assert (out / "my_notes.txt").read_text() == "keep me"
    index = json.loads((out / "index.json").read_text())
    assert [e["node"] for e in index["exported"]] == ["third"]


def test_overwrite_ignores_folders_an_edited_index_points_outside(tmp_path: Path) -> None:
    out = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("x")
    model, feeds = _tiny_model(["g"])
    export_model(model, out, inputs=feeds)
    index = json.loads((out / "index.json").read_text())
    index["exported"].append({"folder": "../victim", "node": "x", "op_type": "Gather"})
    (out / "index.json").write_text(json.dumps(index))
    export_model(model, out, inputs=feeds, overwrite=True)
    assert (victim / "precious.txt").read_text() == "x"


HOSTILE_NAMES = ["../../evil", "a/b/c", "..", "/abs/path", "C:\\windows\\x", "", ".", "x" * 300, "ok..name"]


def test_hostile_node_names_stay_inside_the_directory(tmp_path: Path) -> None:
    model, feeds = _tiny_model(HOSTILE_NAMES)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    out = sandbox / "out"
    result = export_model(model, out, inputs=feeds)
    assert len(result.exported) == len(HOSTILE_NAMES)
    assert [p.name for p in sandbox.iterdir()] == ["out"]
    folders = [p for p in out.iterdir() if p.is_dir()]
    assert len(folders) == len(HOSTILE_NAMES)
    for folder in folders:
        assert folder.parent == out
        assert ".." not in folder.name and "/" not in folder.name and "\\" not in folder.name
        assert len(folder.name) <= 90
    for path in out.rglob("*"):
        assert path.resolve().is_relative_to(out.resolve())
    # Node names keep their original text in index.json.
    index = json.loads((out / "index.json").read_text())
    assert index["exported"][0]["node"] == "../../evil"
    assert compare_export(out).nodes[0].status == "missing"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("..", "node"),
        ("../../evil", "evil"),
        ("a/b", "a_b"),
        ("/abs/x", "abs_x"),
        ("a..b", "a_b"),
        ("é", "node"),
    ],
)
def test_sanitize_name(name: str, expected: str) -> None:
    assert sanitize_name(name) == expected


# --------------------------------------------------------------------------------------------------
# Generated inputs, CLI, prepare_input


def test_cli_export_with_generated_inputs(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    model = MODELS / "gather_beam_reorder_dynamic.onnx"
    assert main(["export", str(model), "-o", str(out), "--input-shape", "beams=3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["exported"]) == 1
    index = json.loads((out / "index.json").read_text())
    assert index["inputs"] == {"generated": True, "seed": 0, "symbols": {"beams": 3}}
    assert index["input_shapes"]["past_keys"][0] == 3
    folder = out / doc["exported"][0]["folder"]
    assert main(["replay", str(folder / "model.json"), "--output-path", str(folder)]) == 0
    capsys.readouterr()
    assert main(["compare", str(out)]) == 0


def test_cli_export_feature_level_and_text_output(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    args = ["export", str(MODELS / "topk_gather.onnx"), "--inputs", str(MODELS / "topk_gather.npz")]
    assert main([*args, "-o", str(out), "--feature-level", "3_0"]) == 0
    text = capsys.readouterr().out
    assert "DML_FEATURE_LEVEL_3_0" in text and "006_node_gather" in text and "dxdispatch.exe" in text
    assert json.loads((out / "index.json").read_text())["feature_level"] == "DML_FEATURE_LEVEL_3_0"
    with pytest.raises(SystemExit):
        main([*args, "-o", str(tmp_path / "bad"), "--feature-level", "9_9"])
    assert not (tmp_path / "bad").exists()


def test_missing_graph_input_is_an_error(tmp_path: Path) -> None:
    model, feeds = _tiny_model(["g"])
    with pytest.raises(BadInputError, match="idx"):
        export_model(model, tmp_path / "out", inputs={"data": feeds["data"]})
    assert not (tmp_path / "out").exists()
    # A failed run with --overwrite leaves the previous export as it was.
    export_model(model, tmp_path / "prev", inputs=feeds)
    before = _snapshot(tmp_path / "prev")
    with pytest.raises(BadInputError):
        export_model(model, tmp_path / "prev", inputs={"data": feeds["data"]}, overwrite=True)
    assert _snapshot(tmp_path / "prev") == before


def test_prepare_input_strided_and_cast() -> None:
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    strided = BufferTensorDesc(DataType.FLOAT32, (2, 3), (5, 1))
    binding = InputBinding(
        "InputTensor", 0, "data", (4, 5), TensorProto.FLOAT, (), Reinterpret.NONE, strided, (2, 3)
    )
    prepared = prepare_input(binding, data)
    # Sizes [2,3] with Strides [5,1] address elements 0..7 of the flat data: (2-1)*5 + (3-1)*1 + 1 = 8.
    assert prepared.array.shape == (8,)
    assert np.array_equal(prepared.array, data.reshape(-1)[:8])
    assert any("trimmed from 20 to the 8 elements" in s for s in prepared.steps)

    indices = BufferTensorDesc(DataType.INT32, (1, 2))
    binding = InputBinding("IndicesTensor", 1, "idx", (2,), TensorProto.INT64, (), Reinterpret.NONE, indices)
    prepared = prepare_input(binding, np.array([1, -1], dtype=np.int64))
    assert prepared.array.dtype == np.int32 and prepared.array.shape == (1, 2)
    assert any("cast" in s for s in prepared.steps)
    with pytest.raises(BadInputError):
        prepare_input(binding, np.array([2**40, 0], dtype=np.int64))
    with pytest.raises(BadInputError):
        prepare_input(binding, np.array([1, 2, 3], dtype=np.int64))
