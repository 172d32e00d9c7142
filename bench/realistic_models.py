"""Realistic-size models for ``bench/realistic.py``, generated here with random weights (never committed).

``decoder_step`` builds, with onnx.helper and numpy only, one decoding step of a GPT-2-like transformer
with a static KV cache: a token-embedding Gather over the whole vocabulary, a position-embedding Gather,
per layer LayerNorm, the fused QKV MatMul, two ScatterND writing the new key and value into the caches
(``present_*`` outputs, as static-cache exports do), attention over the cache, the output projection and
the MLP; then the final LayerNorm and the LM head. GPT-2 small's configuration (12 layers x 768, vocab
50257, 1024 positions) weighs about 650 MB in fp32.

With external data the weights are written to the data file one tensor at a time as they are drawn, and the
model refers to them, so a model above protobuf's 2 GiB limit (``LARGE``) is never one message in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


@dataclass(frozen=True)
class DecoderConfig:
    """The shape of a generated decoder step.

    Attributes:
        layers: transformer blocks.
        hidden: model width (a multiple of ``heads``).
        heads: attention heads.
        vocab: vocabulary size (rows of the embedding Gather, columns of the LM head).
        positions: cache length (and position-embedding rows).
        past: tokens already in the cache (the new token is written at this position).
    """

    layers: int = 12
    hidden: int = 768
    heads: int = 12
    vocab: int = 50257
    positions: int = 1024
    past: int = 127

    @property
    def weight_bytes(self) -> int:
        """fp32 bytes of every weight."""
        h = self.hidden
        per_layer = h * 3 * h + 3 * h + h * h + h + h * 4 * h + 4 * h + 4 * h * h + h + 4 * h
        return 4 * (self.vocab * h * 2 + self.positions * h + self.layers * per_layer + 2 * h)


GPT2_SMALL = DecoderConfig()
HELD_OUT = DecoderConfig(layers=6, hidden=1024, heads=16, vocab=32000, positions=512, past=300)
"""Another configuration than the default (wider, fewer layers, another vocabulary and cache length)."""
LARGE = DecoderConfig(layers=16, hidden=1536, heads=12, vocab=50257, positions=1024, past=200)
"""Above protobuf's 2 GiB limit (about 2.4 GB of fp32 weights): only writable with external data."""

_ALIGN = 4096  # offsets of external tensors: page-aligned, so memory maps of them are aligned arrays
_EXTERNAL_MIN = 1024  # bytes: smaller tensors stay inline (as onnx's size_threshold=1024 did)


class _Tensors:
    """Makes the initializer tensors: inline, or appended to an open external-data file and referenced."""

    def __init__(self, data: BinaryIO | None, location: str) -> None:
        self._data, self._location = data, location

    def __call__(self, array: np.ndarray, name: str) -> onnx.TensorProto:
        if self._data is None or array.nbytes < _EXTERNAL_MIN:
            return numpy_helper.from_array(array, name)
        offset = -self._data.tell() % _ALIGN + self._data.tell()
        self._data.seek(offset)
        self._data.write(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes())
        tensor = onnx.TensorProto(
            name=name,
            data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
            dims=array.shape,
            data_location=onnx.TensorProto.EXTERNAL,
        )
        for key, value in (
            ("location", self._location),
            ("offset", str(offset)),
            ("length", str(array.nbytes)),
        ):
            tensor.external_data.add(key=key, value=value)
        return tensor


