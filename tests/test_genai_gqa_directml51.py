"""onnx_models/ecosystem/genai_llama_gqa.onnx (onnxruntime-genai's builder) on real DirectML: its
``com.microsoft`` GroupQueryAttention nodes take Q, K and V packed in one input (key and value left out),
which the DirectML provider's kernel does not accept: the first run fails with
``MLOperatorAuthorImpl.cpp(2818) 80070057`` (E_INVALIDARG), whatever the gather nodes do.

The inspect/translation part runs everywhere: the refusal (``EP_REFUSES_GQA_PACKED_QKV``) is predicted
and the ``directml`` engine on Linux refuses the model before starting its host; the model's two Gathers
translate to the GATHER descriptors docs/directml-facts.md section 5 gives (the DML EP's mapping); the
emulation equals onnxruntime CPU. Tests marked ``real`` run DirectML 1.15.4 itself and are skipped without
the stack (``dmlshim directml setup``); expected values come from onnxruntime CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import InferenceSession
from dmlshim.cli.main import main
from dmlshim.directml.stack import stack_available
from dmlshim.directml.wine_engine import LinuxDirectMLEngine
from dmlshim.dml.enums import DataType
from dmlshim.errors import BadModelError, DmlShimError
from dmlshim.translate import ep_refusals
from dmlshim.translate.ep_refusals import session_refusals, upfront_refusal_error
from dmlshim.translate.model_translation import translate_model
from tests.oracle import IR_VERSION, ort_run

MODEL = Path(__file__).resolve().parent.parent / "onnx_models" / "ecosystem" / "genai_llama_gqa.onnx"
PACKED = "EP_REFUSES_GQA_PACKED_QKV"
SEPARATE_PAST = "EP_IGNORES_GQA_SEPARATE_PAST"
ROTARY = "EP_IGNORES_GQA_ROTARY"
GQA_NODES = ["/model/layers.0/attn/GroupQueryAttention", "/model/layers.1/attn/GroupQueryAttention"]
NUM_HEADS, KV_HEADS, HEAD = 4, 2, 16  # the shipped model's

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _feeds() -> dict[str, np.ndarray]:
    with np.load(MODEL.with_suffix(".npz")) as data:
        return {k: data[k] for k in data.files}


def _gqa_model(packed: bool, past: int | str = "p", rotary: int = 0) -> onnx.ModelProto:
    """One GroupQueryAttention node with the shipped model's heads: Q, K, V packed in ``qkv`` or given
    as ``q``, ``k``, ``v``; past key/value declared ``[1, KV_HEADS, past, HEAD]``."""
    value = helper.make_tensor_value_info
    hidden = {"q": NUM_HEADS * HEAD, "k": KV_HEADS * HEAD, "v": KV_HEADS * HEAD}
    if packed:
        qkv = ["qkv", "", ""]
        inputs = [value("qkv", TensorProto.FLOAT, [1, "s", sum(hidden.values())])]
    else:
        qkv = ["q", "k", "v"]
        inputs = [value(n, TensorProto.FLOAT, [1, "s", w]) for n, w in hidden.items()]
    inputs += [value(n, TensorProto.FLOAT, [1, KV_HEADS, past, HEAD]) for n in ("pk", "pv")]
    inputs += [value("seqlens_k", TensorProto.INT32, [1]), value("total", TensorProto.INT32, [])]
    names = [*qkv, "pk", "pv", "seqlens_k", "total"]
    initializers = []
    if rotary:
        angles = np.arange(128)[:, None] / 10000 ** (np.arange(HEAD // 2) / (HEAD // 2))[None]
        initializers = [
            helper.make_tensor("cos", TensorProto.FLOAT, [128, HEAD // 2], np.cos(angles).ravel()),
            helper.make_tensor("sin", TensorProto.FLOAT, [128, HEAD // 2], np.sin(angles).ravel()),
        ]
        names += ["cos", "sin"]
    node = helper.make_node(
        "GroupQueryAttention", names, ["out", "present_key", "present_value"], name="gqa",
        domain="com.microsoft", num_heads=NUM_HEADS, kv_num_heads=KV_HEADS, scale=0.25, do_rotary=rotary,
    )  # fmt: skip
    outputs = [value(n, TensorProto.FLOAT, None) for n in ("out", "present_key", "present_value")]
    graph = helper.make_graph([node], "gqa", inputs, outputs, initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = IR_VERSION
    return model


def _gqa_feeds(packed: bool, past: int, new: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    widths = {"q": NUM_HEADS * HEAD, "k": KV_HEADS * HEAD, "v": KV_HEADS * HEAD}
    if packed:
        widths = {"qkv": sum(widths.values())}
    feeds = {n: rng.standard_normal((1, new, w)).astype(np.float32) for n, w in widths.items()}
    feeds |= {n: rng.standard_normal((1, KV_HEADS, past, HEAD)).astype(np.float32) for n in ("pk", "pv")}
    feeds["seqlens_k"] = np.array([past + new - 1], np.int32)  # ONNX contrib spec: total length - 1
    feeds["total"] = np.array(past + new, np.int32)
    return feeds


def _codes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(name, refusal.code) for name, refusal in session_refusals(model)]


# --- everywhere: prediction, up-front refusal, translation, emulation --------------------------------


def test_inspect_predicts_the_packed_qkv_refusal_on_both_attention_nodes() -> None:
    model = onnx.load(str(MODEL))
    assert _codes(model) == [(name, PACKED) for name in GQA_NODES]
    mt = translate_model(model)
    assert [(n, c) for n, c, _ in mt.session_refusals] == [(name, PACKED) for name in GQA_NODES]
    assert mt.summary["all_on_dml_ep"] is False


def test_inspect_json_and_text_name_the_nodes_and_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(MODEL), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    refusals = report["summary"]["session_refusals"]
    assert [(r["node"], r["code"]) for r in refusals] == [(name, PACKED) for name in GQA_NODES]
    assert "key and value inputs left out" in refusals[0]["form"]
    assert main(["inspect", str(MODEL)]) == 0
    text = capsys.readouterr().out
    assert "onnxruntime-directml today: NO" in text
    assert PACKED in text and GQA_NODES[0] in text


def test_gathers_translate_to_the_dml_ep_gather_descriptors() -> None:
    # docs/directml-facts.md section 5: Gather -> GATHER, D = max(r, q, r+q-1), sizes right-aligned with
    # leading 1s, Axis = axis + (D - r), IndexDimensions = q (0 for scalar indices).
    mt = translate_model(onnx.load(str(MODEL)), input_shapes={"input_ids": [1, 3]})
    by_name = {t.name: t for t in mt.nodes}
    embed = by_name["/model/embed_tokens/Gather"].operator
    assert embed is not None  # table [512, 64] (r=2), input_ids [1, 3] (q=2): D = 3
    assert (embed.input_tensor.sizes, embed.indices_tensor.sizes, embed.output_tensor.sizes) == (
        (1, 512, 64), (1, 1, 3), (1, 3, 64),
    )  # fmt: skip
    assert (embed.axis, embed.index_dimensions) == (1, 2)
    assert embed.indices_tensor.data_type is DataType.INT64  # signed indices passed as they are
    assert embed.input_tensor.total_tensor_size_in_bytes == 512 * 64 * 4
    shape_gather = by_name["/model/attn_mask_reformat/attn_mask_subgraph/Gather"].operator
    assert shape_gather is not None  # Shape output [2] (r=1), scalar index (q=0): D = 1
    assert (shape_gather.axis, shape_gather.index_dimensions) == (0, 0)
    assert shape_gather.input_tensor.sizes == (2,)


def test_directml_engine_refuses_up_front_naming_node_op_and_reason() -> None:
    # Raised before the stack is read or the host started: no stack is needed to see it.
    with pytest.raises(BadModelError) as info:
        LinuxDirectMLEngine(onnx.load(str(MODEL)), config=None)
    message = str(info.value)
    for name in GQA_NODES:
        assert name in message
    assert "GroupQueryAttention" in message and PACKED in message
    assert "key and value inputs left out" in message and "80070057" in message
    assert type(info.value.__cause__).__name__ == "Fail"  # what onnxruntime raises at that first run


@pytest.mark.parametrize("rotary", [0, 1])
def test_packed_one_node_model_is_refused_whatever_the_rotary(rotary: int) -> None:
    model = _gqa_model(packed=True, rotary=rotary)
    assert _codes(model) == [("gqa", PACKED)]
    assert upfront_refusal_error(model) is not None


def test_separate_qkv_forms() -> None:
    assert _codes(_gqa_model(packed=False, past=0)) == []  # no past: nothing to ignore
    assert _codes(_gqa_model(packed=False, past="p")) == [("gqa", SEPARATE_PAST)]
    assert _codes(_gqa_model(packed=False, past=4)) == [("gqa", SEPARATE_PAST)]
    assert upfront_refusal_error(_gqa_model(packed=False, past="p")) is None  # runs, not refused
    assert _codes(_gqa_model(packed=False, past=0, rotary=1)) == [("gqa", ROTARY)]
    assert _codes(_gqa_model(packed=True, past=4, rotary=1)) == [("gqa", PACKED)]  # the refusal says it all


def test_other_domains_and_old_opsets_do_not_match() -> None:
    model = _gqa_model(packed=True)
    model.graph.node[0].domain = "custom.local"
    model.opset_import.append(helper.make_opsetid("custom.local", 1))
    assert _codes(model) == []
    no_contrib = _gqa_model(packed=True)
    del no_contrib.opset_import[1]  # the com.microsoft opset is not imported: no such node form
    assert _codes(no_contrib) == []
    assert all(r.domain in ("", "com.microsoft") for r in ep_refusals.EP_REFUSALS)


def test_emulation_equals_onnxruntime_cpu() -> None:
    model = onnx.load(str(MODEL))
    feeds = _feeds()
    want = ort_run(model, feeds)
    got = InferenceSession(str(MODEL), engine="partitioned").run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


# --- real DirectML 1.15.4 (skipped without the stack) ------------------------------------------------


def _real(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [
        np.asarray(a) for a in InferenceSession(model.SerializeToString(), engine="directml").run(None, feeds)
    ]


@real
@pytest.mark.parametrize(("rotary", "new"), [(0, 3), (1, 3), (0, 1)])
def test_real_directml_fails_on_packed_qkv(monkeypatch: pytest.MonkeyPatch, rotary: int, new: int) -> None:
    model = _gqa_model(packed=True, rotary=rotary)
    feeds = _gqa_feeds(packed=True, past=4, new=new)
    assert ort_run(model, feeds)[0].shape == (1, new, NUM_HEADS * HEAD)  # onnxruntime CPU runs it
    monkeypatch.setattr(ep_refusals, "upfront_refusal_error", lambda model: None)  # let DirectML answer
    with pytest.raises(
        DmlShimError, match=r"(?s)GroupQueryAttention.*MLOperatorAuthorImpl\.cpp\(2818\).*80070057"
    ):
        _real(model, feeds)


@real
def test_real_directml_shipped_model_fails_at_the_attention_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ep_refusals, "upfront_refusal_error", lambda model: None)
    with pytest.raises(DmlShimError, match=r"(?s)layers\.0/attn/GroupQueryAttention.*80070057.*" + PACKED):
        _real(onnx.load(str(MODEL)), _feeds())


@real
def test_real_directml_runs_separate_qkv_right_without_past() -> None:
    model = _gqa_model(packed=False, past=0)
    feeds = _gqa_feeds(packed=False, past=0, new=3)
    for got, want in zip(_real(model, feeds), ort_run(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


@real
def test_real_directml_ignores_a_separate_past() -> None:
    # The provider's kernel never reads past_key/past_value (it expects them to share the present
    # buffers): with 1 new token its own position is right, the past positions are not the fed past.
    model = _gqa_model(packed=False, past="p")
    feeds = _gqa_feeds(packed=False, past=4, new=1)
    got = _real(model, feeds)
    want = ort_run(model, feeds)
    np.testing.assert_allclose(got[1][:, :, 4], want[1][:, :, 4], atol=1e-5)
    np.testing.assert_array_equal(want[1][:, :, :4], feeds["pk"])  # onnxruntime CPU copies the past
    assert not np.allclose(got[1][:, :, :4], feeds["pk"])
    assert not np.allclose(got[0], want[0], atol=1e-3)


@real
def test_real_directml_does_not_rotate_with_separate_qkv() -> None:
    model = _gqa_model(packed=False, past=0, rotary=1)
    feeds = _gqa_feeds(packed=False, past=0, new=3)
    got, want = _real(model, feeds), ort_run(model, feeds)
    np.testing.assert_allclose(got[2], want[2], atol=1e-5)  # values are not rotated
    np.testing.assert_allclose(got[1][:, :, 0], want[1][:, :, 0], atol=1e-5)  # position 0: identity
    assert not np.allclose(got[1], want[1], atol=1e-2)  # keys at positions 1, 2 are not rotated
    one = _gqa_feeds(packed=False, past=0, new=1)
    for g, w in zip(_real(model, one), ort_run(model, one), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
