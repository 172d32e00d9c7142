"""``nothing_folds`` (the shortcut that skips the model of onnxruntime's level-1 folding) against that model
itself (:func:`dmlshim.translate.ort_folding.optimized_away`): where the shortcut says nothing folds, the
model removes no node, on every model of ``onnx_models/``, on hand-made graphs where one rule starts, and on
seeded random graphs; and onnxruntime's own basic-level graph keeps every node of a graph the shortcut
passes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.model.prepare import prepare_model
from dmlshim.translate.graph_infos import _GraphInfos
from dmlshim.translate.ort_fold_gate import nothing_folds
from dmlshim.translate.ort_folding import optimized_away
from dmlshim.translate.shapes_info import infer_shapes

ROOT = Path(__file__).resolve().parent.parent / "onnx_models"
MODELS = sorted(ROOT.rglob("*.onnx"))


def _removed(model: onnx.ModelProto) -> dict[int, object]:
    ready = prepare_model(model)
    infos = _GraphInfos(infer_shapes(ready, None).graph, {})
    opset = next((o.version for o in ready.opset_import if o.domain in ("", "ai.onnx")), 0)
    return optimized_away(ready.graph, ready.ir_version, opset, infos.get)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], out: str = "y") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [4])],
        [helper.make_tensor_value_info(out, T.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _w(name: str = "w") -> onnx.TensorProto:
    return numpy_helper.from_array(np.arange(4, dtype=np.float32), name)


def _chain(count: int = 50) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"a{i - 1}", "w"], [f"a{i}"]) for i in range(count)]
    nodes.append(helper.make_node("Neg", [f"a{count - 1}"], ["y"]))
    return _model(nodes, [_w()])


def test_a_chain_reading_inputs_folds_nothing() -> None:
    model = _chain()
    assert nothing_folds(model.graph)
    assert _removed(model) == {}


@pytest.mark.parametrize(
    ("nodes", "inits"),
    [
        # a node reading only an initializer folds
        ([helper.make_node("Neg", ["w"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])], [_w()]),
        # a Constant's output read alone folds
        (
            [
                helper.make_node("Constant", [], ["c"], value=_w("c")),
                helper.make_node("Neg", ["c"], ["n"]),
                helper.make_node("Add", ["x", "n"], ["y"]),
            ],
            [],
        ),
        # a Shape of a static shape folds
        (
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Cast", ["s"], ["f"], to=T.FLOAT),
                helper.make_node("Add", ["x", "f"], ["y"]),
            ],
            [],
        ),
        # an Identity of an initializer is eliminated: its reader then reads the initializer alone
        (
            [
                helper.make_node("Identity", ["w"], ["i"]),
                helper.make_node("Neg", ["i"], ["n"]),
                helper.make_node("Add", ["x", "n"], ["y"]),
            ],
            [_w()],
        ),
    ],
)
def test_a_graph_where_a_rule_starts_is_left_to_the_model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]
) -> None:
    model = _model(nodes, inits)
    assert not nothing_folds(model.graph)
    assert _removed(model)  # the model removes a node there: the shortcut must not answer


def test_a_subgraph_is_left_to_the_model() -> None:
    branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["b"])], "b", [], [helper.make_tensor_value_info("b", T.FLOAT, [4])]
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    model = _model([helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)], [cond])
    assert not nothing_folds(model.graph)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_corpus_shortcut_implies_nothing_removed(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    if nothing_folds(prepare_model(model).graph):
        assert _removed(model) == {}


def _random_model(rng: random.Random) -> onnx.ModelProto:
    """A random graph of unary and binary nodes over the input, two initializers, maybe a Constant, and
    an occasional Identity."""
    values = ["x"]
    inits = [_w("w"), _w("v")]
    nodes = [helper.make_node("Constant", [], ["c"], value=_w("c"))] if rng.random() < 0.5 else []
    constants = ["w", "v", *(["c"] if nodes else [])]
    for i in range(rng.randint(1, 12)):
        op = rng.choice(["Add", "Mul", "Neg", "Relu", "Identity", "Add", "Mul"])
        if op == "Identity" and rng.random() < 0.6:
            op = "Sub"
        pick = lambda: rng.choice(values + constants if rng.random() < 0.3 else values)  # noqa: E731
        ins = [pick(), pick()] if op in ("Add", "Mul", "Sub") else [pick()]
        nodes.append(helper.make_node(op, ins, [f"v{i}"]))
        values.append(f"v{i}")
    nodes.append(helper.make_node("Add", [values[-1], "x"], ["y"]))
    return _model(nodes, inits)


def test_random_graphs_shortcut_implies_nothing_removed() -> None:
    rng = random.Random(54)
    passed = 0
    for _ in range(300):
        model = _random_model(rng)
        if nothing_folds(model.graph):
            passed += 1
            assert _removed(model) == {}, onnx.printer.to_text(model.graph)
    assert passed > 30  # the shortcut is taken on a good share of them


def test_onnxruntime_keeps_every_node_of_a_graph_the_shortcut_passes(tmp_path: Path) -> None:
    """The authority itself: onnxruntime's basic-level optimized graph of the chain holds every node."""
    import onnxruntime as ort

    model = _chain(30)
    assert nothing_folds(model.graph)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(str(tmp_path / "opt.onnx"))
    assert len(optimized.graph.node) == len(model.graph.node)
