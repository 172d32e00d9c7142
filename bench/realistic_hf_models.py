"""Real-configuration models for ``bench/realistic_hf.py``, exported from transformers with random weights.

Run by ``realistic_hf.py`` in a fresh process of a Python that has torch and transformers (the ``export``
extra; never the measuring Python)::

    python bench/realistic_hf_models.py MODEL OUT_DIR [--external]

``MODEL`` is one of :data:`MODELS`. Each model is a transformers class built from a real configuration
(GPT-2 small, BERT-base, a Llama-style decoder of 6 layers x 768; held out from tuning: Qwen2-0.5B's
configuration cut to 2 layers, T5-small, DeBERTa-v3-small, ViT-base) with weights drawn from a fixed
seed - no model hub, no network - wrapped the way ``onnx_models/real/export_real.py`` wraps the tiny corpus
versions (decoder step with past key/values, static-cache step, encoder with a padding mask), exported
by torch's TorchScript-based exporter (``dynamo=False``, opset 17, IR version capped at 10), checked in
onnxruntime CPU against PyTorch on the sample, and written as ``OUT_DIR/<model>.onnx`` (with
``<model>.onnx.data`` under ``--external``) and ``OUT_DIR/<model>.npz`` (one array per graph input).
Prints one JSON line describing what it wrote.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Opset of the legacy exporter (its highest well-tested one) and the IR version every supported
#: onnxruntime reads; the same choices as onnx_models/real/export_real.py.
OPSET = 17
MAX_IR_VERSION = 10


@dataclass(frozen=True)
class Export:
    """A module ready to export, with its sample inputs (forward-argument order) and output names."""

    module: Any
    inputs: dict[str, Any]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    description: str


def _seed(seed: int) -> np.random.Generator:
    import torch

    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def _ids(rng: np.random.Generator, vocab: int, *shape: int) -> Any:
    import torch

    return torch.from_numpy(rng.integers(0, vocab, size=shape, dtype=np.int64))


def _randn(rng: np.random.Generator, *shape: int) -> Any:
    import torch

    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def _cache_names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]


def gpt2_step(past: int = 127) -> Export:
    """GPT-2 small (12 x 768, vocabulary 50257) decoding one token after ``past`` cached tokens."""
    import torch
    from torch import nn
    from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

    rng = _seed(0)
    config = GPT2Config()  # GPT-2 small: 12 layers, 768 wide, 12 heads, 50257 tokens, 1024 positions
    model = GPT2LMHeadModel(config).eval()
    layers, heads, head_dim = config.n_layer, config.n_head, config.n_embd // config.n_head

    class Step(nn.Module):
        """past key/values in, logits and present key/values out (export_real.py's DynamicCacheStep)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, *past_kv: Any) -> Any:
            pairs = tuple((past_kv[2 * i], past_kv[2 * i + 1]) for i in range(layers))
            if hasattr(DynamicCache, "from_legacy_cache"):  # transformers 4.x
                cache = DynamicCache.from_legacy_cache(pairs)
            else:
                cache = DynamicCache(pairs, config=config)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
            present: list[Any] = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    inputs: dict[str, Any] = {
        "input_ids": _ids(rng, config.vocab_size, 1, 1),
        "attention_mask": torch.ones(1, past + 1, dtype=torch.int64),
        "position_ids": torch.full((1, 1), past, dtype=torch.int64),
    }
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch_size"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size"},
        "logits": {0: "batch_size"},
    }
    for name in _cache_names(layers, "past"):
        inputs[name] = _randn(rng, 1, heads, past, head_dim)
        axes[name] = {0: "batch_size", 2: "past_sequence_length"}
    for name in _cache_names(layers, "present"):
        axes[name] = {0: "batch_size", 2: "total_sequence_length"}
    return Export(
        Step(),
        inputs,
        ["logits", *_cache_names(layers, "present")],
        axes,
        f"GPT-2 small decode step, {past}-token past",
    )


