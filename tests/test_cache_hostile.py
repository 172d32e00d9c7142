"""Hostile inputs for the per-structure caches of translation and data propagation: nodes that share a
cache key where they must not share the result. Each case compares what dmlshim gives a node in company
with what it gives the node alone, or with onnxruntime's CPU values, in every engine.

- names that a reason quotes through ``repr`` escapes (a backslash, a newline): the node sharing the
  translation must name its own tensor, not the first node's;
- sibling If branches declaring one value name with other types and data: data propagation types each
  branch's cut nodes from the branch's own values (it read one flat table by name);
- an initializer that is also a graph input (a default the caller may override): its value must decide
  no type, or an engine runs at the default's length after a feed changed it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.translate.model_translation import translate_model
from tests.oracle import ort_run

ENGINES = ("partitioned", "customop", "cpu")


def _model(nodes, inputs, outputs, initializers=(), opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _translations(model: onnx.ModelProto) -> dict[str, dict[str, object]]:
    return {t.name: t.to_json() for t in translate_model(model).nodes}


@pytest.mark.parametrize("sep", ["\\", "\n", "\u200b", "\x7f"])
def test_a_name_quoted_with_escapes_is_the_nodes_own(sep: str) -> None:
    # Data of unknown rank: SHAPE_UNKNOWN quotes the data tensor's name with repr, which escapes these.
    a, b = f"Q{sep}1", f"Q{sep}2"
    nodes = [
        helper.make_node("Gather", [a, "K"], ["Z1"], name="A"),
        helper.make_node("Gather", [b, "K"], ["Z2"], name="B"),
    ]
    inputs = [
        helper.make_tensor_value_info(a, TensorProto.FLOAT, None),
        helper.make_tensor_value_info(b, TensorProto.FLOAT, None),
        helper.make_tensor_value_info("K", TensorProto.INT64, [2]),
    ]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Z1", "Z2")]
    both = _translations(_model(nodes, inputs, outputs))
    for node, out in zip(nodes, outputs, strict=True):
        alone = _translations(_model([node], inputs, [out]))
        assert both[node.name] == alone[node.name]
    assert [r["value"] for r in both["B"]["reasons"] if r["code"] == "SHAPE_UNKNOWN"] == [b]
    assert repr(b) in both["B"]["reasons"][0]["message"]


def _branch(tag: str, idx: list[int]) -> onnx.GraphProto:
    # g = BIG[idx] (BIG: 1-D, past data propagation's cut size), then g[len(idx) - 1]
    nodes = [
        helper.make_node("Gather", ["BIG", "idx"], ["g"], name="G1"),
        helper.make_node("Gather", ["g", "last"], ["o"], name="G2"),
    ]
    inits = [
        numpy_helper.from_array(np.array(idx, np.int64), "idx"),
        numpy_helper.from_array(np.array([len(idx) - 1], np.int64), "last"),
    ]
    return helper.make_graph(
        nodes, tag, [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)], inits
    )


@pytest.mark.parametrize("length", [2000, 100])  # cut by data propagation, and not
@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("engine", ENGINES)
def test_sibling_branches_with_one_value_name_keep_their_own_types(
    length: int, cond: bool, engine: str
) -> None:
    node = helper.make_node(
        "If", ["c"], ["y"], name="IF", then_branch=_branch("t", [5, 6]), else_branch=_branch("e", [7, 8, 9])
    )
    inputs = [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("BIG", TensorProto.FLOAT, [length]),
    ]
    model = _model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    feeds = {"c": np.array(cond), "BIG": np.arange(length, dtype=np.float32)}
    expected = ort_run(model, feeds)
    assert expected[0].tolist() == ([6.0] if cond else [9.0])
    got = dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


def test_sibling_branches_translate_at_their_own_shapes() -> None:
    node = helper.make_node(
        "If", ["c"], ["y"], name="IF", then_branch=_branch("t", [5, 6]), else_branch=_branch("e", [7, 8, 9])
    )
    inputs = [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("BIG", TensorProto.FLOAT, [2000]),
    ]
    got = _translations(_model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    # each branch's second Gather reads g of its own length (numpy: len(BIG[idx]))
    for branch, length in (("then_branch", 2), ("else_branch", 3)):
        desc = got[f"IF/{branch}/G2"]["operator"]["desc"]
        assert desc["InputTensor"]["Sizes"][-1] == length


@pytest.mark.parametrize("length", [2000, 100])
@pytest.mark.parametrize("feeds_end", [None, 20])
@pytest.mark.parametrize("engine", ENGINES)
def test_an_overridable_default_decides_no_shape(length: int, feeds_end: int | None, engine: str) -> None:
    # s = BIG[st:en] with st, en initializers that are also graph inputs; y = s[-1]
    nodes = [
        helper.make_node("Slice", ["BIG", "st", "en"], ["s"], name="SL"),
        helper.make_node("Gather", ["s", "k"], ["y"], name="G"),
    ]
    inputs = [
        helper.make_tensor_value_info("BIG", TensorProto.FLOAT, [length]),
        helper.make_tensor_value_info("st", TensorProto.INT64, [1]),
        helper.make_tensor_value_info("en", TensorProto.INT64, [1]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "st"),
        numpy_helper.from_array(np.array([10], np.int64), "en"),
        numpy_helper.from_array(np.array([-1], np.int64), "k"),
    ]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    feeds = {"BIG": np.arange(length, dtype=np.float32)}
    if feeds_end is not None:
        feeds["en"] = np.array([feeds_end], np.int64)
    expected = ort_run(model, feeds)
    assert expected[0].tolist() == [float((feeds_end or 10) - 1)]
    got = dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


def _loop_branch(tag: str, idx: list[int]) -> onnx.GraphProto:
    # v = BIG[idx]; a one-trip Loop whose body reads v from the enclosing branch: o = v[len(idx) - 1]
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["v", "last"], ["o"], name="G2"),
            helper.make_node("Identity", ["cin"], ["cout"], name="ID"),
        ],
        "body",
        [
            helper.make_tensor_value_info("it", TensorProto.INT64, []),
            helper.make_tensor_value_info("cin", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cout", TensorProto.BOOL, []),
            helper.make_tensor_value_info("o", TensorProto.FLOAT, None),
        ],
    )
    nodes = [
        helper.make_node("Gather", ["BIG", "idx"], ["v"], name="G1"),
        helper.make_node("Loop", ["trip", "cond0"], ["scan_o"], name="L", body=body),
        helper.make_node("Identity", ["scan_o"], ["r"], name="ID2"),
    ]
    inits = [
        numpy_helper.from_array(np.array(idx, np.int64), "idx"),
        numpy_helper.from_array(np.array([len(idx) - 1], np.int64), "last"),
        numpy_helper.from_array(np.array(1, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond0"),
    ]
    return helper.make_graph(
        nodes, tag, [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)], inits
    )


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_loop_body_reads_the_outer_value_of_its_own_branch(cond: bool, engine: str) -> None:
    node = helper.make_node(
        "If", ["c"], ["y"], name="IF", then_branch=_loop_branch("t", [5, 6]),
        else_branch=_loop_branch("e", [7, 8, 9]),
    )  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        helper.make_tensor_value_info("BIG", TensorProto.FLOAT, [2000]),
    ]
    model = _model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    feeds = {"c": np.array(cond), "BIG": np.arange(2000, dtype=np.float32)}
    expected = ort_run(model, feeds)
    assert expected[0].tolist() == ([[6.0]] if cond else [[9.0]])
    got = dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("feed_cond", [None, False])
@pytest.mark.parametrize("engine", ENGINES)
def test_an_if_on_an_overridable_condition_is_not_settled_statically(
    feed_cond: bool | None, engine: str
) -> None:
    # y = X[[1, 2]] if c else X[[0, 1, 2]], c an initializer (True) that is also a graph input; z = y[-1]
    def branch(tag: str, idx: list[int]) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Gather", ["X", "idx"], ["g"], name="G1")], tag, [],
            [helper.make_tensor_value_info("g", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.array(idx, np.int64), "idx")],
        )  # fmt: skip

    nodes = [
        helper.make_node("If", ["c"], ["y"], name="IF", then_branch=branch("t", [1, 2]),
                         else_branch=branch("e", [0, 1, 2])),
        helper.make_node("Gather", ["y", "last"], ["z"], name="G3"),
    ]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [4]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    inits = [
        numpy_helper.from_array(np.array(True), "c"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
    ]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    feeds = {"X": np.array([10, 20, 30, 40], np.float32)}
    if feed_cond is not None:
        feeds["c"] = np.array(feed_cond)
    expected = ort_run(model, feeds)
    assert expected[0].tolist() == [30.0]
    got = dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


# Tensor names a reason may quote: escapes (backslash, quotes, a newline, invisible characters), names that
# are words of the messages themselves, and short names found inside longer ones.
HOSTILE_NAMES = ["x\\y", "q'r", 'q"r', "n\nl", "\u200b", "\x7f", "data", "indices", "the", "e", "[0]", "None"]
PAIR_CASES = [
    ("Gather", {"axis": 0}, [None, [2]], 13),  # data of unknown rank: SHAPE_UNKNOWN quotes it
    ("Gather", {"axis": 5}, [[4, 3], [2]], 13),  # axis out of range
    ("GatherElements", {"axis": 1}, [["N", 3], [2, 3]], 13),  # symbolic sizes
    ("GatherND", {"batch_dims": 1}, [[2], None], 18),  # indices of unknown rank
    ("ScatterElements", {"axis": 0, "reduction": "max"}, [[4, 3], [1, 3], [1, 3]], 18),
    ("ScatterND", {"reduction": "mul"}, [[4, 3], [2, 1], None], 16),
    ("Scatter", {"axis": 1}, [[4, 3], [1, 3], [1, 3]], 10),
]


@pytest.mark.parametrize(("op", "attrs", "shapes", "opset"), PAIR_CASES)
@pytest.mark.parametrize("first", range(0, len(HOSTILE_NAMES), 3))
def test_same_structure_nodes_with_hostile_names_translate_as_alone(op, attrs, shapes, opset, first) -> None:
    count = len(shapes)
    names_a = [HOSTILE_NAMES[(first + k) % len(HOSTILE_NAMES)] for k in range(count)]
    names_b = [n + "\\" for n in names_a]
    elem = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT][:count]
    inputs = [
        helper.make_tensor_value_info(n, elem[k], shapes[k])
        for names in (names_a, names_b)
        for k, n in enumerate(names)
    ]
    nodes = [
        helper.make_node(op, names_a, ["O\\1"], name="A", **attrs),
        helper.make_node(op, names_b, ["O2"], name="B", **attrs),
    ]
    outputs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("O\\1", "O2")]
    alone = {
        **_translations(_model(nodes[:1], inputs, outputs[:1], opset=opset)),
        **_translations(_model(nodes[1:], inputs, outputs[1:], opset=opset)),
    }
    assert _translations(_model(nodes, inputs, outputs, opset=opset)) == alone
    assert _translations(_model(nodes[::-1], inputs, outputs[::-1], opset=opset)) == alone


@pytest.mark.parametrize("engine", ENGINES)
def test_onnxruntimes_message_names_the_node_in_every_engine(engine: str) -> None:
    # symbolic sizes; at run time updates [1,2] do not fit data [2,2,3] with indices [1,2]: onnxruntime's
    # error names node 'S', and so must each engine's (the custom-op fallback ran an unnamed copy)
    node = helper.make_node("ScatterND", ["D", "nd", "upd"], ["s"], name="S")
    inputs = [
        helper.make_tensor_value_info("D", TensorProto.FLOAT, ["a", "b", "c"]),
        helper.make_tensor_value_info("nd", TensorProto.INT64, ["n", 2]),
        helper.make_tensor_value_info("upd", TensorProto.FLOAT, ["n", "k"]),
    ]
    model = _model([node], inputs, [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)])
    feeds = {
        "D": np.zeros((2, 2, 3), np.float32),
        "nd": np.array([[1, 2]], np.int64),
        "upd": np.array([[7, 8]], np.float32),
    }
    with pytest.raises(Exception, match="Name:'S'"):
        ort_run(model, feeds)
    with pytest.raises(Exception, match="Name:'S'"):
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)
