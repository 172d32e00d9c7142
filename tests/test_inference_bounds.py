"""Issue 35 part 3: shape inference's memory is bounded by the model, not by an initializer's element count.

Peak memory is measured in a subprocess (``bench/peak.py``: ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a
small wrapper's only child) against onnxruntime's own peak on the same model, measured in the same test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from bench.inference_memory import TABLE_ELEMENTS, flat_table_model, gnn_edges_model
from bench.peak import ORT_RUN, ORT_SESSION, dmlshim, measure, python
from onnx import TensorProto, helper, numpy_helper

from dmlshim.model.data_prop import DATA_MAX_ELEMENTS, infer_with_data_prop
from dmlshim.translate import infer_shapes

vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    out = {}
    for v in (*model.graph.value_info, *model.graph.output):
        if v.type.tensor_type.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                           for d in v.type.tensor_type.shape.dim]  # fmt: skip
    return out


def _ints(values, name):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


# -- exactness: small shape values propagate as onnx propagates them --------------------------------------


def _shape_arithmetic() -> onnx.ModelProto:
    """Reshape(x, [Shape(x)[0], -1]) then Expand by a Concat of Shape pieces: data propagation gives the
    batch symbol and the sizes; without it onnx knows the ranks only."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Slice", ["s", "one", "three"], ["tail"]),
        helper.make_node("Mul", ["tail", "two"], ["tail2"]),
        helper.make_node("Concat", ["b1", "tail2"], ["big"], axis=0),
        helper.make_node("Expand", ["y", "big"], ["e"]),
        helper.make_node("Gather", ["flat", "idx"], ["g"], axis=1),
    ]
    inits = [_ints(0, "zero"), _ints([0], "axes0"), _ints([-1], "minus1"), _ints([1], "one"),
             _ints([3], "three"), _ints([2], "two"), _ints([0, 2], "idx")]  # fmt: skip
    return _model(
        nodes,
        [vi("x", TensorProto.FLOAT, ["batch", 4, 6]), vi("y", TensorProto.FLOAT, [1, 1, 1])],
        [vi("g", TensorProto.FLOAT, None), vi("e", TensorProto.FLOAT, None)],
        inits,
    )


def test_small_values_propagate_exactly_as_onnx_propagates_them():
    model = _shape_arithmetic()
    ours = infer_with_data_prop(model)
    theirs = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert ours.SerializeToString() == theirs.SerializeToString()
    # the batch symbol and the sizes come from the data of the shape computation
    assert _shapes(ours)["flat"][0] == "batch"
    assert _shapes(ours)["e"] == ["batch", 8, 12]
    plain = onnx.shape_inference.infer_shapes(model)
    assert _shapes(plain)["flat"][0] != "batch"


def test_gbdt_style_tables_within_the_bound_keep_onnx_result():
    """1-D tables of 108 elements (hummingbird's tree traversal) are small: no cut, onnx's exact output."""
    table = numpy_helper.from_array(np.arange(108, dtype=np.int64), "lefts")
    nodes = [helper.make_node("Gather", ["lefts", "i"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["f"], to=TensorProto.FLOAT)]  # fmt: skip
    model = _model(nodes, [vi("i", TensorProto.INT64, ["rows"])], [vi("f", TensorProto.FLOAT, None)], [table])
    assert DATA_MAX_ELEMENTS >= 108
    ours = infer_with_data_prop(model)
    assert (
        ours.SerializeToString()
        == onnx.shape_inference.infer_shapes(model, data_prop=True).SerializeToString()
    )


# -- large values: cut, types kept ------------------------------------------------------------------------


def test_large_one_dimensional_values_keep_their_types_without_their_data():
    n = 1 << 24
    nodes = [
        helper.make_node("Gather", ["t", "i"], ["g"], axis=0),
        helper.make_node("Cast", ["t"], ["c"], to=TensorProto.INT64),
        helper.make_node("Concat", ["c", "c"], ["cc"], axis=0),
        helper.make_node("Slice", ["cc", "zero1", "three"], ["head"]),
        helper.make_node("Reshape", ["y", "head"], ["r"]),
    ]
    model = _model(
        nodes,
        [
            vi("t", TensorProto.FLOAT, [n]),
            vi("i", TensorProto.INT64, ["k"]),
            vi("y", TensorProto.FLOAT, [2, 3]),
        ],
        [vi("g", TensorProto.FLOAT, None), vi("r", TensorProto.FLOAT, None)],
        [_ints([0], "zero1"), _ints([3], "three")],
    )
    shapes = _shapes(infer_with_data_prop(model))
    assert shapes["g"] == ["k"]
    assert shapes["c"] == [n]
    assert shapes["cc"] == [2 * n]
    assert shapes["head"] == [3]
    assert len(shapes["r"]) == 3  # rank from the shape tensor's length; its values are not propagated


@pytest.mark.skipif(
    tuple(int(p) for p in onnx.__version__.split(".")[:2]) < (1, 23),
    reason="onnx before 1.23 (1.20, the floor, too) gives Reshape the rank of any static-length shape input "
    "in its own inference, without data propagation, and onnxruntime 1.24.4 reports that rank too; onnx 1.23 "
    "bounds it at 1024",
)
def test_rank_from_a_long_shape_tensor_is_not_materialized():
    """A shape tensor of 5000 elements: no rank-5000 type is built (onnx 1.23 draws the line at 1024)."""
    model = _model(
        [helper.make_node("Reshape", ["x", "s"], ["r"])],
        [vi("x", TensorProto.FLOAT, [4]), vi("s", TensorProto.INT64, [5000])],
        [vi("r", TensorProto.FLOAT, None)],
    )
    inferred = infer_shapes(model)
    assert all(len(dims) < 5000 for dims in _shapes(inferred).values())


def test_rank_from_a_long_shape_tensor_is_the_rank_onnxruntime_reports():
    """Whatever the onnx: the Reshape output's rank is the one onnxruntime's own session reports for it
    (5000 on onnx 1.20 with onnxruntime 1.24.4; unknown on onnx 1.23 with onnxruntime 1.32)."""
    import onnxruntime as ort

    model = _model(
        [helper.make_node("Reshape", ["x", "s"], ["r"])],
        [vi("x", TensorProto.FLOAT, [4]), vi("s", TensorProto.INT64, [5000])],
        [vi("r", TensorProto.FLOAT, None)],
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert len(_shapes(infer_shapes(model)).get("r", [])) == len(session.get_outputs()[0].shape)


def test_length_only_propagation_reveals_is_cut_in_the_pass_that_reveals_it(tmp_path: Path):
    """Reshape(y, Shape(x)) is 1-D of 2^26 elements only once data propagates; a Cast then reads it.
    onnx alone builds 2^26 dimensions (9 GB); bounded, the inference costs what it costs without data."""
    n = 1 << 26
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["y", "s"], ["r"]),
        helper.make_node("Cast", ["r"], ["c"], to=TensorProto.INT64),
        helper.make_node("Gather", ["c", "i"], ["o"], axis=0),
    ]
    model = _model(
        nodes,
        [vi("x", TensorProto.FLOAT, [n]), vi("y", TensorProto.FLOAT, [n]), vi("i", TensorProto.INT64, [3])],
        [vi("o", TensorProto.INT64, None)],
    )
    path = tmp_path / "revealed.onnx"
    onnx.save(model, path)
    code = (
        "import sys, onnx\n"
        "from dmlshim.model.data_prop import infer_with_data_prop\n"
        "m = onnx.load(sys.argv[1])\n"
        "r = infer_with_data_prop(m) if sys.argv[2] == 'bounded' else onnx.shape_inference.infer_shapes(m)\n"
        "values = (*r.graph.value_info, *r.graph.output)\n"
        "print({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values})\n"
    )
    bounded = measure(python(code, str(path), "bounded"))
    plain = measure(python(code, str(path), "plain"))  # onnx without data propagation: the reference cost
    assert bounded.code == 0, bounded.err
    assert "'r': [67108864]" in bounded.out and "'c': [67108864]" in bounded.out and "'o': [3]" in bounded.out
    assert bounded.peak_bytes <= 1.5 * plain.peak_bytes, (bounded.peak_bytes, plain.peak_bytes)


