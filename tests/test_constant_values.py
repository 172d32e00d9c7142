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


def _reference(mt: object, graph: onnx.GraphProto) -> dict[str, tuple[object, ...] | None]:
    """Each top-level gather/scatter node's first out-of-range index, computed node by node as the check
    did before its shortcuts (constant_value per node, every attribute read, no bounds)."""
    from dmlshim.graph import node_path
    from dmlshim.translate.constant_indices import _data_shape, first_out_of_range

    nodes = {node_path("", n, i): n for i, n in enumerate(graph.node)}
    out: dict[str, tuple[object, ...] | None] = {}
    for t in mt.nodes:  # type: ignore[attr-defined]
        node = nodes.get(t.name)
        if node is None or t.domain or len(node.input) < 2 or not node.input[1]:
            continue
        shape = _data_shape(t, node.input[0], graph)
        bad = (
            None
            if shape is None
            else first_out_of_range(node, shape, constant_value((graph,), node.input[1]))
        )
        out[t.name] = None if bad is None else (bad.tensor, bad.position, bad.index, bad.axis, bad.size)
    return out


def _flagged(model: onnx.ModelProto) -> tuple[dict[str, object], dict[str, object]]:
    from dmlshim.translate.constant_indices import flag_constant_indices
    from dmlshim.translate.model_translation import translate_model

    mt = translate_model(model, other_domains=True)
    flagged = flag_constant_indices(mt, model.graph)
    got = {
        t.name: next((r.value for r in t.reasons if r.code == "INDEX_OUT_OF_RANGE"), None)
        for t in flagged.nodes
    }
    want = {name: (None if bad is None else bad[2]) for name, bad in _reference(mt, model.graph).items()}
    return {k: v for k, v in got.items() if k in want}, want


@pytest.mark.parametrize("path", [p for p in MODELS if "real" in p.parts or "ecosystem" in p.parts][:40],
                         ids=lambda p: p.stem)  # fmt: skip
def test_corpus_flags_as_node_by_node(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    got, want = _flagged(model)
    assert got == want


def test_random_gathers_flag_as_node_by_node() -> None:
    """Random data shapes, axes (negative, out of the rank), index dtypes and values (negative, at the
    bounds, empty, huge unsigned): the least/greatest shortcut and the shared answers change nothing."""
    rng = np.random.default_rng(54)
    for trial in range(150):
        rank = int(rng.integers(1, 4))
        shape = [int(d) for d in rng.integers(1, 6, size=rank)]
        op = str(rng.choice(["Gather", "GatherElements", "GatherND"]))
        dtype = rng.choice([np.int64, np.int32, np.uint64])
        size = int(rng.integers(0, 4))
        low, high = -2 * max(shape) - 1, 2 * max(shape) + 1
        values = rng.integers(low, high, size=(size, 1) if op == "GatherND" else size)
        if dtype == np.uint64:
            values = np.abs(values).astype(np.uint64)
            if trial % 7 == 0 and size:
                values.flat[0] = 2**63 + 5  # negative once read as int64
        indices = numpy_helper.from_array(values.astype(dtype), f"i{trial}")
        attrs = {"axis": int(rng.integers(-rank - 1, rank + 1))} if op != "GatherND" else {}
        nodes = [helper.make_node(op, ["x", f"i{trial}"], [f"y{k}"], name=f"n{k}", **attrs) for k in range(3)]
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", T.FLOAT, shape)],
            [helper.make_tensor_value_info(f"y{k}", T.FLOAT, None) for k in range(3)],
            initializer=[indices],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        got, want = _flagged(model)
        assert got == want, (op, shape, attrs, values.tolist())
