"""Real-configuration models for ``bench/realistic_hf.py``, exported from transformers with random weights.

Run by ``realistic_hf.py`` in a fresh process of a Python that has torch and transformers (the ``export``
extra; never the measuring Python)::

    python bench/realistic_hf_models.py MODEL OUT_DIR [--external]

``MODEL`` is one of :data:`MODELS`. Each model is a transformers class built from a real configuration
(GPT-2 small, BERT-base, a Llama-style decoder of 6 layers x 768) with weights drawn from a fixed seed -
no model hub, no network - wrapped the way ``onnx_models/real/export_real.py`` wraps the tiny corpus
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


def llama_static(layers: int = 6, hidden: int = 768, past: int = 127, cache_len: int = 256) -> Export:
    """A Llama-style decoder (``layers`` x ``hidden``, vocabulary 32000) writing one token into a
    transformers ``StaticCache`` of ``cache_len`` positions at ``cache_position = past``."""
    import torch
    from torch import nn
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    rng = _seed(4)
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
    kv_heads, head_dim = config.num_key_value_heads, hidden // config.num_attention_heads

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
    return Export(
        Step(),
        inputs,
        ["logits", *_cache_names(layers, "new_cache")],
        {},
        f"Llama-style static-cache step, {layers} layers x {hidden}, {past}-token past of {cache_len}",
    )


MODELS: dict[str, Callable[[], Export]] = {"gpt2": gpt2_step, "bert": bert_base, "llama": llama_static}


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