# -- real sizes, against onnxruntime ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def flat_table(tmp_path_factory) -> Path:
    return flat_table_model(tmp_path_factory.mktemp("flat_table"))


def test_inspect_of_a_1gib_flattened_table_costs_what_onnxruntime_costs(flat_table: Path):
    """Before: 21 GB and 41 s (onnx built one dimension per table element). The bound is onnxruntime's
    own peak for the same model, doubled (dmlshim also imports onnx)."""
    ort = measure(python(ORT_SESSION, str(flat_table)))
    ours = measure(dmlshim("inspect", "--json", str(flat_table)), {"DMLSHIM_MEMORY_LIMIT": "100000000"})
    assert ort.code == 0, ort.err
    assert ours.code == 0, ours.err
    doc = json.loads(ours.out)
    assert [n["status"] for n in doc["nodes"]] == ["dml"]
    assert ours.peak_bytes <= 2 * ort.peak_bytes, (ours.peak_bytes, ort.peak_bytes)


def test_validate_of_a_1gib_flattened_table_costs_what_onnxruntime_costs(flat_table: Path):
    feeds = {"idx": [[0, 5, TABLE_ELEMENTS - 1], "int64"]}
    ort = measure(python(ORT_RUN, str(flat_table), json.dumps(feeds)))
    ours = measure(dmlshim("validate", str(flat_table)), {"DMLSHIM_MEMORY_LIMIT": "100000000"})
    assert ort.code == 0, ort.err
    assert ours.code == 0, ours.out + ours.err
    assert "MATCH" in ours.out
    assert ours.peak_bytes <= 2 * ort.peak_bytes, (ours.peak_bytes, ort.peak_bytes)


def test_inspect_of_a_gnn_with_a_constant_edge_list_costs_what_onnxruntime_costs(tmp_path: Path):
    path = gnn_edges_model(tmp_path)
    ort = measure(python(ORT_SESSION, str(path)))
    ours = measure(dmlshim("inspect", "--json", str(path)))
    assert ours.code in (0, 1), ours.err
    ops = sorted(n["op_type"] for n in json.loads(ours.out)["nodes"])
    assert ops == ["Gather", "Gather", "Gather", "ScatterElements"]
    assert ours.peak_bytes <= 2 * ort.peak_bytes, (ours.peak_bytes, ort.peak_bytes)


def test_shape_inference_refuses_under_the_memory_limit_naming_itself(tmp_path: Path):
    """The limit is honoured by shape inference too: its graph copies are refused before inferring, with
    an error naming the step (exit 2, no traceback)."""
    from bench.inspect_scale import gather_chain

    model = gather_chain(2000)
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    limit = 2 * model.ByteSize()  # the graph fits, the three copies inference holds do not
    done = measure(dmlshim("inspect", str(path)), {"DMLSHIM_MEMORY_LIMIT": str(limit)})
    assert done.code == 2, done.out + done.err
    assert "shape inference (3 copies of the" in done.err and "DMLSHIM_MEMORY_LIMIT" in done.err
    assert "Traceback" not in done.err
