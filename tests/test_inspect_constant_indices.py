"""inspect flags constant indices outside the axis they address (a new user's walk: it did not).

Each case is a model whose indices are an initializer or a Constant node; onnxruntime CPU is the
authority: inspect flags a node exactly when onnxruntime fails the run (ONNX: indices lie in [-s, s-1])."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.cli.main import main
from tests.oracle import IR_VERSION, ort_run

F = np.float32


def _case(
    op: str,
    data_shape: tuple[int, ...],
    indices: list,
    updates_shape: tuple[int, ...] | None = None,
    **attrs: int,
) -> tuple[str, tuple[int, ...], np.ndarray, tuple[int, ...] | None, dict[str, int]]:
    return op, data_shape, np.array(indices, dtype=np.int64), updates_shape, attrs


# (case, flagged, (position, index, axis, size) of the first offending index)
CASES = {
    "gather_in_range": (_case("Gather", (3, 4), [[0, 3], [1, 2]], axis=1), None),
    "gather_negative": (_case("Gather", (3, 4), [[-4, -1]], axis=1), None),
    "gather_too_big": (_case("Gather", (3, 4), [[0, 4]], axis=1), ([0, 1], 4, 1, 4)),
    "gather_too_small": (_case("Gather", (3, 4), [-4], axis=0), ([0], -4, 0, 3)),
    "gather_elements_in_range": (_case("GatherElements", (3, 4), [[0, 1, 2, 0]], axis=0), None),
    "gather_elements_negative": (_case("GatherElements", (3, 4), [[-3, -1, 2, 0]], axis=0), None),
    "gather_elements_out": (
        _case("GatherElements", (3, 4), [[0, 1], [2, 3], [3, 0]], axis=0),
        ([1, 1], 3, 0, 3),
    ),
    "gather_nd_in_range": (_case("GatherND", (3, 4), [[1, 3], [2, 0]]), None),
    "gather_nd_negative": (_case("GatherND", (3, 4), [[-3, -4]]), None),
    "gather_nd_out": (_case("GatherND", (3, 4), [[1, 3], [2, 4]]), ([1, 1], 4, 1, 4)),
    "gather_nd_batch_in_range": (_case("GatherND", (2, 3, 4), [[2], [-3]], batch_dims=1), None),
    "gather_nd_batch_out": (_case("GatherND", (2, 3, 4), [[2], [3]], batch_dims=1), ([1, 0], 3, 1, 3)),
    "scatter_elements_in_range": (_case("ScatterElements", (3, 4), [[0, 3]], (1, 2), axis=1), None),
    "scatter_elements_negative": (_case("ScatterElements", (3, 4), [[-4, -1]], (1, 2), axis=1), None),
    "scatter_elements_out": (_case("ScatterElements", (3, 4), [[1, -5]], (1, 2), axis=1), ([0, 1], -5, 1, 4)),
    "scatter_nd_in_range": (_case("ScatterND", (3, 4), [[2], [0]], (2, 4)), None),
    "scatter_nd_negative": (_case("ScatterND", (3, 4), [[-3], [-1]], (2, 4)), None),
    "scatter_nd_out": (_case("ScatterND", (3, 4), [[0], [3]], (2, 4)), ([1, 0], 3, 0, 3)),
    "scatter_nd_pair_out": (_case("ScatterND", (3, 4), [[0, 1], [2, 4]], (2,)), ([1, 1], 4, 1, 4)),
}


def _model(case: tuple, *, as_constant_node: bool) -> onnx.ModelProto:
    op, shape, indices, updates_shape, attrs = case
    inputs = [helper.make_tensor_value_info("data", T.FLOAT, list(shape))]
    names = ["data", "idx"]
    if updates_shape is not None:
        inputs.append(helper.make_tensor_value_info("updates", T.FLOAT, list(updates_shape)))
        names.append("updates")
    nodes = [helper.make_node(op, names, ["out"], name="node", **attrs)]
    tensor = numpy_helper.from_array(indices, "idx")
    initializers = []
    if as_constant_node:
        nodes.insert(0, helper.make_node("Constant", [], ["idx"], name="idx_constant", value=tensor))
    else:
        initializers.append(tensor)
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("out", T.FLOAT, None)], initializer=initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def _feeds(case: tuple) -> dict[str, np.ndarray]:
    _, shape, _, updates_shape, _ = case
    feeds = {"data": np.arange(np.prod(shape), dtype=F).reshape(shape)}
    if updates_shape is not None:
        feeds["updates"] = -np.ones(updates_shape, dtype=F)
    return feeds


def _ort_fails(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> bool:
    try:
        ort_run(model, feeds, quiet=True)
    except Exception:  # onnxruntime's InvalidArgument / RuntimeException
        return True
    return False


@pytest.mark.parametrize("as_constant_node", [False, True], ids=["initializer", "constant_node"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_inspect_flags_what_onnxruntime_fails(
    name: str, as_constant_node: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case, expected = CASES[name]
    model = _model(case, as_constant_node=as_constant_node)
    assert _ort_fails(model, _feeds(case)) == (expected is not None)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    code = main(["inspect", str(path), "--json"])
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    codes = [r["code"] for r in node["reasons"]]
    if expected is None:
        assert "INDEX_OUT_OF_RANGE" not in codes
        assert node["status"] == "dml" and code == 0
        return
    position, index, axis, size = expected
    assert node["status"] == "error" and code == 1
    reason = node["reasons"][0]
    assert reason["code"] == "INDEX_OUT_OF_RANGE" and reason["value"] == index
    assert (
        f"constant index {index} at idx{position} addresses axis {axis} of 'data', of size {size}"
        in reason["message"]
    )
    assert f"[{-size}, {size - 1}]" in reason["message"]


def test_the_text_report_names_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case, _ = CASES["gather_too_big"]
    path = tmp_path / "m.onnx"
    onnx.save(_model(case, as_constant_node=False), path)
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "INDEX_OUT_OF_RANGE: 1" in out
    assert (
        "[error] INDEX_OUT_OF_RANGE: constant index 4 at idx[0, 1] addresses axis 1 of 'data', of size 4: "
        "ONNX Gather takes indices in [-4, 3]" in out
    )


def test_an_initializer_that_is_also_an_input_is_not_constant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a feed may replace it (onnxruntime): nothing is known before the run
    case, _ = CASES["gather_too_big"]
    model = _model(case, as_constant_node=False)
    model.graph.input.append(helper.make_tensor_value_info("idx", T.INT64, [1, 2]))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["inspect", str(path), "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert node["status"] == "dml"
