"""Issue 36, build cost, seventh pass: work a session build did twice, now done once, with the same answers.

- the weightless model's bytes are made once per shape inference and read by the op search, the size check,
  propagation's reader search and onnx's pass (``serialized=``): the answers are those of the graph's own
  bytes, and of the walks;
- onnxruntime's acceptance payload is the checker's inference key (the same remembered pass);
- the model check's external-data entries are handed to the loader, which no longer looks for them again
  when there are none (and still reads them when there are);
- the static size limits' values read by ``Shape`` alone are found in one walk: the same set as the two
  walks' (kept here as the reference), and a value over the limit is still refused naming its node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError
from dmlshim.execute.plan import checks
from dmlshim.fileio import external_data
from dmlshim.graph import may_hold_op_types, op_types, op_types_among, subgraphs
from dmlshim.model import last_inference, modelcheck
from dmlshim.model.graph_columns import flat_ops
from dmlshim.model.prop_readers import SYMBOLIC_READERS, propagation_unread
from dmlshim.model.weightless import without_weights
from dmlshim.translate.shapes_info import infer_shapes

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
MODELS = sorted([*ROOT.glob("*.onnx"), *ROOT.glob("*/*.onnx")])
WANTED = ("If", "Loop", "Scan")


def _light(path: Path) -> onnx.ModelProto:
    return without_weights(onnx.load(str(path), load_external_data=False))


def test_the_shipped_models_are_there() -> None:
    assert len(MODELS) >= 80


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_searches_of_the_models_bytes_answer_as_the_graphs(path: Path) -> None:
    model = _light(path)
    data = model.SerializeToString()
    graph = model.graph
    assert op_types_among(graph, WANTED, data) == op_types(graph) & set(WANTED)
    readers = sorted(SYMBOLIC_READERS)
    assert may_hold_op_types(graph, readers, data) == may_hold_op_types(graph, readers)
    if not op_types(graph) & set(readers):
        assert not may_hold_op_types(graph, readers, data)
    assert flat_ops(graph, data) == flat_ops(graph)
    assert propagation_unread(model, data) == propagation_unread(model)


def test_a_search_of_bytes_still_walks_on_a_match() -> None:
    """An If's bytes found in the model (a true node here) is confirmed by the walk: the answer names it."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", 1, [1])]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", 1, [1]),
        ],
        [helper.make_tensor_value_info("y", 1, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    assert op_types_among(model.graph, WANTED, data) == {"If"}
    assert flat_ops(model.graph, data) is None  # a node holds a graph: the caller walks
    # a decoy: the op's bytes in a string, no such node
    decoy = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"], doc_string="\x22\x02If")],
            "g",
            [helper.make_tensor_value_info("x", 1, [1])],
            [helper.make_tensor_value_info("y", 1, [1])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    assert op_types_among(decoy.graph, WANTED, decoy.SerializeToString()) == frozenset()


@pytest.mark.parametrize("name", ["t5_dynamo", "gnn_scatter_torchscript", "maskrcnn_torchscript"])
def test_inference_from_given_bytes_is_onnxs(name: str) -> None:
    """``infer_shapes`` (bounded propagation) reads the bytes it made once; its answer is the same as the
    propagation's without them (serialized deterministically)."""
    from dmlshim.model.data_prop import infer_with_data_prop

    model = _light(ROOT / "real" / f"{name}.onnx")
    given = infer_with_data_prop(model, serialized=model.SerializeToString())
    made = infer_with_data_prop(model)
    assert given.SerializeToString(deterministic=True) == made.SerializeToString(deterministic=True)
    assert infer_shapes(model).graph.node  # the translation's entry point runs the same way


def test_the_checkers_inference_is_keyed_by_the_acceptance_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model check hands onnxruntime's payload to the checker's inference, which onnx runs once; a
    later request for the same pass (the engine's) is answered from it."""
    calls: list[bytes] = []
    real = onnx.shape_inference.infer_shapes

    def counting(model: object, *args: object, **kwargs: object) -> onnx.ModelProto:
        assert isinstance(model, bytes)
        calls.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    path = ROOT / "real" / "bert_dynamo.onnx"
    loaded = onnx.load(str(path), load_external_data=False)
    light = without_weights(loaded)
    acceptance = modelcheck.start_ort_acceptance(light, loaded, str(path), lazy=True)
    assert acceptance.serialized == light.SerializeToString()
    calls.clear()
    modelcheck._onnx_checker_findings(light, acceptance.serialized)
    assert calls == [acceptance.serialized]
    again = last_inference.infer_shapes(light)
    assert len(calls) == 1  # remembered
    assert again == real(light)


def test_a_model_carrying_ort_config_gives_no_payload_as_key() -> None:
    model = onnx.load(str(ROOT / "real" / "bert_dynamo.onnx"), load_external_data=False)
    helper.set_model_props(model, {"ort_config": "{}"})
    acceptance = modelcheck.start_ort_acceptance(model, model, None, lazy=True)
    assert acceptance.serialized is None  # onnxruntime is given a copy without it, not the model's bytes


def _external_model(tmp_path: Path) -> Path:
    weight = numpy_helper.from_array(np.arange(20000, dtype=np.float32).reshape(100, 200), "w")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0)],
        "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 200])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin")
    return path


def test_external_data_is_looked_for_once_and_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime as ort

    seen: list[int] = []
    real = external_data.external_tensors
    monkeypatch.setattr(external_data, "external_tensors", lambda g: seen.append(1) or real(g))
    plain = ROOT / "real" / "bert_dynamo.onnx"
    dmlshim.InferenceSession(str(plain))
    assert len(seen) == 1  # the model check's walk only (it found none: nothing to load)

    path = _external_model(tmp_path)
    feeds = {"i": np.array([5, 0, 99], dtype=np.int64)}
    got = dmlshim.InferenceSession(str(path)).run(None, feeds)[0]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def _shape_only_two_walks(graph: onnx.GraphProto) -> set[str]:
    """The two walks ``_shape_only`` made before this pass (the reference)."""
    readers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
        for _, sub in subgraphs(node):
            for name in checks._read_names(sub):
                readers.setdefault(name, set()).add("")
    outputs = {v.name for v in graph.output}
    constant = {t.name for t in graph.initializer} - {v.name for v in graph.input}
    for node in graph.node:
        if all(not name or name in constant for name in node.input) and not any(
            True for _ in subgraphs(node)
        ):
            constant.update(o for o in node.output if o)
    return {n for n, ops in readers.items() if ops == {"Shape"} and n not in outputs and n not in constant}


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_values_read_by_shape_alone_are_the_two_walks(path: Path) -> None:
    graph = onnx.load(str(path), load_external_data=False).graph
    assert checks._shape_only(graph) == _shape_only_two_walks(graph)


def test_values_read_by_shape_alone_in_a_handmade_graph() -> None:
    """Read by Shape only (p), by Shape and an Add (c), by Shape and a subgraph (b), a graph output (a), a
    value computed from a constant (d); x is read by Relu nodes."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Identity", ["b"], ["o"])], "body", [], [vi("o", 1, [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["x"], ["b"]),
        helper.make_node("Relu", ["x"], ["c"]),
        helper.make_node("Relu", ["k"], ["d"]),
        helper.make_node("Shape", ["a"], ["sa"]),
        helper.make_node("Shape", ["b"], ["sb"]),
        helper.make_node("Shape", ["c"], ["sc"]),
        helper.make_node("Shape", ["d"], ["sd"]),
        helper.make_node("Add", ["c", "c"], ["e"]),
        helper.make_node("If", ["cond"], ["f"], then_branch=body, else_branch=body),
        helper.make_node("Relu", ["x"], ["p"]),
        helper.make_node("Shape", ["p"], ["sp"]),
    ]
    k = numpy_helper.from_array(np.ones(2, np.float32), "k")
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", 1, [2]), vi("cond", TensorProto.BOOL, [])],
        [vi(n, 7, [1]) for n in ("sa", "sb", "sc", "sd", "sp")]
        + [vi("e", 1, [2]), vi("f", 1, [2]), vi("a", 1, [2])],
        [k],
    )
    assert checks._shape_only(graph) == _shape_only_two_walks(graph) == {"p"}
    graph.output.pop()  # "a" is no longer a graph output: read by Shape alone
    assert checks._shape_only(graph) == _shape_only_two_walks(graph) == {"a", "p"}


def test_a_value_over_the_limit_is_refused_naming_its_node(monkeypatch: pytest.MonkeyPatch) -> None:
    vi = helper.make_tensor_value_info
    shape = numpy_helper.from_array(np.array([1000, 1000], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="make_big"),
         helper.make_node("Gather", ["big", "i"], ["y"], axis=0)],
        "g",
        [vi("i", TensorProto.INT64, [2])],
        [vi("y", TensorProto.FLOAT, [2, 1000])],
        [shape],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(3_000_000))
    inferred = infer_shapes(model)
    from dmlshim.translate.shapes_info import tensor_infos

    infos = tensor_infos(inferred.graph)
    with pytest.raises(TooLargeError) as caught:
        checks.check_static_sizes(inferred.graph, infos, ["make_big", "gather"], model=model)
    assert caught.value.node == "make_big" and caught.value.tensor == "big"
    assert caught.value.value == 4_000_000
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(4_000_000))
    checks.check_static_sizes(inferred.graph, infos, ["make_big", "gather"], model=model)  # fits exactly
