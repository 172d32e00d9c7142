"""``inspect --inputs`` translates the gather/scatter nodes inside If, Loop and Scan bodies at the shapes
the run gives them (each Loop/Scan iteration's, the worst verdict kept), and says which verdicts came from
the run. The models (tests/body_shape_models.py) leave those nodes ``SHAPE_UNKNOWN`` statically. Expected
shapes come from onnxruntime CPU: the same values run through models that hand the intermediate out as
a graph output (the branch's nodes at the top level, the Loop stopped after k iterations, the Scan
with the step's indices as one more scan output)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh

from dmlshim.cli.main import main
from dmlshim.translate.run_cases import iteration_text

sys.path.insert(0, str(Path(__file__).parent))
import body_shape_models as models


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def _save(
    tmp_path: Path, name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[Path, Path]:
    path, npz = tmp_path / f"{name}.onnx", tmp_path / f"{name}.npz"
    onnx.save(model, str(path))
    np.savez(npz, **feeds)
    return path, npz


def _inspect(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["inspect", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _nodes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in doc["nodes"]}


def _branch_at_top(model: onnx.ModelProto, branch: str, outputs: list[str]) -> onnx.ModelProto:
    """The If's ``branch`` nodes as the top-level graph, handing out ``outputs``."""
    (if_node,) = model.graph.node
    sub = next(a.g for a in if_node.attribute if a.name == branch)
    graph = oh.make_graph(
        list(sub.node),
        "flat",
        [v for v in model.graph.input if v.name != "flag"],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    return oh.make_model(graph, opset_imports=model.opset_import, ir_version=10)


_RNG = np.random.default_rng(7)
IF_FEEDS = {
    "params": _RNG.random((2, 5, 3), dtype=np.float32),
    "ids": np.array([[4, 0, 2], [1, 1, 3]], dtype=np.int64),
    "eids": np.zeros(12, dtype=np.int64),
    "target": np.array([2, 2, 3], dtype=np.int64),
}


def test_static_inspect_leaves_every_body_node_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, model in (
        ("if", models.if_model()),
        ("loop", models.loop_model()),
        ("scan", models.scan_model()),
    ):
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, str(path))
        code, doc = _inspect([str(path)], capsys)
        assert code == 1 and doc["nodes"]
        assert all("SHAPE_UNKNOWN" in [r["code"] for r in n["reasons"]] for n in doc["nodes"]), name


def test_if_branch_that_runs_takes_the_runs_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = models.if_model()
    feeds = {"flag": np.array(True), **IF_FEEDS}
    path, npz = _save(tmp_path, "if_then", model, feeds)
    flat = _ort(_branch_at_top(model, "then_branch", ["then_indices", "t_out"]), dict(IF_FEEDS))
    out = _ort(model, feeds)["out"]
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    nodes = _nodes(doc)
    gnd = nodes["choose/then_branch/then/GatherNd"]
    assert code == 0 and gnd["status"] == "dml" and gnd["shapes"] == "run"
    assert gnd["operator"]["type"] == "DML_OPERATOR_GATHER_ND1"
    assert gnd["plan"]["output"]["sizes"] == list(out.shape) == list(flat["t_out"].shape) == [2, 3, 3]
    (case,) = gnd["run_shapes"]
    assert case["iterations"] == "the run"
    assert case["shapes"] == [list(IF_FEEDS["params"].shape), list(flat["then_indices"].shape)]
    # The branch that did not run: static shapes, inferred with the run's input sizes (target has 3
    # values, so the reshaped indices have rank 3): the verdict is known, and says where it came from.
    pick = nodes["choose/else_branch/pick"]
    assert pick["shapes"] == "static" and pick["status"] == "dml"
    assert pick["shapes_note"] == "the else_branch of If 'choose' did not run on these inputs"
    assert doc["run"]["nodes_at_run_shapes"] == ["choose/then_branch/then/GatherNd"]
    assert doc["run"]["nodes_not_run"] == {"choose/else_branch/pick": pick["shapes_note"]}


