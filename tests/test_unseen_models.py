"""Differences found by binding dmlshim in place of onnxruntime on models nobody on the team wrote (exports
of transformers, jax2onnx and hand-written edge cases), each reduced to the smallest graph that shows it.
Expected values come from onnxruntime's CPU provider, single-threaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import dmlshim
from dmlshim.cli.main import main
from tests.oracle import IR_VERSION, ort_session


def _vi(name: str, elem: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _passthrough_model() -> onnx.ModelProto:
    """A graph input that is also a graph output declared with a type only (no shape), as some converters
    write it, read by a Gather: its shape [4,3] comes from the input's declaration."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="take_rows")],
        "passthrough",
        [_vi("x", T.FLOAT, [4, 3]), _vi("i", T.INT64, [3])],
        [_vi("x", T.FLOAT, None), _vi("g", T.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_input_echoed_as_shapeless_output_keeps_its_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect reported the Gather SHAPE_UNKNOWN (exit 1): the output's shapeless declaration replaced the
    input's [4,3]."""
    path = tmp_path / "passthrough.onnx"
    onnx.save(_passthrough_model(), str(path))
    assert main(["inspect", str(path), "--json"]) == 0
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert node["status"] == "dml" and node["operator"]["type"] == "DML_OPERATOR_GATHER"
    assert node["operator"]["desc"]["InputTensor"]["Sizes"] == [4, 3]
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([3, -1, 0])}
    expected = ort_session(str(path)).run(None, feeds)
    session = dmlshim.InferenceSession(str(path))
    got = session.run(None, feeds)
    record = session.last_run_record
    assert record is not None and [n.placement for n in record.nodes] == ["dml"]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.tobytes() == e.tobytes()


def _self_model(op: str, shape: list[int | str]) -> onnx.ModelProto:
    """One node reading the same tensor in several inputs (a gather of a tensor by itself)."""
    ins = ["i", "i", "i"] if op == "ScatterElements" else ["i", "i"]
    graph = helper.make_graph(
        [helper.make_node(op, ins, ["y"], name="self_read")],
        "self_read",
        [_vi("i", T.INT64, shape)],  # type: ignore[arg-type]
        [_vi("y", T.INT64, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


@pytest.mark.parametrize(
    ("op", "shape", "value", "level"),
    [
        # int64 data below 4_1 moves as UINT32 pairs; at 1_0 the node runs on onnxruntime at run time
        ("ScatterElements", [4], [2, 1, 0, 3], "1_0"),
        # an empty tensor (known only at run time) sends the node to onnxruntime CPU at the default level
        ("Gather", ["n"], [], "5_0"),
        ("GatherElements", ["n"], [], "5_0"),
    ],
)
def test_node_reading_one_tensor_twice_falls_back(
    op: str, shape: list[int | str], value: list[int], level: str, tmp_path: Path
) -> None:
    """The run-time fallback built a one-node model declaring the tensor once per use, which onnxruntime
    refuses ("Duplicate definition-site"): dmlshim raised BadModelError on a model onnxruntime runs."""
    path = tmp_path / f"{op}.onnx"
    onnx.save(_self_model(op, shape), str(path))
    feeds = {"i": np.array(value, dtype=np.int64)}
    (expected,) = ort_session(str(path)).run(None, feeds)
    session = dmlshim.InferenceSession(str(path), feature_level=level)
    (got,) = session.run(None, feeds)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got, expected)
    record = session.last_run_record
    assert record is not None and [n.placement for n in record.nodes] == ["onnxruntime-cpu"]


def _branch(op: str, source: str, out: str, shape: list[int], *extra: str) -> onnx.GraphProto:
    return helper.make_graph(
        [helper.make_node(op, [source, *extra], [out])], out, [], [_vi(out, T.FLOAT, shape)]
    )


def _stale_if_model() -> onnx.ModelProto:
    """TorchScript's scatter_reduce export in miniature: Ifs (``flatten when empty``) whose branches
    declare the flattened shape while the else branch yields the data as it is. onnxruntime runs it
    optimised (stale shapes are merged leniently) and fails with optimisations disabled (the second If
    pre-allocates its output with the stale shape)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Size", ["s"], ["n"]),
        helper.make_node("Equal", ["n", "zero"], ["c"]),
        helper.make_node(
            "If",
            ["c"],
            ["a"],
            then_branch=_branch("Reshape", "x", "a_then", [12], "minus_one"),
            else_branch=_branch("Identity", "x", "a_else", [12]),
            name="flatten_if_empty",
        ),
        helper.make_node("Gather", ["a", "i"], ["g"], axis=0, name="take_rows"),
        helper.make_node(
            "If",
            ["c"],
            ["y"],
            then_branch=_branch("Identity", "g", "y_then", [4]),
            else_branch=_branch("Identity", "g", "y_else", [4]),
            name="maybe_flat",
        ),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
    ]
    graph = helper.make_graph(
        nodes,
        "stale_if",
        [_vi("x", T.FLOAT, [4, 3]), _vi("i", T.INT64, [4])],
        [_vi("y", T.FLOAT, [4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


def test_validate_says_when_only_optimised_onnxruntime_runs_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "stale_if.onnx"
    onnx.save(_stale_if_model(), str(path))
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([3, 0, -1, 1])}
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=feeds["x"], i=feeds["i"])
    (expected,) = ort_session(str(path)).run(None, feeds)  # onnxruntime's default level runs it
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    # onnxruntime's words differ by version (1.32: a pre-allocated output; 1.24: a shape verification)
    with pytest.raises(Exception, match="maybe_flat"):
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    # asked for disabled, validate fails as onnxruntime does, and says which level runs the model
    assert main(["validate", str(path), "--inputs", str(inputs), "--optimization-level", "disabled"]) == 2
    err = capsys.readouterr().err
    assert "maybe_flat" in err and "pass --optimization-level all" in err
    assert main(["validate", str(path), "--inputs", str(inputs), "--optimization-level", "all"]) == 0
    # unasked, it runs at onnxruntime's default level, says why, and compares bit for bit
    capsys.readouterr()
    assert main(["validate", str(path), "--inputs", str(inputs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["optimization_levels"] == dict.fromkeys(("dmlshim", "reference", "whole_model"), "all")
    assert "fails this model with graph optimizations disabled" in doc["optimization_level_reason"]
    assert doc["exact"] and doc["match"]
    (out,) = doc["outputs"]
    assert out["whole_model"]["identical"]
    (got,) = dmlshim.InferenceSession(str(path)).run(None, feeds)
    assert got.shape == expected.shape == (4, 3) and got.tobytes() == expected.tobytes()


def test_validate_generates_string_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Gather of strings (onnxruntime takes tensor(string) feeds): validate without --inputs refused it
    ("cannot generate input 'words' of type STRING")."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["words", "i"], ["picked"], axis=0, name="pick")],
        "strings",
        [_vi("words", T.STRING, [5]), _vi("i", T.INT64, [3])],
        [_vi("picked", T.STRING, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    path = tmp_path / "strings.onnx"
    onnx.save(model, str(path))
    assert main(["validate", str(path), "--json"]) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert [o["match"] for o in report["outputs"]] == [True]
    from dmlshim.inputs import generate

    feeds = generate(model, seed=3).feeds
    assert feeds["words"].dtype == object and all(isinstance(w, str) for w in feeds["words"])
    (expected,) = ort_session(str(path)).run(None, feeds)
    (got,) = dmlshim.InferenceSession(str(path)).run(None, feeds)
    assert got.tolist() == expected.tolist()


def _qdq_pool_gather_model() -> onnx.ModelProto:
    """Funnel-transformer's pooling after onnxruntime's quantize_static (QDQ), in miniature:
    DQ -> AveragePool(ceil_mode) -> Q -> DQ -> Gather -> Q -> DQ. At onnxruntime's default level (all) the
    Q/DQ pairs are fused away (a quantized pool, an int8 gather); with the gather's input fetched as an
    extra output (dmlshim's whole-model check) they are not, and the float path gives other values."""
    inits = [
        onnx.numpy_helper.from_array(np.array(0.020809468, dtype=np.float32), "s"),
        onnx.numpy_helper.from_array(np.array(-8, dtype=np.int8), "z"),
        onnx.numpy_helper.from_array(np.array(0, dtype=np.int64), "first"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xdq"]),
        helper.make_node(
            "AveragePool",
            ["xdq"],
            ["ap"],
            kernel_shape=[2, 1],
            strides=[2, 1],
            ceil_mode=1,
            count_include_pad=1,
        ),
        helper.make_node("QuantizeLinear", ["ap", "s", "z"], ["apq"]),
        helper.make_node("DequantizeLinear", ["apq", "s", "z"], ["apdq"]),
        helper.make_node("Gather", ["apdq", "first"], ["g"], axis=1, name="take_first"),
        helper.make_node("QuantizeLinear", ["g", "s", "z"], ["gq"]),
        helper.make_node("DequantizeLinear", ["gq", "s", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq_pool", [_vi("x", T.FLOAT, [2, 1, 7, 32])], [_vi("y", T.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=IR_VERSION)


def test_qdq_fusions_around_a_gather_match_onnxruntime(tmp_path: Path) -> None:
    path = tmp_path / "qdq_pool.onnx"
    onnx.save(_qdq_pool_gather_model(), str(path))
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 1, 7, 32)).astype(np.float32)}
    (expected,) = ort_session(str(path)).run(None, feeds)  # onnxruntime's default level: all
    session = dmlshim.InferenceSession(str(path))
    for _ in range(2):
        (got,) = session.run(None, feeds)
        assert got.tobytes() == expected.tobytes()
    # The gather between Q/DQ pairs is taken from onnxruntime (its constant index proved in range on the
    # run): fetching its input or output would stop the QDQ fusions.
    (node,) = session.last_run_record.nodes
    assert session.last_run_record.path == "whole-model check"
    assert node.operator == "DML_OPERATOR_GATHER"
    assert [c for c, _ in node.notes] == ["output_from_onnxruntime"]


def test_run_writes_string_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run -o` left a tensor(string) output out of the .npz ("an .npz holds arrays only"): it is stored
    as a numpy text array now, and a text array read with --inputs is the string input it was."""
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["words", "i"], ["picked"], axis=1, name="pick")],
        "strings",
        [_vi("words", T.STRING, [2, 3]), _vi("i", T.INT64, [2, 2])],
        [_vi("picked", T.STRING, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)
    path = tmp_path / "strings.onnx"
    onnx.save(model, str(path))
    words = np.array([["the", "quick", "fox"], ["jumps", "over", "dogs"]])
    index = np.array([[2, -3], [1, 1]])
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, words=words, i=index)
    assert main(["run", str(path), "--inputs", str(inputs), "-o", str(out)]) == 0, capsys.readouterr().err
    assert "leaves out" not in capsys.readouterr().err
    (expected,) = ort_session(str(path)).run(None, {"words": words.astype(object), "i": index})
    with np.load(out) as stored:
        assert stored["picked"].tolist() == expected.tolist() == [["fox", "the"], ["over", "over"]]


def _dynamic_slice_take_model() -> onnx.ModelProto:
    """jax2onnx's ``x[i]`` for a traced scalar ``i``: the negative-index wrap, then Slice(x, i, i + 1) and
    Squeeze (an empty slice, from a start past the end, makes the Squeeze fail)."""
    inits = [
        onnx.numpy_helper.from_array(np.array(0, dtype=np.int32), "zero"),
        onnx.numpy_helper.from_array(np.array(7, dtype=np.int32), "n"),
        onnx.numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
        onnx.numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Less", ["i", "zero"], ["neg"]),
        helper.make_node("Add", ["i", "n"], ["wrapped"]),
        helper.make_node("Where", ["neg", "wrapped", "i"], ["j"]),
        helper.make_node("Cast", ["j"], ["j64"], to=T.INT64),
        helper.make_node("Unsqueeze", ["j64", "axis0"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end", "axis0"], ["piece"], name="dynamic_slice"),
        helper.make_node("Squeeze", ["piece", "axis0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "take", [_vi("x", T.FLOAT, [7]), _vi("i", T.INT32, [])], [_vi("y", T.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def test_generated_start_of_a_dynamic_slice_stays_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """validate without --inputs drew the scalar index 0..7 for a dimension of 7: onnxruntime's Squeeze
    then refused the empty slice (exit 2)."""
    from dmlshim.inputs import generate

    model = _dynamic_slice_take_model()
    path = tmp_path / "take.onnx"
    onnx.save(model, str(path))
    session = ort_session(str(path))
    for seed in range(8):
        feeds = generate(model, seed=seed).feeds
        assert -7 <= int(feeds["i"]) < 7, (seed, feeds["i"])
        (value,) = session.run(None, feeds)  # onnxruntime accepts the generated input
        assert value.shape == ()
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
