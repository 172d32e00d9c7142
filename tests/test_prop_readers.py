"""Data propagation is skipped where no node's inference can read what it computes (issue 35, item 3).

The expected inferences are onnx's own ``infer_shapes(..., data_prop=True)`` of the same model; the
readers are the ops whose inference calls onnx's ``getShapeInput`` (``onnx/defs``).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.model import data_prop, prop_readers
from dmlshim.model.data_prop import infer_with_data_prop
from dmlshim.model.prop_readers import propagation_unread

from .inference_calls import count_inference_passes

vi = helper.make_tensor_value_info
REPO = Path(__file__).resolve().parent.parent


def _ints(values: list[int] | int, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17, **kw) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    imports = [helper.make_opsetid("", opset), *kw.pop("more_opsets", [])]
    return helper.make_model(graph, opset_imports=imports, ir_version=10, **kw)


def _cast_chain(count: int = 60, length: int = 16) -> onnx.ModelProto:
    """The bench's Cast chain, small: every Cast propagates data, nothing reads it as a shape."""
    nodes = [
        helper.make_node("Cast", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}"], to=TensorProto.FLOAT)
        for i in range(count)
    ]
    nodes.append(helper.make_node("Gather", [f"c{count - 1}", "idx"], ["y"], axis=0))
    return _model(
        nodes, [vi("x", TensorProto.FLOAT, [length])], [vi("y", TensorProto.FLOAT, [3])],
        [_ints([0, 5, 7], "idx")], opset=13,
    )  # fmt: skip