def test_if_other_branch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.if_model()
    feeds = {"flag": np.array(False), **IF_FEEDS}
    path, npz = _save(tmp_path, "if_else", model, feeds)
    flat = _ort(_branch_at_top(model, "else_branch", ["e_idx", "e_out"]), dict(IF_FEEDS))
    out = _ort(model, feeds)["out"]
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    nodes = _nodes(doc)
    pick = nodes["choose/else_branch/pick"]
    assert pick["shapes"] == "run" and pick["status"] == "dml"
    assert pick["plan"]["output"]["sizes"] == list(out.shape) == list(flat["e_out"].shape) == [2, 2, 3]
    assert pick["run_shapes"][0]["shapes"] == [[2, 5, 3], list(flat["e_idx"].shape)]
    # The TF batch GatherND in the branch not taken: its index depth is computed, and nothing ran it.
    gnd = nodes["choose/then_branch/then/GatherNd"]
    assert code == 1 and gnd["shapes"] == "static" and gnd["status"] == "error"
    assert "did not run" in gnd["shapes_note"]
    assert main(["inspect", str(path), "--inputs", str(npz)]) == 1
    text = capsys.readouterr().out
    assert "Shapes: 1 of 2 gather/scatter nodes translated at the shapes of a run" in text
    assert "1 of them inside If/Loop/Scan bodies; 1 in bodies that did not run" in text
    assert (
        "choose/then_branch/then/GatherNd: static shapes: the then_branch of If 'choose' did not run" in text
    )


def _carried_after(model: onnx.ModelProto, feeds: dict[str, np.ndarray], iterations: int) -> list[int]:
    """onnxruntime's shape of the Loop's carried value after ``iterations`` iterations: what the body's
    ``x_in`` is at iteration ``iterations + 1``."""
    return list(_ort(model, {**feeds, "trips": np.array(iterations, dtype=np.int64)})["x_final"].shape)


LOOP_FEEDS = {
    "x0": np.arange(4, dtype=np.float32),
    "params": _RNG.random((2, 5, 3), dtype=np.float32),
    "ids": np.array([[4, 0], [1, 1]], dtype=np.int64),
}


def test_loop_each_iterations_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.loop_model()
    feeds = {"trips": np.array(3, dtype=np.int64), **LOOP_FEEDS}
    path, npz = _save(tmp_path, "loop", model, feeds)
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    nodes = _nodes(doc)
    read = nodes["grow/body/read"]
    assert code == 0 and read["shapes"] == "run" and read["status"] == "dml"
    assert [c["iterations"] for c in read["run_shapes"]] == ["iteration 1", "iteration 2", "iteration 3"]
    assert [c["shapes"][0] for c in read["run_shapes"]] == [_carried_after(model, feeds, k) for k in range(3)]
    assert [c["shapes"][0] for c in read["run_shapes"]] == [[4], [1, 4], [1, 1, 4]]
    # Iteration 1 reads a rank-1 x: the output is a scalar, which onnxruntime's DirectML provider rejects:
    # the worst of the three, so the node's placement.
    assert [c["worst"] for c in read["run_shapes"]] == [True, False, False]
    assert read["ort_placement"] is None and read["run_shapes"][0]["ort_placement"] is None
    write = nodes["grow/body/write"]  # the same verdict at each iteration: none is singled out
    assert [c["worst"] for c in write["run_shapes"]] == [False, False, False]
    assert [c["shapes"][2] for c in write["run_shapes"]] == [[], [4], [1, 4]]
    gnd = nodes["grow/body/inner/GatherNd"]
    (case,) = gnd["run_shapes"]
    gs = _ort(model, feeds)["gs"]
    assert case["iterations"] == "iterations 1-3" and gnd["plan"]["output"]["sizes"] == list(gs.shape[1:])


def test_loop_worst_iteration_decides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.loop_model()
    feeds = {"trips": np.array(9, dtype=np.int64), **LOOP_FEEDS}
    path, npz = _save(tmp_path, "loop9", model, feeds)
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    read = _nodes(doc)["grow/body/read"]
    worst = [c for c in read["run_shapes"] if c["worst"]]
    assert (
        code == 1
        and read["status"] == "fallback"
        and "RANK_TOO_LARGE" in [r["code"] for r in read["reasons"]]
    )
    assert len(read["run_shapes"]) == 9 and [c["iterations"] for c in worst] == ["iteration 9"]
    assert worst[0]["shapes"][0] == _carried_after(model, feeds, 8) == [1] * 8 + [4]
    assert all(c["status"] == "dml" for c in read["run_shapes"][:8])
    main(["inspect", str(path), "--inputs", str(npz)])
    text = capsys.readouterr().out
    assert "grow/body/read: 9 shapes in the run, verdict from the worst:" in text
    assert "iteration 9: inputs [1,1,1,1,1,1,1,1,4], [1]: fallback, ORT EP rejected  <- worst" in text
    assert "... 2 more shapes (--json lists every one)" in text
    assert "grow/body/write: 9 shapes in the run, verdict from the worst:" in text


