"""``inspect --inputs``'s run reads the model's large weights from its files, never serialized.

On a 548 MB Llama-style decoder step (dynamo export, external data) the run loaded the model whole,
serialized it for the session and let onnxruntime parse the bytes: 2.2 GB peak and 7 s, where
onnxruntime alone takes 581 MB. The session now holds the weights as references to the model's files
(as the run engines' and export's sessions do). Here a small model of the same structure: an embedding
Gather on a weight, a MatMul on another and a GatherND whose index depth only a run tells, with its
weights inline or in an external-data file; the shapes come from onnxruntime CPU's own run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

import dmlshim.cli.inspect_run as inspect_run
from dmlshim.cli.main import main

VOCAB, HIDDEN = 512, 64  # each weight 128 KiB: above the 64 KiB from which weights are shared
WEIGHT_BYTES = VOCAB * HIDDEN * 4


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(52)
    embed = nh.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "embed")
    proj = nh.from_array(rng.standard_normal((HIDDEN, HIDDEN * 8)).astype(np.float32), "proj")
    consts = [nh.from_array(np.array(v, np.int64), n) for n, v in (("one", 1), ("axis0", [0]))]
    nodes = [
        oh.make_node("Gather", ["embed", "input_ids"], ["hidden"], name="embedding"),
        oh.make_node("MatMul", ["hidden", "proj"], ["wide"], name="proj"),
        # the index depth is computed from a shape: static inference cannot tell GatherND's operator
        oh.make_node("Shape", ["input_ids"], ["ids_shape"]),
        oh.make_node("Size", ["ids_shape"], ["rank"]),
        oh.make_node("Sub", ["rank", "one"], ["depth"]),
        oh.make_node("Unsqueeze", ["depth", "axis0"], ["depth_1d"]),
        oh.make_node("Shape", ["rows"], ["rows_shape"]),
        oh.make_node("Concat", ["rows_shape", "depth_1d"], ["indices_shape"], axis=0),
        oh.make_node("Reshape", ["rows", "indices_shape"], ["indices"]),
        oh.make_node("GatherND", ["wide", "indices"], ["picked"], batch_dims=1, name="pick"),
    ]
    graph = oh.make_graph(
        nodes,
        "decoder_like",
        [
            oh.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"]),
            oh.make_tensor_value_info("rows", T.INT64, ["batch", "n"]),
        ],
        [oh.make_tensor_value_info("picked", T.FLOAT, None)],
        [embed, proj, *consts],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_inspect_run_holds_no_weight_bytes(
    external: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "decoder_like.onnx"
    onnx.save(_model(), str(path), save_as_external_data=external, location="decoder_like.onnx.data")
    feeds = {"input_ids": np.array([[3, 500, 7], [9, 0, 511]]), "rows": np.array([[2, 0], [1, 1]])}
    npz = tmp_path / "in.npz"
    np.savez(npz, **feeds)
    files = sorted(p.name for p in tmp_path.iterdir())
    payloads: list[int] = []
    built = inspect_run._session

    def recording(payload: bytes, options: object) -> object:
        payloads.append(len(payload))
        return built(payload, options)

    monkeypatch.setattr(inspect_run, "_session", recording)
    code = main(["inspect", str(path), "--inputs", str(npz), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert len(payloads) == 1 and payloads[0] < WEIGHT_BYTES // 4  # two weights of 128 KiB: none sent
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert code == 0 and doc["run"]["error"] is None
    assert sorted(doc["run"]["nodes_at_run_shapes"]) == ["embedding", "pick"]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    (want,) = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert nodes["pick"]["shapes"] == "run" and nodes["pick"]["status"] == "dml"
    assert nodes["pick"]["plan"]["output"]["sizes"] == list(want.shape) == [2, 2, HIDDEN * 8]
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # nothing written beside the model