def _shape_reshape() -> onnx.ModelProto:
    """Reshape(x, Concat(Shape(x)[0], [-1])): only propagation gives y its first dimension."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    return _model(
        nodes, [vi("x", TensorProto.FLOAT, [6, 2, 2])], [vi("y", TensorProto.FLOAT, None)],
        [_ints(0, "zero"), _ints([0], "axes"), _ints([-1], "minus1")],
    )  # fmt: skip


def _bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def test_cast_chain_does_not_propagate_and_equals_onnx(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _cast_chain()
    assert propagation_unread(model)
    calls = count_inference_passes(monkeypatch)
    ours = infer_with_data_prop(model)
    assert calls == [False]  # one pass, without data propagation
    assert _bytes(ours) == _bytes(onnx.shape_inference.infer_shapes(model, data_prop=True))


def test_shape_reader_still_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _shape_reshape()
    assert not propagation_unread(model)
    calls = count_inference_passes(monkeypatch)
    ours = infer_with_data_prop(model)
    assert True in calls
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert _bytes(ours) == _bytes(expected)
    # propagation matters here: without it y's first dimension is not 6
    dims = {v.name: v.type.tensor_type.shape.dim for v in ours.graph.output}["y"]
    assert [d.dim_value for d in dims] == [6, 4]
    plain = onnx.shape_inference.infer_shapes(model, data_prop=False)
    assert _bytes(plain) != _bytes(expected)


def _reader_node(op: str) -> tuple[onnx.ModelProto, str]:
    x = vi("x", TensorProto.FLOAT, [2, 3])
    if op == "Reshape":
        node = helper.make_node("Reshape", ["x", "s"], ["y"])
    elif op == "Expand":
        node = helper.make_node("Expand", ["x", "s"], ["y"])
    elif op == "ConstantOfShape":
        node = helper.make_node("ConstantOfShape", ["s"], ["y"])
    elif op == "Resize":
        node = helper.make_node("Resize", ["x", "", "", "s"], ["y"])
    else:  # AffineGrid(theta [N, 2, 3], size [N, C, H, W])
        node = helper.make_node("AffineGrid", ["x", "s"], ["y"])
    shape = helper.make_node("Shape", ["x"], ["s"])
    return _model([shape, node], [x], [vi("y", TensorProto.FLOAT, None)], opset=20), op


@pytest.mark.parametrize("op", sorted(prop_readers.SYMBOLIC_READERS))
def test_every_reader_op_keeps_propagation(op: str) -> None:
    model, _ = _reader_node(op)
    assert not propagation_unread(model)


def test_reader_inside_a_branch_keeps_propagation() -> None:
    then = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["t"])],
        "then", [], [vi("t", TensorProto.FLOAT, None)],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", TensorProto.FLOAT, None)]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = _model(
        [node], [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [2, 3])],
        [vi("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    assert not propagation_unread(model)
    # the same If without the reader: nothing reads the data
    del then.node[1]
    then.node.append(helper.make_node("Identity", ["x"], ["t"]))
    model.graph.node[0].CopyFrom(helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other))
    assert propagation_unread(model)


def test_bodies_given_the_table_keep_propagation() -> None:
    # a model-local function: onnx infers its body with the propagated data
    fn = helper.make_function("local", "Ident", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
                              [helper.make_opsetid("", 17)])  # fmt: skip
    model = _model(
        [helper.make_node("Ident", ["x"], ["y"], domain="local")], [vi("x", TensorProto.FLOAT, [3])],
        [vi("y", TensorProto.FLOAT, None)], functions=[fn], more_opsets=[helper.make_opsetid("local", 1)],
    )  # fmt: skip
    assert not propagation_unread(model)
    # an onnx function op without an inference function of its own (GreaterOrEqual-12: its body is inferred)
    schema = onnx.defs.get_schema("GreaterOrEqual", 12)
    assert not schema.has_type_and_shape_inference_function
    model = _model(
        [helper.make_node("GreaterOrEqual", ["x", "x"], ["y"])], [vi("x", TensorProto.FLOAT, [3])],
        [vi("y", TensorProto.BOOL, None)], opset=12,
    )  # fmt: skip
    assert not propagation_unread(model)


def test_unknown_custom_op_is_no_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT64),
             helper.make_node("Mystery", ["c"], ["y"], domain="com.example")]  # fmt: skip
    model = _model(
        nodes, [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, None)],
        more_opsets=[helper.make_opsetid("com.example", 1)],
    )  # fmt: skip
    assert propagation_unread(model)
    calls = count_inference_passes(monkeypatch)
    ours = infer_with_data_prop(model)
    assert calls == [False]
    assert _bytes(ours) == _bytes(onnx.shape_inference.infer_shapes(model, data_prop=True))


def test_strict_mode_still_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    # a propagation function's failure is an error onnx raises only in strict mode: propagate there
    calls = count_inference_passes(monkeypatch)
    infer_with_data_prop(_cast_chain(3), strict_mode=True)
    assert calls and calls[-1] is True


def test_corpus_models_without_readers_infer_as_onnx_does() -> None:
    """On every model of ``onnx_models/`` the predicate passes, onnx's two passes agree byte for byte."""
    checked = 0
    for path in sorted((REPO / "onnx_models").rglob("*.onnx")):
        model = onnx.load(path, load_external_data=False)
        if not propagation_unread(model):
            continue
        data = model.SerializeToString()
        with_prop = onnx.shape_inference.infer_shapes(data, data_prop=True)
        without = onnx.shape_inference.infer_shapes(data, data_prop=False)
        assert with_prop == without, path
        checked += 1
    assert checked >= 10


def _inspect_json(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["inspect", "--json", "-q", str(path)])
    return code, out.getvalue()


def test_inspect_reports_the_same_without_propagation(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "cast_chain.onnx"
    onnx.save(_cast_chain(200), path)
    code, skipped = _inspect_json(path)
    calls = count_inference_passes(monkeypatch)
    monkeypatch.setattr(data_prop, "propagation_unread", lambda model, *_: False)  # the bounded propagation
    code_full, full = _inspect_json(path)
    assert True in calls  # the comparison did propagate
    assert (code, skipped) == (code_full, full)
    assert json.loads(skipped)["nodes"]
