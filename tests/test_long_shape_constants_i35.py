"""Issue 35 part 3: a Reshape, Expand or ConstantOfShape whose shape is a long constant (an initializer of
2^20 int64 elements, 8 MiB: a real size, above the 64 KiB from which weights are left out of the
weightless copy).

- The weightless copy that the model check and shape inference give onnx declares that constant of
  unknown length: given only its static length, onnx before 1.23 makes the output a tensor of rank 2^20
  (one protobuf dimension per element, copied at every pass: 10 s and 616 MB for ``inspect`` on onnx
  1.20, against 0.7 s and 290 MB for onnxruntime's session). onnx 1.23 bounds that itself at rank 1024,
  so the tests look at what onnx is given, which holds on every onnx.
- Sessions get the constant inline: onnxruntime's type inference cannot read a value from external data
  or from ``add_external_initializers`` ("Cannot parse data from external tensors"), so ``run`` and
  ``validate`` refused at session creation a model whose onnxruntime session builds.

Expected values: onnxruntime's own session and run on the same file, and the model's declared sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from bench.peak import ORT_SESSION, dmlshim, measure, python
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim as shim
from dmlshim.model.data_prop import MAX_RANK
from dmlshim.model.weightless import SHAPE_SLOTS, UNKNOWN_LENGTH, read_by_value, without_weights
from tests.oracle import IR_VERSION

LONG = 1 << 20


def _model(op: str, length: int = LONG) -> onnx.ModelProto:
    """``op`` reading the constant ``shape`` (``length`` ones) as its shape; a Gather beside it."""
    shape = numpy_helper.from_array(np.ones(length, np.int64), "shape")
    inputs = ["shape"] if op == "ConstantOfShape" else ["x", "shape"]
    nodes = [
        helper.make_node(op, inputs, ["r"], name="long_shape"),
        helper.make_node("Gather", ["w", "i"], ["g"], name="gather", axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "long_shape",
        [helper.make_tensor_value_info("x", T.FLOAT, [1]), helper.make_tensor_value_info("i", T.INT64, [2])],
        [
            helper.make_tensor_value_info("r", T.FLOAT, None),
            helper.make_tensor_value_info("g", T.FLOAT, [2, 4]),
        ],
        [shape, numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


def _saved(tmp_path: Path, op: str) -> Path:
    path = tmp_path / f"{op}.onnx"
    onnx.save(_model(op), path)
    return path


def _shape_lengths(model: onnx.ModelProto) -> list[int]:
    """The static lengths onnx is told (with no values: an initializer's values it reads, and the byte
    bound covers those) of the values the model's nodes read as a shape."""
    declared = {
        v.name: v.type.tensor_type.shape.dim
        for v in (*model.graph.input, *model.graph.value_info)
        if v.type.tensor_type.HasField("shape")
    }
    lengths = []
    for node in model.graph.node:
        slot = SHAPE_SLOTS.get(node.op_type)
        dims = declared.get(node.input[slot]) if slot is not None and slot < len(node.input) else None
        if dims is not None and len(dims) == 1 and dims[0].HasField("dim_value"):
            lengths.append(int(dims[0].dim_value))
    return lengths


@pytest.mark.parametrize("op", sorted(SHAPE_SLOTS))
def test_the_weightless_copy_declares_a_long_shape_constant_of_unknown_length(op: str) -> None:
    light = without_weights(_model(op))
    declared = {v.name: v.type.tensor_type for v in light.graph.input}
    assert "shape" not in {t.name for t in light.graph.initializer}  # its 8 MiB are not in the copy
    assert [d.dim_param for d in declared["shape"].shape.dim] == [UNKNOWN_LENGTH]
    assert declared["shape"].elem_type == T.INT64
    assert light.ByteSize() < 4096


def test_a_long_constant_read_otherwise_keeps_its_length() -> None:
    """A 2^20-element table a Gather reads (a flattened embedding) is no shape: its length stays."""
    table = numpy_helper.from_array(np.zeros(LONG, np.int64), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["g"], axis=0)],
        "table",
        [helper.make_tensor_value_info("i", T.INT64, [2])],
        [helper.make_tensor_value_info("g", T.INT64, [2])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    light = without_weights(model)
    (declared,) = [v for v in light.graph.input if v.name == "table"]
    assert [d.dim_value for d in declared.type.tensor_type.shape.dim] == [LONG]
    assert read_by_value(model.graph, model.graph.initializer) == frozenset()


@pytest.mark.parametrize("op", sorted(SHAPE_SLOTS))
def test_inspect_gives_onnx_no_long_shape_and_no_weight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], op: str
) -> None:
    """Every model onnx's shape inference gets during ``inspect`` (the model check's pass and the data
    propagation passes): no shape input of a static length over MAX_RANK, and not the constant's bytes."""
    from dmlshim.cli.main import main as cli

    given: list[onnx.ModelProto] = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):  # onnx takes a ModelProto or its bytes
        given.append(onnx.ModelProto.FromString(model) if isinstance(model, bytes) else model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    assert cli(["inspect", str(_saved(tmp_path, op)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(n["name"], n["status"]) for n in doc["nodes"]] == [("gather", "dml")]
    assert given, "shape inference was not asked"
    for model in given:
        assert all(n <= MAX_RANK for n in _shape_lengths(model)), _shape_lengths(model)
        assert model.ByteSize() < 64 * 1024


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
@pytest.mark.parametrize("op", sorted(SHAPE_SLOTS))
def test_a_session_builds_where_onnxruntimes_does_and_fails_its_run_as_it_does(
    tmp_path: Path, op: str, engine: str
) -> None:
    """onnxruntime builds the session (the constant inline) and refuses the run (no tensor of rank 2^20):
    dmlshim refused the session instead ("Cannot parse data from external tensors")."""
    path = _saved(tmp_path, op)
    feeds = {"x": np.ones(1, np.float32), "i": np.array([0, 7])}
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as expected:  # onnxruntime's exception types share no useful base
        theirs.run(None, feeds)
    ours = shim.InferenceSession(str(path), engine=engine)
    with pytest.raises(Exception) as got:
        ours.run(None, feeds)
    assert str(expected.value) in str(got.value)
    assert "external" not in str(got.value)


def test_inspect_costs_what_onnxruntimes_session_costs(tmp_path: Path) -> None:
    """Peak memory in a subprocess: at most twice onnxruntime's own session creation on the same file
    (before, on onnx 1.20: 616 MB against 290 MB, and 10 s against 0.7 s)."""
    path = _saved(tmp_path, "Reshape")
    theirs = measure(python(ORT_SESSION, str(path)))
    ours = measure(dmlshim("inspect", "--json", str(path)), {"DMLSHIM_MEMORY_LIMIT": "200000000"})
    assert theirs.code == 0, theirs.err
    assert ours.code == 0, ours.err
    assert ours.peak_bytes <= 2 * theirs.peak_bytes, (ours.peak_bytes, theirs.peak_bytes)


def test_reading_the_constant_for_a_session_honours_the_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under a limit below the constant's 8 MiB: the session is refused before the read, naming the step
    and the constant; inspect, which reads no weight, still answers."""
    from dmlshim.cli.main import main as cli
    from dmlshim.errors import TooLargeError

    path = _saved(tmp_path, "Reshape")
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(6_000_000))
    with pytest.raises(TooLargeError) as refused:
        shim.InferenceSession(str(path))
    assert "reading the constants onnxruntime's type inference reads (shape)" in str(refused.value)
    assert "8388608 bytes" in str(refused.value)
    assert cli(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"][0]["status"] == "dml"
