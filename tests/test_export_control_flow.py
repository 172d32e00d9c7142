"""``dmlshim export`` of gather/scatter nodes inside If, Loop and Scan bodies.

The captured inputs are checked against values computed here with numpy from the model's definition (the
loop's rows scattered so far, the top-k boxes), and every exported folder is replayed and compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.dxdispatch.compare import compare_export
from dmlshim.dxdispatch.export import ExportResult, export_model

from .oracle import IR_VERSION, ort_run

REPO = Path(__file__).resolve().parents[1]
LOOP_MODEL = REPO / "onnx_models" / "loop_scatternd.onnx"


def _loop_inputs() -> dict[str, np.ndarray]:
    with np.load(REPO / "onnx_models" / "loop_scatternd.npz") as data:
        return {k: data[k] for k in data.files}


def _replay_and_compare(result: ExportResult, capsys: Any) -> None:
    for node in result.exported:
        folder = result.directory / node.folder
        assert main(["replay", str(folder / "model.json"), "--output-path", str(folder)]) == 0
    assert compare_export(result.directory).all_match
    capsys.readouterr()
    assert main(["compare", str(result.directory)]) == 0
    assert f"{len(result.exported)} match, 0 mismatch, 0 missing" in capsys.readouterr().out


def _inputs_of(result: ExportResult, node: str) -> dict[str, np.ndarray]:
    entry = next(e for e in result.exported if e.node == node)
    folder = result.directory / entry.folder
    return {p.stem: np.load(p) for p in folder.glob("*.npy") if p.stem in ("input", "indices", "updates")}


# --------------------------------------------------------------------------------------------------
# Loop


@pytest.mark.parametrize("iteration", [0, 2, 4])
def test_loop_body_nodes_in_iteration_n(tmp_path: Path, iteration: int, capsys: Any) -> None:
    feeds = _loop_inputs()
    result = export_model(LOOP_MODEL, tmp_path / "out", inputs=feeds, iteration=iteration)
    assert [e.node for e in result.exported] == [
        "loop/body/gather_row",
        "loop/body/gather_target",
        "loop/body/scatter_row",
    ]
    assert result.skipped == ()
    assert all(e.iterations == (("loop", iteration),) and e.matches_onnxruntime for e in result.exported)
    # The body reads row `iteration` of rows and perm, and the buffer with the earlier rows scattered in.
    rows, perm, buffer = feeds["rows"], feeds["perm"], feeds["buffer"]
    row = _inputs_of(result, "loop/body/gather_row")
    assert np.array_equal(row["input"], rows) and int(row["indices"].reshape(-1)[0]) == iteration
    target = _inputs_of(result, "loop/body/gather_target")
    assert int(target["indices"].reshape(-1)[0]) == iteration
    scatter = _inputs_of(result, "loop/body/scatter_row")
    expected_buffer = buffer.copy()
    for j in range(iteration):
        expected_buffer[perm[j]] = rows[j]
    assert np.array_equal(scatter["input"], expected_buffer)
    assert int(scatter["indices"].reshape(-1)[0]) == perm[iteration]
    assert np.array_equal(scatter["updates"].reshape(-1), rows[iteration])
    index = json.loads((result.directory / "index.json").read_text())
    assert index["iteration"] == iteration
    assert index["exported"][2]["captured_in"] == [{"node": "loop", "iteration": iteration}]
    readme = (result.directory / "002_loop_body_scatter_row" / "README.txt").read_text()
    assert f"Captured in:    iteration {iteration} of 'loop'" in readme
    _replay_and_compare(result, capsys)


def test_cli_export_of_the_loop_model(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "cli"
    inputs = str(REPO / "onnx_models" / "loop_scatternd.npz")
    assert main(["export", str(LOOP_MODEL), "-o", str(out), "--inputs", inputs, "--iteration", "1"]) == 0
    text = capsys.readouterr().out
    assert "exported 3 node(s)" in text and "002_loop_body_scatter_row" in text
    assert text.count("(iteration 1 of loop)") == 3
    assert sorted(p.name for p in out.iterdir()) == [
        "002_loop_body_gather_row",
        "002_loop_body_gather_target",
        "002_loop_body_scatter_row",
        "index.json",
    ]


def test_an_iteration_the_loop_never_reaches_is_reported(tmp_path: Path) -> None:
    result = export_model(LOOP_MODEL, tmp_path / "out", inputs=_loop_inputs(), iteration=5)
    assert result.exported == ()
    assert {s.code for s in result.skipped} == {"ITERATION_NOT_REACHED"}
    assert "ran 5 iteration(s)" in result.skipped[0].reason


def test_a_negative_iteration_is_an_error(tmp_path: Path, capsys: Any) -> None:
    inputs = str(REPO / "onnx_models" / "loop_scatternd.npz")
    code = main(
        ["export", str(LOOP_MODEL), "-o", str(tmp_path / "x"), "--inputs", inputs, "--iteration", "-1"]
    )
    assert code == 2
    assert "iteration" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------------
# Detection-style post-processing: gathers inside If branches, and an If inside a per-class Loop


def detection_model() -> onnx.ModelProto:
    """Keep the top-k boxes when any score passes the threshold, else the first box; then, per class, a
    Loop whose body gathers that class's column of the class scores inside an If."""
    k = 3
    then_branch = helper.make_graph(
        [
            helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], name="topk", axis=0),
            helper.make_node("Gather", ["boxes", "top_idx"], ["kept"], name="gather_boxes", axis=0),
            helper.make_node("Unsqueeze", ["top_idx", "axis1"], ["top_idx2"], name="unsq"),
            helper.make_node("Tile", ["top_idx2", "tile4"], ["top_idx4"], name="tile"),
            helper.make_node("GatherElements", ["boxes", "top_idx4"], ["kept_e"], name="gather_el", axis=0),
            helper.make_node("Add", ["kept", "kept_e"], ["kept_sum"], name="add"),
        ],
        "keep_topk",
        [],
        [helper.make_tensor_value_info("kept_sum", TensorProto.FLOAT, [None, 4])],
        initializer=[
            numpy_helper.from_array(np.array([k], dtype=np.int64), "k"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "tile4"),
        ],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Gather", ["boxes", "first"], ["first_box"], name="gather_first", axis=0)],
        "keep_first",
        [],
        [helper.make_tensor_value_info("first_box", TensorProto.FLOAT, [None, 4])],
        initializer=[numpy_helper.from_array(np.array([0], dtype=np.int64), "first")],
    )
    class_if_then = helper.make_graph(
        [helper.make_node("Gather", ["class_scores", "c"], ["column"], name="gather_class", axis=1)],
        "class_then",
        [],
        [helper.make_tensor_value_info("column", TensorProto.FLOAT, [6])],
    )
    class_if_else = helper.make_graph(
        [helper.make_node("ReduceMax", ["class_scores"], ["column"], name="reduce", axes=[1], keepdims=0)],
        "class_else",
        [],
        [helper.make_tensor_value_info("column", TensorProto.FLOAT, [6])],
    )
    per_class = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"], name="c_id"),
            helper.make_node("Less", ["c", "n_real"], ["real"], name="is_real"),
            helper.make_node(
                "If", ["real"], ["column"], name="pick", then_branch=class_if_then, else_branch=class_if_else
            ),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "per_class",
        [
            helper.make_tensor_value_info("c", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("column", TensorProto.FLOAT, [6]),
        ],
    )
    nodes = [
        helper.make_node("ReduceMax", ["scores"], ["best"], name="best", keepdims=0),
        helper.make_node("Greater", ["best", "threshold"], ["any"], name="any"),
        helper.make_node(
            "If", ["any"], ["kept"], name="detect", then_branch=then_branch, else_branch=else_branch
        ),
        helper.make_node(
            "Loop",
            [
                "n_classes",
                "",
            ],
            ["columns"],
            name="classes",
            body=per_class,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "detection_postprocess",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [6, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("class_scores", TensorProto.FLOAT, [6, 3]),
        ],
        [
            helper.make_tensor_value_info("kept", TensorProto.FLOAT, [None, 4]),
            helper.make_tensor_value_info("columns", TensorProto.FLOAT, [None, 6]),
        ],
        initializer=[
            numpy_helper.from_array(np.array(0.5, dtype=np.float32), "threshold"),
            numpy_helper.from_array(np.array(3, dtype=np.int64), "n_classes"),
            numpy_helper.from_array(np.array(2, dtype=np.int64), "n_real"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def _detection_feeds(confident: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1501)
    scores = rng.permutation(np.linspace(0.05, 0.45, 6)).astype(np.float32)
    if confident:
        scores[4] = 0.9
    return {
        "boxes": rng.standard_normal((6, 4)).astype(np.float32),
        "scores": scores,
        "class_scores": rng.standard_normal((6, 3)).astype(np.float32),
    }


def test_detection_model_runs_in_onnxruntime() -> None:
    feeds = _detection_feeds(True)
    kept, columns = ort_run(detection_model(), feeds)
    top = np.argsort(-feeds["scores"], kind="stable")[:3]
    assert np.array_equal(kept, 2 * feeds["boxes"][top])
    assert columns.shape == (3, 6)


def test_detection_gathers_in_the_taken_branch_are_exported(tmp_path: Path, capsys: Any) -> None:
    feeds = _detection_feeds(True)
    result = export_model(detection_model(), tmp_path / "out", inputs=feeds, iteration=1)
    assert [(e.folder, e.node, e.iterations) for e in result.exported] == [
        ("002_detect_then_branch_gather_boxes", "detect/then_branch/gather_boxes", (("detect", None),)),
        ("002_detect_then_branch_gather_el", "detect/then_branch/gather_el", (("detect", None),)),
        (
            "003_classes_body_pick_then_branch_gather_class",
            "classes/body/pick/then_branch/gather_class",
            (("classes", 1), ("classes/body/pick", None)),
        ),
    ]
    assert [(s.node, s.code) for s in result.skipped] == [
        ("detect/else_branch/gather_first", "BRANCH_NOT_TAKEN")
    ]
    assert all(e.matches_onnxruntime for e in result.exported)
    top = np.argsort(-feeds["scores"], kind="stable")[:3]
    boxes = _inputs_of(result, "detect/then_branch/gather_boxes")
    assert np.array_equal(boxes["input"], feeds["boxes"])
    assert np.array_equal(boxes["indices"].reshape(-1), top)
    column = _inputs_of(result, "classes/body/pick/then_branch/gather_class")
    assert int(column["indices"].reshape(-1)[0]) == 1  # the class of iteration 1
    _replay_and_compare(result, capsys)


def test_detection_other_branch_and_an_unreached_iteration(tmp_path: Path, capsys: Any) -> None:
    # No score passes: the else branch runs. Iteration 2 is the third class, which is not "real", so the
    # If inside the loop takes its else branch (no gather) there.
    result = export_model(detection_model(), tmp_path / "out", inputs=_detection_feeds(False), iteration=2)
    assert [e.node for e in result.exported] == ["detect/else_branch/gather_first"]
    assert [(s.node, s.code) for s in result.skipped] == [
        ("detect/then_branch/gather_boxes", "BRANCH_NOT_TAKEN"),
        ("detect/then_branch/gather_el", "BRANCH_NOT_TAKEN"),
        ("classes/body/pick/then_branch/gather_class", "BRANCH_NOT_TAKEN"),
    ]
    _replay_and_compare(result, capsys)


# --------------------------------------------------------------------------------------------------
# Scan


def test_scan_body_gather_in_iteration_n(tmp_path: Path, capsys: Any) -> None:
    body = helper.make_graph(
        [
            helper.make_node("GatherElements", ["table", "idx_t"], ["picked"], name="pick_elements", axis=0),
            helper.make_node("Add", ["acc_in", "picked"], ["acc_out"], name="accumulate"),
            helper.make_node("Identity", ["picked"], ["picked_out"], name="emit"),
        ],
        "scan_body",
        [
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("idx_t", TensorProto.INT64, [1, 3]),
        ],
        [
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("picked_out", TensorProto.FLOAT, [1, 3]),
        ],
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "Scan", ["acc0", "idx"], ["acc", "all"], name="scan", body=body, num_scan_inputs=1
            )
        ],
        "scan_gather",
        [
            helper.make_tensor_value_info("table", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("acc0", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [5, 1, 3]),
        ],
        [
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("all", TensorProto.FLOAT, [5, 1, 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)
    rng = np.random.default_rng(1502)
    feeds = {
        "table": rng.standard_normal((4, 3)).astype(np.float32),
        "acc0": np.zeros((1, 3), dtype=np.float32),
        "idx": rng.integers(-4, 4, (5, 1, 3)).astype(np.int64),
    }
    result = export_model(model, tmp_path / "out", inputs=feeds, iteration=3)
    (entry,) = result.exported
    assert entry.node == "scan/body/pick_elements" and entry.iterations == (("scan", 3),)
    captured = _inputs_of(result, "scan/body/pick_elements")
    assert np.array_equal(captured["indices"].reshape(1, 3), feeds["idx"][3])
    _replay_and_compare(result, capsys)


def test_a_scan_8_body_is_reported_not_stepped_into(tmp_path: Path) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["state_in", "idx_t"], ["picked"], name="pick", axis=0),
            helper.make_node("Identity", ["state_in"], ["state_out"], name="keep"),
        ],
        "scan8_body",
        [
            helper.make_tensor_value_info("state_in", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("idx_t", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("picked", TensorProto.FLOAT, [1]),
        ],
    )
    scan = helper.make_node(
        "Scan", ["", "s0", "idx"], ["s", "all"], name="scan8", body=body, num_scan_inputs=1
    )
    graph = helper.make_graph(
        [scan],
        "scan8",
        [
            helper.make_tensor_value_info("s0", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 4, 1]),
        ],
        [
            helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 3]),
            helper.make_tensor_value_info("all", TensorProto.FLOAT, [1, 4, 1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=IR_VERSION)
    feeds = {"s0": np.ones((1, 3), np.float32), "idx": np.array([[[0], [2], [1], [0]]], np.int64)}
    ort_run(model, feeds)  # a valid model onnxruntime runs
    result = export_model(model, tmp_path / "out", inputs=feeds)
    assert result.exported == ()
    ((node, code, reason),) = [(s.node, s.code, s.reason) for s in result.skipped]
    assert (node, code) == ("scan8/body/pick", "SUBGRAPH_NODE") and "Scan-8" in reason