def decoder_step(
    config: DecoderConfig, seed: int = 0, *, data: BinaryIO | None = None, location: str = ""
) -> onnx.ModelProto:
    """The decoder step of ``config`` (see the module docstring) with random weights; tensors of 1 KiB or
    more are appended to ``data`` (an open binary file named ``location`` beside the model) when given."""
    rng = np.random.default_rng(seed)
    tensor = _Tensors(data, location)

    def _weight(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float) -> TensorProto:
        return tensor(rng.standard_normal(shape, dtype=np.float32) * scale, name)

    c = config
    h, nh, hd, s = c.hidden, c.heads, c.hidden // c.heads, c.positions
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(tensor(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=f"{op}_{output}", **attrs))
        return output

    inits.append(_weight(rng, "wte", (c.vocab, h), 0.02))
    inits.append(_weight(rng, "wpe", (c.positions, h), 0.01))
    inits.append(_weight(rng, "lm_head", (h, c.vocab), 0.02))
    const("shape_heads", np.array([1, 1, nh, hd], np.int64))
    const("shape_model", np.array([1, 1, h], np.int64))
    const("split_qkv", np.array([h, h, h], np.int64))
    const("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    const("half", np.array(0.5, np.float32))
    const("one", np.array(1.0, np.float32))
    const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))

    x = node("Gather", ["wte", "input_ids"], "tok_emb")
    p = node("Gather", ["wpe", "position_ids"], "pos_emb")
    x = node("Add", [x, p], "embed")
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, 1]),
        helper.make_tensor_value_info("cache_index", TensorProto.INT64, [1, nh, 1, 3]),
        helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, [1, 1, 1, s]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, c.vocab])]

    def layer_norm(v: str, prefix: str) -> str:
        inits.append(tensor(np.ones(h, np.float32), f"{prefix}_g"))
        inits.append(tensor(np.zeros(h, np.float32), f"{prefix}_b"))
        return node("LayerNormalization", [v, f"{prefix}_g", f"{prefix}_b"], f"{prefix}_out", axis=-1)

    def linear(v: str, prefix: str, n_in: int, n_out: int) -> str:
        inits.append(_weight(rng, f"{prefix}_w", (n_in, n_out), 0.02))
        inits.append(tensor(np.zeros(n_out, np.float32), f"{prefix}_bias"))
        mm = node("MatMul", [v, f"{prefix}_w"], f"{prefix}_mm")
        return node("Add", [mm, f"{prefix}_bias"], f"{prefix}_out")

    for i in range(c.layers):
        a = layer_norm(x, f"l{i}_ln1")
        qkv = linear(a, f"l{i}_qkv", h, 3 * h)
        nodes.append(
            helper.make_node(
                "Split", [qkv, "split_qkv"], [f"l{i}_q", f"l{i}_k", f"l{i}_v"], axis=-1, name=f"Split_l{i}"
            )
        )
        heads = {}
        for part in "qkv":
            r = node("Reshape", [f"l{i}_{part}", "shape_heads"], f"l{i}_{part}_r")
            heads[part] = node("Transpose", [r], f"l{i}_{part}_t", perm=[0, 2, 1, 3])  # (1, nh, 1, hd)
        caches = {}
        for part in "kv":
            past = f"past_{part}_{i}"
            inputs.append(helper.make_tensor_value_info(past, TensorProto.FLOAT, [1, nh, s, hd]))
            caches[part] = node("ScatterND", [past, "cache_index", heads[part]], f"present_{part}_{i}")
            outputs.append(helper.make_tensor_value_info(caches[part], TensorProto.FLOAT, [1, nh, s, hd]))
        kt = node("Transpose", [caches["k"]], f"l{i}_kT", perm=[0, 1, 3, 2])
        scores = node("MatMul", [heads["q"], kt], f"l{i}_scores")
        scores = node("Mul", [scores, "scale"], f"l{i}_scaled")
        scores = node("Add", [scores, "attention_bias"], f"l{i}_masked")
        probs = node("Softmax", [scores], f"l{i}_probs", axis=-1)
        ctx = node("MatMul", [probs, caches["v"]], f"l{i}_ctx")
        ctx = node("Transpose", [ctx], f"l{i}_ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "shape_model"], f"l{i}_ctx_r")
        attn = linear(ctx, f"l{i}_proj", h, h)
        x = node("Add", [x, attn], f"l{i}_res1")
        m = layer_norm(x, f"l{i}_ln2")
        up = linear(m, f"l{i}_fc", h, 4 * h)
        erf = node("Erf", [node("Mul", [up, "inv_sqrt2"], f"l{i}_gs")], f"l{i}_erf")
        gelu = node(
            "Mul",
            [node("Mul", [up, "half"], f"l{i}_gh"), node("Add", [erf, "one"], f"l{i}_ge")],
            f"l{i}_gelu",
        )
        down = linear(gelu, f"l{i}_down", 4 * h, h)
        x = node("Add", [x, down], f"l{i}_res2")
    x = layer_norm(x, "ln_f")
    node("MatMul", [x, "lm_head"], "logits")
    graph = helper.make_graph(nodes, "decoder_step", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def decoder_feeds(config: DecoderConfig, seed: int = 1) -> dict[str, np.ndarray]:
    """Inputs of one decoding step: the token at position ``past``, caches filled up to it."""
    rng = np.random.default_rng(seed)
    c = config
    nh, hd, s = c.heads, c.hidden // c.heads, c.positions
    index = np.zeros((1, nh, 1, 3), np.int64)
    index[0, :, 0, 1] = np.arange(nh)
    index[0, :, 0, 2] = c.past
    bias = np.full((1, 1, 1, s), -1e9, np.float32)
    bias[..., : c.past + 1] = 0.0
    feeds = {
        "input_ids": rng.integers(0, c.vocab, (1, 1), dtype=np.int64),
        "position_ids": np.array([[c.past]], np.int64),
        "cache_index": index,
        "attention_bias": bias,
    }
    for i in range(c.layers):
        for part in "kv":
            cache = np.zeros((1, nh, s, hd), np.float32)
            cache[:, :, : c.past] = rng.standard_normal((1, nh, c.past, hd), dtype=np.float32)
            feeds[f"past_{part}_{i}"] = cache
    return feeds


def write_model(model: onnx.ModelProto, path: Path, *, external: bool = False) -> Path:
    """Save ``model`` at ``path`` (weights in ``<name>.data`` beside it when ``external``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
    return path


def write_decoder_step(config: DecoderConfig, path: Path, *, external: bool = False, seed: int = 0) -> Path:
    """Generate and save the decoder step of ``config`` at ``path``; with ``external`` its weights go to
    ``<name>.data`` beside it tensor by tensor as they are drawn (at most one weight in memory at a time)."""
    if not external:
        return write_model(decoder_step(config, seed), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    location = path.name + ".data"
    with open(path.parent / location, "wb") as data:
        model = decoder_step(config, seed, data=data, location=location)
    onnx.save_model(model, str(path))
    return path
