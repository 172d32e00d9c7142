"""onnxruntime.quantization (dynamic and QDQ static) of a small transformer-like graph with Gather
embeddings, onnx.version_converter on shipped models, and onnxsim (onnx-simplifier)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from eco_common import HERE, Built, Spec
from onnx import TensorProto, helper, numpy_helper, version_converter

F, I64 = TensorProto.FLOAT, TensorProto.INT64
VOCAB, HIDDEN, MAXPOS = 64, 32, 16
TOP = HERE.parent


def tiny_transformer() -> onnx.ModelProto:
    """Token and position embeddings (Gather), one single-head attention block, tied output projection."""
    rng = np.random.default_rng(41)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [w("tok_emb", VOCAB, HIDDEN), w("pos_emb", MAXPOS, HIDDEN), w("wq", HIDDEN, HIDDEN),
             w("wk", HIDDEN, HIDDEN), w("wv", HIDDEN, HIDDEN), w("wo", HIDDEN, HIDDEN),
             w("w_out", HIDDEN, VOCAB),
             numpy_helper.from_array(np.ones(HIDDEN, np.float32), "ln_scale"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "ln_bias"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(HIDDEN), np.float32), "inv_sqrt"),
             numpy_helper.from_array(np.array([0, 2, 1], np.int64), "perm_unused"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "axis1")]
    nodes = [
        helper.make_node("Gather", ["tok_emb", "input_ids"], ["tok"], name="token_embedding", axis=0),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"], name="shape"),
        helper.make_node("Gather", ["ids_shape", "axis1"], ["seq_len"], name="seq_len", axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["positions"], name="positions"),
        helper.make_node("Gather", ["pos_emb", "positions"], ["pos"], name="position_embedding", axis=0),
        helper.make_node("Add", ["tok", "pos"], ["h0"], name="add_pos"),
        helper.make_node("LayerNormalization", ["h0", "ln_scale", "ln_bias"], ["h"], name="ln", axis=-1),
        helper.make_node("MatMul", ["h", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["h", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["h", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores0"], name="scores"),
        helper.make_node("Mul", ["scores0", "inv_sqrt"], ["scores"], name="scale"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="ctx"),
        helper.make_node("MatMul", ["ctx", "wo"], ["attn"], name="attn_out"),
        helper.make_node("Add", ["h", "attn"], ["h2"], name="residual"),
        helper.make_node("MatMul", ["h2", "w_out"], ["logits"], name="lm_head"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_transformer",
        [helper.make_tensor_value_info("input_ids", I64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", F, ["batch", "seq", VOCAB])],
        initializer=[i for i in inits if i.name != "perm_unused"],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="dmlshim-ecosystem")
    model.ir_version = 8
    return model


def _ids(seed: int, batch: int = 2, seq: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, seq)).astype(np.int64)


def quant_dynamic() -> Built:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "f.onnx"), Path(tmp, "q.onnx")
        onnx.save(tiny_transformer(), str(src))
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8,
                         op_types_to_quantize=["MatMul", "Gather"])
        model = onnx.load(str(dst))
    return Built(model, {"input_ids": _ids(42)})


class _Reader:
    """Calibration batches for quantize_static (fixed seeds)."""

    def __init__(self) -> None:
        self._batches = iter([{"input_ids": _ids(100 + k)} for k in range(8)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quant_static_qdq() -> Built:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    reader = type("Reader", (_Reader, CalibrationDataReader), {})()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "f.onnx"), Path(tmp, "q.onnx")
        onnx.save(tiny_transformer(), str(src))
        quantize_static(str(src), str(dst), reader, quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        op_types_to_quantize=["MatMul", "Gather", "Add"])
        model = onnx.load(str(dst))
    return Built(model, {"input_ids": _ids(43)})


def _shipped(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model = onnx.load(str(TOP / f"{name}.onnx"))
    with np.load(TOP / f"{name}.npz", allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    return model, feeds


def converted(name: str, target: int) -> Spec:
    def build() -> Built:
        model, feeds = _shipped(name)
        out = version_converter.convert_version(model, target)
        out.ir_version = min(out.ir_version, 10)
        return Built(out, feeds)

    return Spec(f"vc_{name}_opset{target}", "onnx.version_converter",
                f"onnx_models/{name}.onnx converted to opset {target}", build, ("onnx",))


def simplified() -> Built:
    import onnxsim

    model, feeds = _shipped("tiny_decoder_step")
    out, ok = onnxsim.simplify(model)
    if not ok:
        raise ValueError("onnxsim could not check the simplified model")
    out.ir_version = min(out.ir_version, 10)
    return Built(out, feeds)


def simplified_transformer() -> Built:
    import onnxsim

    out, ok = onnxsim.simplify(tiny_transformer(), overwrite_input_shapes={"input_ids": [1, 6]})
    if not ok:
        raise ValueError("onnxsim could not check the simplified model")
    return Built(out, {"input_ids": _ids(44, 1, 6)})


QUANT = ("onnxruntime",)
SPECS: list[Spec] = [
    Spec("ortq_dynamic_transformer", "onnxruntime.quantization", "tiny transformer after quantize_dynamic "
         "(uint8 MatMul and Gather weights)", quant_dynamic, QUANT),
    Spec("ortq_qdq_transformer", "onnxruntime.quantization", "tiny transformer after quantize_static, QDQ "
         "format (int8 weights, uint8 activations)", quant_static_qdq, QUANT),
    converted("embedding_gather", 21),
    converted("gathernd_batch_dims1", 21),
    converted("loop_scatternd", 19),
    converted("scatter_elements_scatter", 16),
    converted("scatter_deprecated_opset10", 11),
    Spec("onnxsim_tiny_decoder_step", "onnxsim", "onnx_models/tiny_decoder_step.onnx simplified",
         simplified, ("onnxsim",)),
    Spec("onnxsim_transformer_static", "onnxsim", "the tiny transformer simplified with static input "
         "shape [1, 6] (Shape/Range folded)", simplified_transformer, ("onnxsim",)),
]
