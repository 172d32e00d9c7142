"""A load skips the topological-order walk of ``prepare_model`` only where onnx.checker passed the model
(``check_model(..., sorted_found=...)``): on every model of ``onnx_models/`` a pass means the walk would
have found the nodes sorted, and graphs out of order (a node reading a later output, in ai.onnx or a custom
domain, a branch reading an outer value made after its If, a node reading its own output) are not passed,
so they are still sorted as onnxruntime sorts them."""

from __future__ import annotations

import contextlib
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from dmlshim.execute.weights.model_source import load_model
from dmlshim.model.modelcheck import check_model
from dmlshim.model.prepare import _is_sorted, prepare_model

ROOT = Path(__file__).resolve().parent.parent / "onnx_models"
MODELS = sorted(ROOT.rglob("*.onnx"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_passed_model_is_sorted(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    found: list[bool] = []
    try:
        check_model(model, path, unknown_operators_allowed=True, sorted_found=found)()
    except Exception:  # a model the check refuses is not prepared at all
        return
    if found:
        assert _is_sorted(model.graph)


def _model(nodes: list[onnx.NodeProto], inputs: tuple[str, ...] = ("x",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(i, T.BOOL if i == "c" else T.FLOAT, [2]) for i in inputs],
        [helper.make_tensor_value_info("y", T.FLOAT, [2])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


_BRANCH = helper.make_graph(
    [helper.make_node("Neg", ["a"], ["b"])], "b", [], [helper.make_tensor_value_info("b", T.FLOAT, [2])]
)

UNSORTED = {
    "later_output": _model([helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]),
    "custom_domain": _model(
        [helper.make_node("Foo", ["a"], ["y"], domain="custom"), helper.make_node("Neg", ["x"], ["a"])]
    ),
    "branch_reads_later_value": _model(
        [
            helper.make_node("If", ["c"], ["y"], then_branch=_BRANCH, else_branch=_BRANCH),
            helper.make_node("Neg", ["x"], ["a"]),
        ],
        inputs=("x", "c"),
    ),
}


@pytest.mark.parametrize("name", sorted(UNSORTED))
def test_unsorted_graphs_are_not_passed_and_still_sorted(name: str, tmp_path: Path) -> None:
    model = UNSORTED[name]
    assert not _is_sorted(model.graph)
    found: list[bool] = []
    with contextlib.suppress(Exception):  # refused or not: the point is what the check reports
        check_model(model, unknown_operators_allowed=True, sorted_found=found)()
    assert not found
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    try:
        loaded = load_model(str(path), weightless=True, own_weights=False, unknown_operators_allowed=True)
    except Exception:  # a model onnxruntime refuses is refused by the load too
        return
    expected = prepare_model(model)
    assert [n.output[0] for n in loaded.proto.graph.node] == [n.output[0] for n in expected.graph.node]
    assert _is_sorted(loaded.proto.graph)


def test_a_sorted_chain_is_passed() -> None:
    model = _model([helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])])
    found: list[bool] = []
    check_model(model, sorted_found=found)()
    assert found == [True]
