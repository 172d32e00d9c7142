"""A session's output description reuses the model check's shape inference (issue 36, item 1, sixth pass).

``typed_outputs`` (the graph outputs as ``get_outputs()`` reports them) ran onnx's inference without
data propagation on the whole model, the same pass the model check had just run on its weightless copy.
It now asks for the weightless copy's inference through ``dmlshim.model.last_inference``; these tests
hold it to the whole model's inference (the slow path, forced by patching) and to onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.shape_inference
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.weights import model_source
from dmlshim.model.weightless import without_weights

ROOT = Path(__file__).resolve().parent.parent
CORPUS = (
    "real/bert_dynamo.onnx",
    "real/bert_torchscript.onnx",
    "real/t5_torchscript.onnx",
    "real/gpt2_past_dynamo.onnx",
    "real/fasterrcnn_torchscript.onnx",
    "real/beam_search_step_torchscript.onnx",
    "ecosystem/hb_gbdt_tree_trav.onnx",
    "ecosystem/hw_noshape_inputs.onnx",
)


def _whole_model_inference(model: onnx.ModelProto, remember: bool = True) -> onnx.ModelProto:
    """The slow path: onnx's inference of the whole model, weights included, as before."""
    return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)


def _heavy_weight_model() -> onnx.ModelProto:
    """A MatMul by a 256 KB weight (left out of the weightless copy) on a batch of free size; the second
    output is declared without a type, the first with a symbolic batch only."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 128, 2], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Reshape", ["y", "shape"], ["r"]),
        helper.make_node("Gather", ["r", "i"], ["g"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "heavy",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [3]),
        ],
        [
            helper.make_tensor_value_info("g", TensorProto.FLOAT, ["batch", None, None]),
            helper.ValueInfoProto(name="y"),
        ],
        [weight, shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _described(model: onnx.ModelProto) -> list[bytes]:
    return [v.SerializeToString() for v in model_source.typed_outputs(model)]


@pytest.mark.parametrize("name", CORPUS)
def test_output_types_are_the_whole_models_inference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = onnx.load(str(ROOT / "onnx_models" / name))
    fast = _described(model)
    monkeypatch.setattr(model_source, "_inferred", _whole_model_inference)
    assert _described(model) == fast


def test_heavy_weights_left_out_change_no_output_type(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _heavy_weight_model()
    assert "w" in {v.name for v in without_weights(model).graph.input}  # the case this is about
    fast = model_source.typed_outputs(model)
    # the weight is a graph input of the weightless copy, never of the description
    assert "w" not in {v.name for v in fast}
    monkeypatch.setattr(model_source, "_inferred", _whole_model_inference)
    slow = model_source.typed_outputs(model)
    assert [v.SerializeToString() for v in fast] == [v.SerializeToString() for v in slow]


def test_session_outputs_are_onnxruntimes(tmp_path: Path) -> None:
    path = tmp_path / "heavy.onnx"
    onnx.save(_heavy_weight_model(), str(path))
    ours = dmlshim.InferenceSession(str(path)).get_outputs()
    theirs = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_outputs()
    assert [(o.name, o.type, o.shape) for o in ours] == [(o.name, o.type, o.shape) for o in theirs]
    assert ours[1].shape == ["batch", 256]  # from inference: the model declares no type for y


def _counted_passes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """onnx's inferences from now on: data_prop of each."""
    calls: list[bool] = []
    real = onnx.shape_inference.infer_shapes

    def counting(*args: object, **kwargs: object) -> onnx.ModelProto:
        calls.append(bool(kwargs.get("data_prop", False)))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    return calls


def test_a_session_build_runs_the_inference_without_data_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model check's pass answers the output description and data propagation's base alike."""
    calls = _counted_passes(monkeypatch)
    dmlshim.InferenceSession(str(ROOT / "onnx_models" / "real" / "bert_dynamo.onnx"))
    assert calls.count(False) == 1
    assert calls.count(True) >= 1


def test_free_dimension_overrides_are_described_and_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The description of a model whose inputs carry the caller's overrides is onnxruntime's answer, and
    does not displace the model check's remembered pass, which data propagation reuses."""
    path = tmp_path / "heavy.onnx"
    onnx.save(_heavy_weight_model(), str(path))

    def options() -> onnxruntime.SessionOptions:
        so = onnxruntime.SessionOptions()
        so.add_free_dimension_override_by_name("batch", 5)
        return so

    theirs = onnxruntime.InferenceSession(str(path), options(), providers=["CPUExecutionProvider"])
    calls = _counted_passes(monkeypatch)
    ours = dmlshim.InferenceSession(str(path), options())
    assert [(o.name, o.type, o.shape) for o in ours.get_outputs()] == [
        (o.name, o.type, o.shape) for o in theirs.get_outputs()
    ]
    assert ours.get_outputs()[1].shape == [5, 256]
    # the model check's only: onnxruntime itself answers for the overridden outputs (round 50), so no
    # overridden description is inferred
    assert calls.count(False) == 1
