"""``constant_values`` (one walk, then a table) answers as ``constant_value`` (a walk per name) does, for
every name of every top-level graph of ``onnx_models/`` and for graphs where the rules' order decides:
a name that is an initializer and a graph input, an initializer and a Constant, two initializers, an
initializer a node also writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.translate.ep_refusals import constant_value, constant_values

ROOT = Path(__file__).resolve().parent.parent / "onnx_models"
MODELS = sorted(ROOT.rglob("*.onnx"))


def _names(graph: onnx.GraphProto) -> list[str]:
    names = [v.name for v in (*graph.input, *graph.output, *graph.value_info)]
    names += [t.name for t in graph.initializer]
    for node in graph.node:
        names += [*node.input, *node.output]
    return [*dict.fromkeys(names), "absent"]


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _check(graph: onnx.GraphProto) -> int:
    table = constant_values(graph)
    known = 0
    for name in _names(graph):
        expected = constant_value((graph,), name)
        assert _same(table(name), expected), name
        assert _same(table(name), expected), name  # asked again: the remembered answer
        known += expected is not None
    return known


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_corpus_names_answered_alike(path: Path) -> None:
    _check(onnx.load(str(path), load_external_data=False).graph)


def _t(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array([value], dtype=np.float32), name)


def test_order_of_the_rules() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["both"], value=_t("both", 9.0)),  # an initializer wins
            helper.make_node("Constant", [], ["c"], value=_t("c", 1.0)),
            helper.make_node("Constant", [], ["c2"], value=_t("c2", 2.0)),
            helper.make_node("Constant", [], ["c2"], value=_t("c2", 3.0)),  # the first Constant wins
            helper.make_node("Neg", ["x"], ["written"]),  # an initializer a node writes: computed
            helper.make_node("Constant", [], ["ints"], value_ints=[1, 2]),
        ],
        "g",
        [helper.make_tensor_value_info(n, T.FLOAT, [1]) for n in ("x", "fed")],
        [helper.make_tensor_value_info("written", T.FLOAT, [1])],
        initializer=[_t("both", 5.0), _t("twice", 6.0), _t("twice", 7.0), _t("fed", 8.0), _t("written", 4.0)],
    )
    assert _check(graph) == 5  # both, c, c2, twice, ints; fed and written are not constants
    table = constant_values(graph)
    assert [table(n).tolist() for n in ("both", "c2", "twice")] == [[5.0], [2.0], [6.0]]
    assert table("fed") is None and table("written") is None
