"""dmlshim.graph.constant_node_value: every Constant form against onnxruntime CPU's output of that node."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.external_data_helper
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from dmlshim.graph import constant_node_shape, constant_node_value

SPARSE_LINEAR = helper.make_sparse_tensor(
    numpy_helper.from_array(np.array([1.5, -2.0, 7.0], np.float32), "v"),
    numpy_helper.from_array(np.array([1, 4, 10], np.int64), "i"),
    [3, 4],
)
SPARSE_COORDS = helper.make_sparse_tensor(
    numpy_helper.from_array(np.array([5, 9], np.int64), "v"),
    numpy_helper.from_array(np.array([[0, 2], [1, 0]], np.int64), "i"),
    [2, 3],
)

EMPTY_INTS = helper.make_attribute("value_ints", [], attr_type=AttributeProto.INTS)

FORMS = {
    "value_f32": {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)},
    "value_f16": {"value": numpy_helper.from_array(np.array([0.1, 65504.0], np.float16))},
    "value_i64_scalar": {"value": numpy_helper.from_array(np.array(-4, np.int64))},
    "value_bool": {"value": numpy_helper.from_array(np.array([True, False]))},
    "value_string_tensor": {"value": helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"\xc3\xa9"])},
    "sparse_linear": {"sparse_value": SPARSE_LINEAR},
    "sparse_coords": {"sparse_value": SPARSE_COORDS},
    "value_float": {"value_float": 0.1},
    "value_floats": {"value_floats": [1.0, -0.5, 3.25]},
    "value_int": {"value_int": 7},
    "value_ints": {"value_ints": [3, -1, 0]},
    "value_ints_empty": {"value_ints": EMPTY_INTS},
    "value_string": {"value_string": "héllo"},
    "value_strings": {"value_strings": ["a", "", "ü"]},
}


def _ort_output(attrs: dict[str, object]) -> tuple[onnx.NodeProto, np.ndarray]:
    node = helper.make_node("Constant", [], ["out"])
    for key, value in attrs.items():
        is_attr = isinstance(value, onnx.AttributeProto)
        node.attribute.append(value if is_attr else helper.make_attribute(key, value))  # type: ignore[arg-type]
    graph = helper.make_graph([node], "g", [], [helper.make_value_info("out", onnx.TypeProto())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (out,) = session._sess.run_with_ort_values({}, ["out"], None)
    if out.is_sparse_tensor():  # a sparse_value Constant gives a sparse tensor: its dense form, by hand
        sparse = out.as_sparse_tensor()
        dense = np.zeros(sparse.dense_shape(), dtype=sparse.values().dtype)
        indices = sparse.get_coo_data().indices()
        flat = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T, dense.shape)
        dense.reshape(-1)[flat] = sparse.values()
        return node, dense
    return node, session.run(None, {})[0]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_constant_value_matches_onnxruntime(form: str) -> None:
    node, want = _ort_output(FORMS[form])
    got = constant_node_value(node)
    assert got is not None
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert constant_node_shape(node) == want.shape


def test_sparse_values_land_where_onnxruntime_puts_them() -> None:
    _, want = _ort_output(FORMS["sparse_linear"])
    assert want[0, 1] == 1.5 and want[1, 0] == -2.0 and want[2, 2] == 7.0 and np.count_nonzero(want) == 3


def test_not_a_constant_or_unreadable() -> None:
    assert constant_node_value(helper.make_node("Identity", ["a"], ["b"])) is None
    assert constant_node_value(helper.make_node("Constant", [], ["c"], value_int=1, domain="custom")) is None
    two = helper.make_node("Constant", [], ["c"], value_int=1, value_float=2.0)
    assert constant_node_value(two) is None and constant_node_shape(two) is None
    external = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    onnx.external_data_helper.set_external_data(external, location="w.bin")
    external.ClearField("raw_data")
    node = helper.make_node("Constant", [], ["c"], value=external)
    assert constant_node_value(node) is None and constant_node_shape(node) == (4,)


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
def test_constant_forms_feeding_a_gather_run_as_onnxruntime_runs_them(engine: str) -> None:
    from dmlshim import InferenceSession
    from tests.oracle import IR_VERSION, ort_run

    nodes = [
        helper.make_node("Constant", [], ["idx"], value_ints=[2, 0, 2]),
        helper.make_node("Constant", [], ["scale"], value_float=0.5),
        helper.make_node("Constant", [], ["bias"], sparse_value=SPARSE_LINEAR),
        helper.make_node("Mul", ["x", "scale"], ["xs"]),
        helper.make_node("Add", ["xs", "bias"], ["xb"]),
        helper.make_node("Gather", ["xb", "idx"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "forms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = IR_VERSION
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    want = ort_run(model, feeds)[0]
    got = InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
