"""Sessions of dmlshim's own that read the large weights from the model's files, never serialized.

* ``inspect --inputs``: on a 548 MB Llama-style decoder step (dynamo export, external data) its run loaded
  the model whole, serialized it for the session and let onnxruntime parse the bytes: 2.2 GB peak and 7 s,
  where onnxruntime alone takes 581 MB (now 624 MB, 1.7 s);
* generated inputs' trial session (``validate``/``run`` without ``--inputs``), whose values are never
  used: on RoBERTa-base (500 MB, weights inline) it parsed every weight out of the .onnx file and
  pre-packed the MatMul weights: 730 MB and 5.7 s for validate (now 457 MB, 2.8 s); on the Llama step the
  pre-packing alone cost ~1 s. It now builds no pre-packed copy.

Here small models of the same structure, weights inline or in an external-data file; shapes and accepted
sizes come from onnxruntime CPU itself.
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
import dmlshim.runtime.real as runtime_real
from dmlshim.cli.main import main
from dmlshim.execute.weights.model_source import load_model
from dmlshim.inputs import generate

VOCAB, HIDDEN = 512, 64  # each weight 128 KiB: above the 64 KiB from which weights are shared
WEIGHT_BYTES = VOCAB * HIDDEN * 4
BIG_VOCAB = 16400  # 4.2 MB


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


def _embedding_reshaped() -> onnx.ModelProto:
    """An embedding Gather, and a Reshape to rows of 3 that onnxruntime refuses at the default sizes
    (batch = seq = 2): the search must try other sizes on onnxruntime. The table (4.2 MB) makes a graph
    large enough to be read without its inline weights (``WALK_MIN_GRAPH_BYTES``)."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((BIG_VOCAB, HIDDEN)).astype(np.float32)
    embed = nh.from_array(table, "embed")
    rows = nh.from_array(np.array([-1, 3], np.int64), "rows_of_3")
    graph = oh.make_graph(
        [
            oh.make_node("Gather", ["embed", "input_ids"], ["hidden"], name="embedding"),
            oh.make_node("Reshape", ["input_ids", "rows_of_3"], ["triples"]),
        ],
        "embedding_reshaped",
        [oh.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"])],
        [
            oh.make_tensor_value_info("hidden", T.FLOAT, ["batch", "seq", HIDDEN]),
            oh.make_tensor_value_info("triples", T.INT64, [None, 3]),
        ],
        [embed, rows],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_generation_trial_session_holds_no_weight_bytes(
    external: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "embedding_reshaped.onnx"
    onnx.save(_embedding_reshaped(), str(path), save_as_external_data=external, location="w.data")
    whole = generate(onnx.load(str(path)), seed=3)  # a ModelProto holding its weights: serialized whole
    built = runtime_real.OrtInferenceSession
    seen: list[tuple[int, str]] = []

    def recording(source: object, options: ort.SessionOptions, **kwargs: object) -> object:
        size = len(source) if isinstance(source, bytes) else -1
        seen.append((size, options.get_session_config_entry("session.disable_prepacking")))
        return built(source, options, **kwargs)

    loaded = load_model(str(path), weightless=True, own_weights=False)
    monkeypatch.setattr(runtime_real, "OrtInferenceSession", recording)
    got = generate(loaded, seed=3)
    assert got.checked and got.tries > 1 and got.tries == whole.tries
    assert got.symbols == whole.symbols
    assert {n: v.tobytes() for n, v in got.feeds.items()} == {n: v.tobytes() for n, v in whole.feeds.items()}
    assert len(seen) == 1 and 0 < seen[0][0] < WEIGHT_BYTES // 4 and seen[0][1] == "1"
    # the sizes chosen are ones onnxruntime CPU runs the model at
    outs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, got.feeds)
    assert outs[1].shape[1] == 3 and outs[0].shape == (*got.feeds["input_ids"].shape, HIDDEN)
