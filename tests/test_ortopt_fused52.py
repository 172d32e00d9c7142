"""onnx_models/ecosystem/ortopt_*: models as onnxruntime's transformer optimizer (``optimize_model``, what
Olive runs for DirectML) and optimum's ``ORTOptimizer`` leave them, with ``com.microsoft``
EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu and FastGelu.

Everywhere: generated inputs respect EmbedLayerNormalization's lookups (before, no id drawn was in the
word table, onnxruntime CPU refused every choice but an empty batch, and ``validate`` compared empty
tensors); inspect's placement of every gather node is the one real DirectML made (recorded below, seen
with onnxruntime-directml 1.24.3 / DirectML 1.15.4).

Tests marked ``real`` run DirectML itself (skipped without the stack, ``dmlshim directml setup``): the
four models equal onnxruntime CPU within float tolerance, the provider's placement is the recorded one,
and its EmbedLayerNormalization reads out-of-range ids as DirectML's GATHER does (docs/semantics.md)
where onnxruntime CPU refuses them. Expected values come from onnxruntime CPU and numpy on the tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import InferenceSession
from dmlshim.directml.stack import stack_available
from dmlshim.inputs import plan_inputs
from tests.corpus_checks import feeds_of, ort_reference, run_cli
from tests.oracle import IR_VERSION, ort_run

ECO = Path(__file__).resolve().parent.parent / "onnx_models" / "ecosystem"
MODELS = ("ortopt_bert_fused", "ortopt_bert_fp16", "ortopt_gpt2_fused", "ortopt_optimum_distilbert")
_ATTN_GATHERS = ("Gather_4", "Gather_1", "Gather", "c_proj/Gather_1", "c_proj/Gather")
_GPT2_SHAPE_GATHERS = [f"/lm/transformer/h.{i}/attn/{n}" for i in (0, 1) for n in _ATTN_GATHERS]
#: gather nodes onnxruntime-directml placed on its CPU provider (its verbose log; every other gather node
#: of the model ran on DirectML): DirectML 1.15.4, onnxruntime-directml 1.24.3.
REAL_CPU_GATHERS: dict[str, set[str]] = {
    "ortopt_bert_fused": set(),
    "ortopt_bert_fp16": set(),
    "ortopt_gpt2_fused": {"/lm/transformer/Gather_2", "/lm/transformer/Gather_3", "Gather", "Gather_token_1",
                          *_GPT2_SHAPE_GATHERS},
    "ortopt_optimum_distilbert": {"/embeddings/Gather"},
}  # fmt: skip
_OUTPUTS = (("out", TensorProto.FLOAT), ("mask_index", TensorProto.INT32), ("emb_sum", TensorProto.FLOAT))
V, P, S, H = 6, 4, 2, 8  # word, position and segment rows, hidden size of the one-node model

real = pytest.mark.skipif(
    not stack_available(), reason="real DirectML stack not set up (dmlshim directml setup)"
)


def _tables() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(52)
    return {
        "word": rng.standard_normal((V, H)).astype(np.float32),
        "pos": (rng.standard_normal((P, H)) * 0.5).astype(np.float32),
        "seg": (rng.standard_normal((S, H)) * 0.25).astype(np.float32),
        "gamma": np.ones(H, np.float32),
        "beta": np.zeros(H, np.float32),
    }


def _embed_model(position_ids: bool) -> onnx.ModelProto:
    """One EmbedLayerNormalization node (int32 ids [1, s]); outputs: normalized, mask_index, embedding sum."""
    names = ["ids", "tt", "word", "pos", "seg", "gamma", "beta", "mask"] + (
        ["pos_ids"] if position_ids else []
    )
    node = helper.make_node(
        "EmbedLayerNormalization",
        names,
        ["out", "mask_index", "emb_sum"],
        domain="com.microsoft",
        epsilon=1e-12,
    )
    feeds = ["ids", "tt", "mask"] + (["pos_ids"] if position_ids else [])
    graph = helper.make_graph(
        [node], "embed",
        [helper.make_tensor_value_info(n, TensorProto.INT32, [1, "s"]) for n in feeds],
        [helper.make_tensor_value_info(n, t, None) for n, t in _OUTPUTS],
        [numpy_helper.from_array(v, k) for k, v in _tables().items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = IR_VERSION
    return model


# --- everywhere --------------------------------------------------------------------------------------


@pytest.mark.parametrize("position_ids", [False, True])
def test_embed_layer_norm_ids_are_drawn_inside_their_tables(position_ids: bool, tmp_path: Path) -> None:
    model = _embed_model(position_ids)
    specs = {s.name: s for s in plan_inputs(model)}
    assert specs["ids"].bounds == (0, V) and specs["tt"].bounds == (0, S)
    assert specs["mask"].bounds is None
    if position_ids:
        assert specs["pos_ids"].bounds == (0, P)
    path = tmp_path / "embed.onnx"
    path.write_bytes(model.SerializeToString())
    saved = tmp_path / "inputs.npz"
    run = run_cli("validate", str(path), "--save-inputs", str(saved), "-q")
    assert run.code == 0, run.message
    with np.load(saved) as data:
        feeds = {k: data[k] for k in data.files}
    assert feeds["ids"].shape == (1, 2)  # the symbolic sequence at its default, not an empty tensor
    ort_run(model, feeds)  # onnxruntime CPU accepts what was generated


@pytest.mark.parametrize("name", ["ortopt_bert_fused", "ortopt_bert_fp16"])
def test_fused_bert_generated_inputs_are_not_empty(name: str, tmp_path: Path) -> None:
    saved = tmp_path / "inputs.npz"
    run = run_cli("validate", str(ECO / f"{name}.onnx"), "--save-inputs", str(saved), "-q")
    assert run.code == 0, run.message
    with np.load(saved) as data:
        feeds = {k: data[k] for k in data.files}
    assert {k: v.shape for k, v in feeds.items()} == {k: (2, 2) for k in feeds}
    assert feeds["input_ids"].min() >= 0 and feeds["input_ids"].max() < 64  # the word table's rows
    assert set(np.unique(feeds["token_type_ids"])) <= {0, 1}


@pytest.mark.parametrize("name", MODELS)
def test_inspect_places_gathers_where_real_directml_did(name: str) -> None:
    run = run_cli("inspect", str(ECO / f"{name}.onnx"), "--json", "-q")
    assert run.code in (0, 1) and run.doc is not None, run.message
    nodes = run.doc["nodes"]
    on_cpu = {n["name"] for n in nodes if n["ort_placement"] == "CPUExecutionProvider"}
    assert on_cpu == REAL_CPU_GATHERS[name]
    assert {n["ort_placement"] for n in nodes if n["name"] not in on_cpu} <= {"DmlExecutionProvider"}
    assert run.doc["summary"]["session_refusals"] == []  # the fused com.microsoft ops run on DirectML


# --- real DirectML 1.15.4 (skipped without the stack) ------------------------------------------------


@real
@pytest.mark.parametrize("name", MODELS)
def test_real_directml_runs_the_fused_models(name: str, tmp_path: Path) -> None:
    path = ECO / f"{name}.onnx"
    run = run_cli("run", str(path), "--inputs", str(path.with_suffix(".npz")), "--engine", "directml",
                  "--json", "-q", "-o", str(tmp_path / "out.npz"))  # fmt: skip
    assert run.code == 0 and run.doc is not None, run.message
    cpu = set(run.doc["record"]["device"]["nodes_on_cpu"].split(", "))
    gathers = {n["name"] for n in run.doc["record"]["nodes"]}
    assert cpu & gathers == REAL_CPU_GATHERS[name]
    _, want = ort_reference(path)
    with np.load(tmp_path / "out.npz") as data:
        got = [data[k] for k in data.files]
    atol = 1e-2 if "fp16" in name else 1e-5  # float16 inside: DirectML's half-precision math
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=atol, rtol=0)


@real
def test_real_directml_embed_layer_norm_reads_out_of_range_ids_as_gather_does() -> None:
    # onnxruntime CPU refuses every one of these ids ("input index out of range"); the DirectML provider
    # runs them: a negative id counts from the end once, an id past the table reads the table buffer's
    # last element in every position (docs/semantics.md, "What real DirectML does"), and a sequence
    # longer than the position table reads the position buffer's last element past its end.
    t = _tables()
    model = _embed_model(position_ids=False)
    cases = [([0, 6, -1, 100], [0, 0, 0, 0]), ([1, 2, 3, 4], [0, 2, -1, 5]), ([0, 1, 2, 3, 4, 5], [0] * 6)]
    session = InferenceSession(model.SerializeToString(), engine="directml")
    for ids, tt in cases:
        feeds = {k: np.array([v], np.int32) for k, v in (("ids", ids), ("tt", tt), ("mask", [1] * len(ids)))}
        with pytest.raises(Exception, match="input index out of range"):
            ort_run(model, feeds)
        got = session.run(None, feeds)[2][0]

        def row(table: np.ndarray, i: int) -> np.ndarray:
            i = i + len(table) if i < 0 else i
            return table[i] if 0 <= i < len(table) else np.full(H, table[-1, -1])

        want = np.stack(
            [
                row(t["word"], i) + row(t["pos"], p) + row(t["seg"], s)
                for p, (i, s) in enumerate(zip(ids, tt, strict=True))
            ]
        )
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


@real
def test_real_directml_accepts_what_the_shipped_bert_refuses_on_cpu() -> None:
    path = ECO / "ortopt_bert_fused.onnx"
    feeds = dict(feeds_of(path))  # feeds_of's answer is cached: left as it is
    feeds["input_ids"] = feeds["input_ids"].copy()
    feeds["input_ids"][0, 1] = 64  # one past the word table
    with pytest.raises(Exception, match="input index out of range"):
        ort_run(onnx.load(str(path)), feeds)
    with pytest.raises(Exception, match="input index out of range"):
        InferenceSession(str(path), engine="partitioned").run(None, feeds)  # dmlshim: onnxruntime's answer
    out = InferenceSession(str(path), engine="directml").run(None, feeds)
    assert out[0].shape == (2, 5, 32) and np.isfinite(out[0]).all()