def test_scan_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.scan_model()
    feeds = {
        "s0": _RNG.random((2, 3), dtype=np.float32),
        "seq": _RNG.random((4, 2, 3), dtype=np.float32),
        "seq_idx": _RNG.integers(0, 3, (4, 2, 3)),
        "target": np.array([2, 3], dtype=np.int64),
    }
    path, npz = _save(tmp_path, "scan", model, feeds)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    body = exposed.graph.node[0].attribute[0].g
    body.node.append(oh.make_node("Identity", ["idx"], ["idx_out"]))
    body.output.append(oh.make_tensor_value_info("idx_out", T.INT64, ["b", "c"]))
    exposed.graph.node[0].output.append("idx_steps")
    exposed.graph.output.append(oh.make_tensor_value_info("idx_steps", T.INT64, None))
    got = _ort(exposed, feeds)
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    take = _nodes(doc)["steps/body/take"]
    (case,) = take["run_shapes"]
    assert code == 0 and take["shapes"] == "run" and take["status"] == "dml"
    assert case["iterations"] == "iterations 1-4" and got["idx_steps"].shape[0] == 4
    assert (
        case["shapes"] == [list(got["s_final"].shape), list(got["idx_steps"].shape[1:])] == [[2, 3], [2, 3]]
    )
    assert take["plan"]["output"]["sizes"] == list(got["ys"].shape[1:])


def test_nested_if_and_loop_in_a_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.nested_model()
    feeds = {
        "trips": np.array(3, dtype=np.int64),
        "inner": np.array(2, dtype=np.int64),
        "x0": np.arange(4, dtype=np.float32),
    }
    path, npz = _save(tmp_path, "nested", model, feeds)
    after = [
        list(_ort(model, {**feeds, "trips": np.array(k, dtype=np.int64)})["x_final"].shape) for k in range(3)
    ]
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    nodes = _nodes(doc)
    pick = nodes["outer/body/parity_if/then_branch/even_pick"]  # iterations 1 and 3 (i = 0 and 2) are even
    assert code == 0 and pick["shapes"] == "run"
    assert [(c["iterations"], c["shapes"][0]) for c in pick["run_shapes"]] == [
        ("iteration 1", after[0]),
        ("iteration 3", after[2]),
    ]
    read = nodes["outer/body/rows_loop/body/inner_read"]
    assert [(c["iterations"], c["shapes"][0]) for c in read["run_shapes"]] == [
        ("iterations 1.1, 1.2", after[0]),
        ("iterations 2.1, 2.2", after[1]),
        ("iterations 3.1, 3.2", after[2]),
    ]


def test_iteration_text() -> None:
    assert iteration_text([(1,), (2,), (3,), (5,)]) == "iterations 1-3, 5"
    assert iteration_text([(4,)]) == "iteration 4"
    assert iteration_text([()]) == "the run"
    assert iteration_text([(2, 1)]) == "iteration 2.1"


def test_a_cut_row_is_reported_not_guessed() -> None:
    """A row whose record is longer than the row (a length past its end) gives no shapes: the body is
    reported as cut, its nodes keep static shapes."""
    from dmlshim.cli.inspect_bodies import instrument_bodies, node_executions, parse_records

    model = models.scan_model()
    records = instrument_bodies(model)
    rows = next(k for k, m in records.meaning.items() if m[0] == "rows")
    length = int(records.meaning[rows][2])  # type: ignore[call-overload]
    marker = next(k for k, m in records.meaning.items() if m[0] == "graph")
    row_ok = np.zeros(length, np.int64)
    row_ok[:3] = [2, marker, 0]
    row_cut = np.zeros(length, np.int64)
    row_cut[0] = length  # longer than the row holds
    flat = np.concatenate([[rows, 2, 2, length], row_ok, row_cut])
    executions, cut = parse_records(records, [flat])
    assert cut == {"steps/body/"} and len(executions["steps/body/"]) == 1
    assert node_executions(records, executions, cut) == {}


def test_loop_of_no_iteration_keeps_static_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = models.loop_model()
    feeds = {"trips": np.array(0, dtype=np.int64), **LOOP_FEEDS}
    path, npz = _save(tmp_path, "loop0", model, feeds)
    assert _ort(model, feeds)["x_final"].shape == (4,)  # onnxruntime runs it: the body never does
    code, doc = _inspect([str(path), "--inputs", str(npz)], capsys)
    assert code == 1 and doc["run"]["error"] is None and doc["run"]["nodes_at_run_shapes"] == []
    for node in doc["nodes"]:
        assert node["shapes"] == "static" and "run_shapes" not in node
        assert node["shapes_note"] == "the body of 'grow' ran no iteration on these inputs"