def bert_base(batch: int = 4, sequence: int = 128) -> Export:
    """BERT-base (12 x 768, vocabulary 30522) on ``batch`` x ``sequence`` tokens, the last row padded."""
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    rng = _seed(6)
    config = BertConfig()  # BERT-base: 12 layers, 768 wide, 12 heads, 3072 intermediate, 30522 tokens
    model = BertModel(config).eval()

    class Forward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state, out.pooler_output

    mask = torch.ones(batch, sequence, dtype=torch.int64)
    mask[-1, sequence - sequence // 4 :] = 0  # right padding on the last row
    types = torch.zeros(batch, sequence, dtype=torch.int64)
    types[:, sequence // 2 :] = 1
    inputs = {
        "input_ids": _ids(rng, config.vocab_size, batch, sequence),
        "attention_mask": mask,
        "token_type_ids": types,
    }
    axes = {0: "batch_size", 1: "sequence_length"}
    return Export(
        Forward(),
        inputs,
        ["last_hidden_state", "pooler_output"],
        {**{n: axes for n in (*inputs, "last_hidden_state")}, "pooler_output": {0: "batch_size"}},
        f"BERT-base, {batch} x {sequence} tokens",
    )


def _static_step(
    model: Any, config: Any, layers: int, past: int, cache_len: int, seed: int, description: str
) -> Export:
    """A decoder writing one token into a transformers ``StaticCache`` of ``cache_len`` positions at
    ``cache_position = past`` (``index_copy_``, exported as ScatterND): caches in, updated caches out."""
    import torch
    from torch import nn
    from transformers import StaticCache

    rng = _seed(seed)
    kv_heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

    class Step(nn.Module):
        """export_real.py's StaticCacheStep for any number of layers: caches in, updated caches out."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, cache_position: Any, *caches: Any) -> Any:
            cache = StaticCache(config=config, max_cache_len=cache_len)
            for i, layer in enumerate(cache.layers):
                k, v = caches[2 * i], caches[2 * i + 1]
                if len(inspect.signature(layer.lazy_initialization).parameters) >= 2:
                    layer.lazy_initialization(k, v)  # transformers 5
                else:
                    layer.lazy_initialization(k)  # transformers 4.x
                layer.keys, layer.values = k.clone(), v.clone()  # the caller's buffers stay untouched
                layer.cumulative_length = cache_position[0].clone()
            out = self.model(
                input_ids=input_ids,
                cache_position=cache_position,
                position_ids=cache_position.unsqueeze(0),
                past_key_values=cache,
                use_cache=True,
            )
            present: list[Any] = []
            for layer in cache.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    inputs: dict[str, Any] = {
        "input_ids": _ids(rng, config.vocab_size, 1, 1),
        "cache_position": torch.tensor([past], dtype=torch.int64),
    }
    for name in _cache_names(layers, "cache"):
        buf = _randn(rng, 1, kv_heads, cache_len, head_dim)
        buf[:, :, past:] = 0  # positions not yet written are zeros, as in a fresh static cache
        inputs[name] = buf
    return Export(Step(), inputs, ["logits", *_cache_names(layers, "new_cache")], {}, description)


def llama_static(layers: int = 6, hidden: int = 768, past: int = 127, cache_len: int = 256) -> Export:
    """A Llama-style decoder (``layers`` x ``hidden``, vocabulary 32000) writing one token into a
    transformers ``StaticCache`` of ``cache_len`` positions at ``cache_position = past``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _seed(4)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=2048,
        num_hidden_layers=layers,
        num_attention_heads=12,
        num_key_value_heads=12,
        max_position_embeddings=2048,
    )
    model = LlamaForCausalLM(config).eval()
    return _static_step(
        model,
        config,
        layers,
        past,
        cache_len,
        4,
        f"Llama-style static-cache step, {layers} layers x {hidden}, {past}-token past of {cache_len}",
    )


# Held-out models (``realistic_hf.py --held-out``): other architectures at real configurations, never
# tuned against. Each keeps its real widths and vocabulary; only the decoder's depth is cut to keep the
# file near the other models' sizes.


def qwen2_static(layers: int = 2, past: int = 600, cache_len: int = 1024) -> Export:
    """Qwen2-0.5B's configuration (896 wide, 14 query heads over 2 key/value heads, 4864 intermediate,
    vocabulary 151936, biased q/k/v projections, RoPE base 1e6) cut to ``layers`` layers, writing one token
    into a ``StaticCache`` of ``cache_len`` positions (one 512 KiB ScatterND per cache)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _seed(11)
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=layers,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config).eval()
    return _static_step(
        model,
        config,
        layers,
        past,
        cache_len,
        11,
        f"Qwen2-0.5B-config static-cache step, {layers} of 24 layers, {past}-token past of {cache_len}",
    )


def t5_small(batch: int = 2, source: int = 64, target: int = 16) -> Export:
    """T5-small (6 + 6 layers x 512, 8 heads, relative position buckets, vocabulary 32128): encoder and
    decoder in one graph, ``batch`` x ``source`` tokens in (the last row padded), ``target`` tokens out."""
    import torch
    from torch import nn
    from transformers import T5Config, T5ForConditionalGeneration

    rng = _seed(12)
    config = T5Config()  # the t5-small configuration
    model = T5ForConditionalGeneration(config).eval()

    class Forward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, decoder_input_ids: Any) -> Any:
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                use_cache=False,
            )
            return out.logits, out.encoder_last_hidden_state

    mask = torch.ones(batch, source, dtype=torch.int64)
    mask[-1, source - source // 4 :] = 0
    inputs = {
        "input_ids": _ids(rng, config.vocab_size, batch, source),
        "attention_mask": mask,
        "decoder_input_ids": _ids(rng, config.vocab_size, batch, target),
    }
    return Export(
        Forward(),
        inputs,
        ["logits", "encoder_last_hidden_state"],
        {
            "input_ids": {0: "batch", 1: "source"},
            "attention_mask": {0: "batch", 1: "source"},
            "decoder_input_ids": {0: "batch", 1: "target"},
            "logits": {0: "batch", 1: "target"},
            "encoder_last_hidden_state": {0: "batch", 1: "source"},
        },
        f"T5-small encoder-decoder, {batch} x {source} tokens in, {target} out",
    )


def deberta_v3_small(batch: int = 2, sequence: int = 128) -> Export:
    """DeBERTa-v3-small (6 layers x 768, 12 heads, vocabulary 128100, disentangled attention over 256
    log-bucketed relative positions: ``torch.gather``, exported as GatherElements)."""
    import torch
    from torch import nn
    from transformers import DebertaV2Config, DebertaV2Model

    rng = _seed(13)
    config = DebertaV2Config(
        vocab_size=128100,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        max_position_embeddings=512,
        type_vocab_size=0,
        relative_attention=True,
        max_relative_positions=-1,
        position_buckets=256,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        layer_norm_eps=1e-7,
    )
    model = DebertaV2Model(config).eval()

    class Forward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    mask = torch.ones(batch, sequence, dtype=torch.int64)
    mask[-1, sequence - sequence // 4 :] = 0
    inputs = {"input_ids": _ids(rng, config.vocab_size, batch, sequence), "attention_mask": mask}
    return Export(
        Forward(),
        inputs,
        ["last_hidden_state"],
        {},
        f"DeBERTa-v3-small, {batch} x {sequence} tokens",
    )


def vit_base(batch: int = 2) -> Export:
    """ViT-base/16 at 224 x 224 (12 layers x 768, 197 tokens), ``batch`` images."""
    from torch import nn
    from transformers import ViTConfig, ViTModel

    rng = _seed(14)
    config = ViTConfig()  # ViT-base, patch 16, 224 x 224
    model = ViTModel(config).eval()

    class Forward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            out = self.model(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    inputs = {"pixel_values": _randn(rng, batch, 3, config.image_size, config.image_size)}
    return Export(
        Forward(),
        inputs,
        ["last_hidden_state", "pooler_output"],
        {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}, "pooler_output": {0: "batch"}},
        f"ViT-base/16, {batch} images of 224 x 224",
    )


MODELS: dict[str, Callable[[], Export]] = {
    "gpt2": gpt2_step,
    "bert": bert_base,
    "llama": llama_static,
    "qwen2": qwen2_static,
    "t5": t5_small,
    "deberta": deberta_v3_small,
    "vit": vit_base,
}


def _traceable_masks() -> None:
    """transformers 4.x builds attention masks with ``torch.vmap`` on torch >= 2.6, which the TorchScript
    tracer cannot follow (``RuntimeError: unordered_map::at`` for GPT-2 with a padding mask); its
    broadcasting builder for older torch computes the same mask and traces."""
    from transformers import masking_utils

    older = getattr(masking_utils, "sdpa_mask_older_torch", None)
    if older is None:
        return
    masking_utils.sdpa_mask = older
    mapping = getattr(masking_utils.ALL_MASK_ATTENTION_FUNCTIONS, "_global_mapping", None)
    if isinstance(mapping, dict) and "sdpa" in mapping:
        mapping["sdpa"] = older


def export(name: str, out_dir: Path, external: bool) -> dict[str, Any]:
    """Export ``name`` into ``out_dir``; check it in onnxruntime against PyTorch; describe the files."""
    import onnx
    import onnxruntime as ort
    import torch

    start = time.perf_counter()
    _traceable_masks()
    built = MODELS[name]()
    with torch.no_grad():
        expected = built.module(*built.inputs.values())
    if not isinstance(expected, tuple | list):
        expected = (expected,)
    out_dir.mkdir(parents=True, exist_ok=True)
    path, tmp = out_dir / f"{name}.onnx", out_dir / f".{name}.tmp.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            built.module,
            tuple(built.inputs.values()),
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(built.inputs),
            output_names=built.output_names,
            dynamic_axes=built.dynamic_axes or None,
        )
    model = onnx.load(str(tmp))
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)
    if external:
        onnx.save(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,
        )
    else:
        onnx.save(model, str(path))
    for leftover in out_dir.glob(f".{name}.tmp.onnx*"):
        leftover.unlink()
    graph_inputs = [i.name for i in model.graph.input]
    feeds = {n: built.inputs[n].numpy() for n in graph_inputs}
    np.savez(out_dir / f"{name}.npz", **feeds)
    del model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    got = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = 0.0
    for want, have in zip(expected, got, strict=True):
        worst = max(worst, float(np.max(np.abs(want.numpy() - have))))
    if worst > 1e-3:
        raise AssertionError(f"{name}: onnxruntime differs from PyTorch by {worst}")
    size = path.stat().st_size + (data.stat().st_size if data.exists() else 0)
    import transformers

    return {
        "model": name,
        "description": built.description,
        "file": str(path),
        "feeds": str(out_dir / f"{name}.npz"),
        "megabytes": size / 2**20,
        "external": external,
        "seconds": time.perf_counter() - start,
        "max_abs_diff_vs_torch": worst,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--external", action="store_true", help="weights in <model>.onnx.data")
    args = parser.parse_args(argv)
    print(json.dumps(export(args.model, args.out_dir, args.external)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
