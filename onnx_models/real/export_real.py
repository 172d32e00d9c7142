"""Export the real-architecture corpus in ``onnx_models/real/``.

Every model here is a real network class (transformers, torchvision, or a plain PyTorch module written
the way graph-network libraries write message passing) built from a deliberately tiny configuration with
random weights drawn from a fixed seed: no model hub, no network. Each is exported by the dynamo-based
``torch.onnx.export(..., dynamo=True)`` and, where it works, by the legacy TorchScript exporter
(``dynamo=False``), so the corpus holds the ONNX that both converters write for the same network.

For every export the script writes ``<name>.onnx`` and ``<name>.npz`` (one array per graph input, keyed
by the input's name, no pickles), checks that onnxruntime CPU reproduces the PyTorch output on that
sample and, for models with symbolic dimensions, on a second sample of other sizes, and records the
model in ``manifest.json``.

Regenerate (torch is only an optional extra; tests and the runtime never need it)::

    python3 -m venv venv-export && venv-export/bin/pip install torch==2.13.0   # the CPU wheel
    venv-export/bin/pip install '.[export]'
    venv-export/bin/python onnx_models/real/export_real.py             # transformers + plain torch

    # torchvision needs a torch that its wheel was built against (2.14.1 for torchvision 0.29.1)
    python3 -m venv venv-export-tv
    venv-export-tv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx onnxruntime onnxscript
    venv-export-tv/bin/python onnx_models/real/export_real.py --only torchvision

``--only WORD`` exports the models whose name or group contains WORD; ``--list`` lists them. Models whose
library is not installed are skipped with a message and keep their manifest entry.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

try:
    import torch
    from torch import nn
    from torch.export import Dim
except ImportError as exc:  # pragma: no cover - only for people regenerating the files
    raise SystemExit("export_real.py needs torch and onnxscript: pip install '.[export]'") from exc

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
#: Opsets: 18 for dynamo (its own default is newer; 18 is what onnxruntime >= 1.20 fully runs), 17 for
#: the legacy exporter (its highest well-tested opset).
DYNAMO_OPSET = 18
LEGACY_OPSET = 17
#: IR version cap: what every onnxruntime the project supports (>= 1.20) reads.
MAX_IR_VERSION = 10
#: Every model must stay below this (the corpus is committed).
MAX_BYTES = 2 * 1024 * 1024
GATHER_SCATTER_OPS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")
CONTROL_FLOW_OPS = ("If", "Loop", "Scan")
#: Node metadata kept from the dynamo exporter; the rest (stack traces with local paths) is dropped.
KEPT_METADATA = frozenset({"namespace"})

Inputs = dict[str, "torch.Tensor"]


@dataclass(frozen=True)
class Built:
    """A module ready to export: its inputs (in forward-argument order) and how its shapes vary."""

    module: nn.Module
    inputs: Inputs
    output_names: Sequence[str]
    #: dynamo: ``dynamic_shapes`` keyed by forward argument name (None: all static).
    dynamo_shapes: dict[str, Any] | None = None
    #: legacy: ``dynamic_axes`` keyed by input/output name.
    legacy_axes: dict[str, dict[int, str]] | None = None
    #: A second sample with other symbolic sizes, checked in onnxruntime against PyTorch.
    other_inputs: Inputs | None = None


@dataclass(frozen=True)
class Spec:
    """One network of the corpus; each exporter in ``exporters`` writes ``<name>_<exporter>.onnx``."""

    name: str
    group: str  # "transformers", "torch" or "torchvision": the library it needs
    architecture: str
    description: str
    build: Callable[[], Built]
    exporters: Sequence[str] = ("dynamo", "torchscript")
    dtype: str = "float32"
    rtol: float = 1e-4
    atol: float = 1e-5
    notes: Sequence[str] = field(default_factory=tuple)


def _seed(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def _eager_attention(model: nn.Module) -> nn.Module:
    """Switch a transformers model to its eager attention: with SDPA, dynamo's decomposition views a
    non-contiguous attention output under symbolic sizes and fails (T5, Swin)."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
    return model


def _ids(rng: np.random.Generator, vocab: int, *shape: int) -> torch.Tensor:
    return torch.from_numpy(rng.integers(0, vocab, size=shape, dtype=np.int64))


def _randn(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(shape).astype(dtype))


# --------------------------------------------------------------------------------------------------
# transformers decoders with a key/value cache
# --------------------------------------------------------------------------------------------------


class DynamicCacheStep(nn.Module):
    """One decoding step of a causal LM with past key/values passed in and the present ones returned."""

    def __init__(self, model: nn.Module, layers: int) -> None:
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(self.layers)]
        cache = DynamicCache(pairs, config=self.model.config)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        present: list[torch.Tensor] = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def _past_names(layers: int, prefix: str = "past") -> list[str]:
    return [f"{prefix}_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]


class GPT2Step(DynamicCacheStep):
    def forward(  # type: ignore[override]
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_0: torch.Tensor,
        past_value_0: torch.Tensor,
        past_key_1: torch.Tensor,
        past_value_1: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        return super().forward(
            input_ids, attention_mask, position_ids, past_key_0, past_value_0, past_key_1, past_value_1
        )


def _decoder_step(
    model: nn.Module, wrapper: type[DynamicCacheStep], heads: int, head_dim: int, vocab: int, seed: int
) -> Built:
    layers = 2
    rng = np.random.default_rng(seed)

    def sample(past_len: int, batch: int) -> Inputs:
        inputs: Inputs = {
            "input_ids": _ids(rng, vocab, batch, 1),
            "attention_mask": torch.ones(batch, past_len + 1, dtype=torch.int64),
            "position_ids": torch.full((batch, 1), past_len, dtype=torch.int64),
        }
        for name in _past_names(layers):
            inputs[name] = _randn(rng, batch, heads, past_len, head_dim)
        return inputs

    past = Dim("past_sequence_length", min=1, max=48)
    batch = Dim("batch_size", min=1, max=8)
    dynamo_shapes: dict[str, Any] = {
        "input_ids": {0: batch},
        "attention_mask": {0: batch, 1: past + 1},
        "position_ids": {0: batch},
    }
    legacy_axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch_size"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size"},
        "logits": {0: "batch_size"},
    }
    for name in _past_names(layers):
        dynamo_shapes[name] = {0: batch, 2: past}
        legacy_axes[name] = {0: "batch_size", 2: "past_sequence_length"}
    for name in _past_names(layers, "present"):
        legacy_axes[name] = {0: "batch_size", 2: "total_sequence_length"}
    return Built(
        module=wrapper(model.eval(), layers),
        inputs=sample(past_len=5, batch=1),
        output_names=["logits", *_past_names(layers, "present")],
        dynamo_shapes=dynamo_shapes,
        legacy_axes=legacy_axes,
        other_inputs=sample(past_len=9, batch=2),
    )


def build_gpt2() -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    _seed(0)
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    return _decoder_step(GPT2LMHeadModel(cfg), GPT2Step, heads=2, head_dim=16, vocab=256, seed=1)


def build_qwen2() -> Built:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _seed(2)
    cfg = Qwen2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return _decoder_step(Qwen2ForCausalLM(cfg), GPT2Step, heads=2, head_dim=8, vocab=300, seed=3)


class StaticCacheStep(nn.Module):
    """A decoding step with transformers' ``StaticCache``: the new keys/values are written in place
    (``index_copy_``) at ``cache_position`` into fixed-size caches passed in and returned."""

    def __init__(self, model: nn.Module, max_cache_len: int) -> None:
        super().__init__()
        self.model = model
        self.max_cache_len = max_cache_len

    def forward(
        self,
        input_ids: torch.Tensor,
        cache_position: torch.Tensor,
        key_cache_0: torch.Tensor,
        value_cache_0: torch.Tensor,
        key_cache_1: torch.Tensor,
        value_cache_1: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        from transformers import StaticCache

        cache = StaticCache(config=self.model.config, max_cache_len=self.max_cache_len)
        for layer, k, v in zip(
            cache.layers, (key_cache_0, key_cache_1), (value_cache_0, value_cache_1), strict=True
        ):
            layer.lazy_initialization(k, v)
            # Clones: the caller's buffers stay untouched, the updated caches are outputs.
            layer.keys = k.clone()
            layer.values = v.clone()
            layer.cumulative_length = cache_position[0].clone()
        out = self.model(
            input_ids=input_ids,
            cache_position=cache_position,
            position_ids=cache_position.unsqueeze(0),
            past_key_values=cache,
            use_cache=True,
        )
        layers = cache.layers
        return out.logits, layers[0].keys, layers[0].values, layers[1].keys, layers[1].values


def build_llama_static() -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    rng = _seed(4)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    cache_len = 16
    inputs: Inputs = {"input_ids": _ids(rng, 256, 1, 2), "cache_position": torch.tensor([5, 6])}
    for i in range(2):
        # Positions >= 5 are not yet written: zeros, as in a fresh static cache.
        for kind in ("key", "value"):
            buf = _randn(rng, 1, 2, cache_len, 8)
            buf[:, :, 5:] = 0
            inputs[f"{kind}_cache_{i}"] = buf
    outputs = ["logits", "new_key_cache_0", "new_value_cache_0", "new_key_cache_1", "new_value_cache_1"]
    return Built(StaticCacheStep(LlamaForCausalLM(cfg).eval(), cache_len), inputs, outputs)


class MoEForward(nn.Module):
    """A Mixtral causal LM forward returning logits and the router logits of every layer."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_router_logits=True
        )
        return (out.logits, *out.router_logits)


def build_mixtral() -> Built:
    from transformers import MixtralConfig, MixtralForCausalLM

    rng = _seed(5)
    cfg = MixtralConfig(
        vocab_size=200,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        sliding_window=None,
    )
    # The experts' weights are indexed by the routed expert ids (a Gather per projection) instead of the
    # default Python loop over experts, which no exporter can follow (data-dependent trip count).
    cfg._experts_implementation = "batched_mm"
    model = MixtralForCausalLM(cfg).eval()
    seq = Dim("sequence_length", min=2, max=32)
    batch = Dim("batch_size", min=1, max=8)

    def sample(b: int, s: int) -> Inputs:
        mask = torch.ones(b, s, dtype=torch.int64)
        # Right padding on the first row. (Left padding leaves fully masked query rows whose garbage
        # output differs between PyTorch and the dynamo export; right padding is what training uses.)
        mask[0, s - s // 3 :] = 0
        return {"input_ids": _ids(rng, 200, b, s), "attention_mask": mask}

    outputs = ["logits", "router_logits_0", "router_logits_1"]
    return Built(
        MoEForward(model),
        sample(2, 6),
        outputs,
        dynamo_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        legacy_axes={
            "input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"},
        },
        other_inputs=sample(3, 4),
    )


# --------------------------------------------------------------------------------------------------
# transformers encoders and encoder-decoders
# --------------------------------------------------------------------------------------------------


class BertForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def _bert(dtype: torch.dtype) -> Built:
    from transformers import BertConfig, BertModel

    rng = _seed(6)
    cfg = BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        type_vocab_size=2,
    )
    model = BertModel(cfg).eval().to(dtype)

    def sample(b: int, s: int) -> Inputs:
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[-1, s - 2 :] = 0  # right padding on the last row
        types = torch.zeros(b, s, dtype=torch.int64)
        types[:, s // 2 :] = 1
        return {"input_ids": _ids(rng, 300, b, s), "attention_mask": mask, "token_type_ids": types}

    batch = Dim("batch_size", min=1, max=8)
    seq = Dim("sequence_length", min=2, max=64)
    axes = {0: "batch_size", 1: "sequence_length"}
    return Built(
        BertForward(model),
        sample(2, 7),
        ["last_hidden_state", "pooler_output"],
        dynamo_shapes={n: {0: batch, 1: seq} for n in ("input_ids", "attention_mask", "token_type_ids")},
        legacy_axes={
            **{n: axes for n in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
            "pooler_output": {0: "batch_size"},
        },
        other_inputs=sample(3, 11),
    )


def build_bert() -> Built:
    return _bert(torch.float32)


def build_bert_fp16() -> Built:
    return _bert(torch.float16)


class Seq2SeqForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
        )
        return out.logits, out.encoder_last_hidden_state


def _seq2seq(model: nn.Module, vocab: int, seed: int) -> Built:
    rng = np.random.default_rng(seed)

    def sample(b: int, s: int, t: int) -> Inputs:
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s - 2 :] = 0
        return {
            "input_ids": _ids(rng, vocab, b, s),
            "attention_mask": mask,
            "decoder_input_ids": _ids(rng, vocab, b, t),
        }

    batch = Dim("batch_size", min=1, max=8)
    src = Dim("encoder_sequence_length", min=2, max=48)
    tgt = Dim("decoder_sequence_length", min=1, max=48)
    return Built(
        Seq2SeqForward(model.eval()),
        sample(2, 8, 3),
        ["logits", "encoder_last_hidden_state"],
        dynamo_shapes={
            "input_ids": {0: batch, 1: src},
            "attention_mask": {0: batch, 1: src},
            "decoder_input_ids": {0: batch, 1: tgt},
        },
        legacy_axes={
            "input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
            "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
            "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"},
        },
        other_inputs=sample(3, 5, 4),
    )


def build_bart() -> Built:
    from transformers import BartConfig, BartForConditionalGeneration

    _seed(7)
    cfg = BartConfig(
        vocab_size=256,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
    )
    return _seq2seq(BartForConditionalGeneration(cfg), 256, seed=8)


def build_t5() -> Built:
    from transformers import T5Config, T5ForConditionalGeneration

    _seed(9)
    cfg = T5Config(
        vocab_size=256,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        decoder_start_token_id=0,
    )
    return _seq2seq(_eager_attention(T5ForConditionalGeneration(cfg)), 256, seed=10)


class WhisperForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False)
        return out.logits


def build_whisper() -> Built:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    rng = _seed(11)
    cfg = WhisperConfig(
        vocab_size=128,
        num_mel_bins=8,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
    )
    model = WhisperForConditionalGeneration(cfg).eval()
    tgt = Dim("decoder_sequence_length", min=1, max=32)
    batch = Dim("batch_size", min=1, max=8)

    def sample(b: int, t: int) -> Inputs:
        return {"input_features": _randn(rng, b, 8, 32), "decoder_input_ids": _ids(rng, 128, b, t)}

    return Built(
        WhisperForward(model),
        sample(1, 4),
        ["logits"],
        dynamo_shapes={"input_features": {0: batch}, "decoder_input_ids": {0: batch, 1: tgt}},
        legacy_axes={
            "input_features": {0: "batch_size"},
            "decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"},
        },
        other_inputs=sample(2, 3),
    )


class SwinForward(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def build_swin() -> Built:
    from transformers import SwinConfig, SwinForImageClassification

    rng = _seed(12)
    cfg = SwinConfig(
        image_size=32,
        patch_size=4,
        num_channels=3,
        embed_dim=16,
        depths=[2, 1],
        num_heads=[2, 2],
        window_size=4,
        mlp_ratio=2.0,
        num_labels=10,
    )
    model = _eager_attention(SwinForImageClassification(cfg)).eval()
    batch = Dim("batch_size", min=1, max=8)
    return Built(
        SwinForward(model),
        {"pixel_values": _randn(rng, 2, 3, 32, 32)},
        ["logits"],
        dynamo_shapes={"pixel_values": {0: batch}},
        legacy_axes={"pixel_values": {0: "batch_size"}, "logits": {0: "batch_size"}},
        other_inputs={"pixel_values": _randn(rng, 3, 3, 32, 32)},
    )


# --------------------------------------------------------------------------------------------------
# Plain PyTorch modules written the way libraries write them
# --------------------------------------------------------------------------------------------------


class GCNLayerScatter(nn.Module):
    """Two rounds of GCN message passing as torch_geometric writes them with plain torch: gather the
    source nodes (``index_select``), normalise by degree (``scatter_add`` of ones), sum the messages into
    the targets (``scatter_add`` with the index broadcast over features, as torch_geometric's ``scatter``
    does), then a mean readout per graph (sum and count)."""

    def __init__(self, dim: int = 16, hidden: int = 16, graphs: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)
        self.graphs = graphs

    def propagate(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        n = x.shape[0]
        ones = torch.ones_like(dst, dtype=x.dtype)
        deg = torch.zeros(n, dtype=x.dtype).scatter_add(0, dst, ones) + 1.0
        norm = deg.rsqrt()
        messages = x.index_select(0, src) * (norm[src] * norm[dst]).unsqueeze(-1)
        # scatter_add, not index_add: the legacy exporter's index_add is wrong for repeated indices.
        out = torch.zeros_like(x).scatter_add(0, dst.unsqueeze(-1).expand_as(messages), messages)
        return out + x * (norm * norm).unsqueeze(-1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lin1(self.propagate(x, edge_index)))
        h = torch.relu(self.lin2(self.propagate(h, edge_index)))
        index = batch.unsqueeze(-1).expand(-1, h.shape[1])
        # Mean readout as torch_geometric's scatter(reduce="mean") computes it: sum, then divide by the
        # count (scatter_reduce(reduce="mean") has no ONNX form in the legacy exporter, and dynamo's
        # translation of it disagrees with PyTorch).
        summed = torch.zeros(self.graphs, h.shape[1], dtype=h.dtype).scatter_add(0, index, h)
        count = torch.zeros(self.graphs, dtype=h.dtype).scatter_add(
            0, batch, torch.ones_like(batch, dtype=h.dtype)
        )
        pooled = summed / count.clamp(min=1.0).unsqueeze(-1)
        return self.head(pooled)


def build_gnn() -> Built:
    rng = _seed(13)

    def sample(nodes: int, edges: int) -> Inputs:
        batch = np.sort(rng.integers(0, 4, size=nodes))
        batch[:4] = np.arange(4)  # every graph has a node
        batch = np.sort(batch)
        return {
            "x": _randn(rng, nodes, 16),
            "edge_index": torch.from_numpy(rng.integers(0, nodes, size=(2, edges), dtype=np.int64)),
            "batch": torch.from_numpy(batch.astype(np.int64)),
        }

    nodes = Dim("num_nodes", min=4, max=1024)
    edges = Dim("num_edges", min=1, max=4096)
    return Built(
        GCNLayerScatter().eval(),
        sample(12, 30),
        ["graph_logits"],
        dynamo_shapes={"x": {0: nodes}, "edge_index": {1: edges}, "batch": {0: nodes}},
        legacy_axes={"x": {0: "num_nodes"}, "edge_index": {1: "num_edges"}, "batch": {0: "num_nodes"}},
        other_inputs=sample(20, 45),
    )


class BeamSearchStep(nn.Module):
    """One beam-search bookkeeping step as generation loops write it: reorder the cache by beam
    (``torch.gather`` along the beam axis via advanced indexing), pick each beam's last-token hidden
    state (``h[arange, lengths - 1]``), write the new token into a fixed token buffer (``index_put``),
    gather the chosen tokens' log-probs (``torch.gather``) and mark finished beams (``scatter``)."""

    def __init__(self, dim: int = 16, vocab: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, vocab)

    def forward(
        self,
        cache: torch.Tensor,
        beam_idx: torch.Tensor,
        hidden: torch.Tensor,
        lengths: torch.Tensor,
        tokens: torch.Tensor,
        step: torch.Tensor,
        finished_ids: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        beams = cache.shape[0]
        index = beam_idx.view(-1, 1, 1, 1).expand_as(cache)
        reordered = torch.gather(cache, 0, index)
        last = hidden[torch.arange(beams), lengths - 1]
        logp = torch.log_softmax(self.proj(last), dim=-1)
        best = logp.argmax(dim=-1, keepdim=True)
        best_logp = torch.gather(logp, 1, best).squeeze(1)
        new_tokens = tokens.clone()
        new_tokens[torch.arange(beams), step] = best.squeeze(1)
        finished = torch.zeros(beams, dtype=torch.float32).scatter(0, finished_ids, 1.0)
        return reordered, best_logp, new_tokens, finished


def build_beam_step() -> Built:
    rng = _seed(14)

    def sample(beams: int) -> Inputs:
        return {
            "cache": _randn(rng, beams, 2, 6, 8),
            "beam_idx": torch.from_numpy(rng.integers(0, beams, size=beams, dtype=np.int64)),
            "hidden": _randn(rng, beams, 10, 16),
            "lengths": torch.from_numpy(rng.integers(1, 11, size=beams, dtype=np.int64)),
            "tokens": _ids(rng, 64, beams, 12),
            "step": torch.from_numpy(rng.integers(0, 12, size=beams, dtype=np.int64)),
            "finished_ids": torch.from_numpy(rng.permutation(beams)[:2].astype(np.int64)),
        }

    beams = Dim("num_beams", min=2, max=16)
    shapes = {n: {0: beams} for n in ("cache", "beam_idx", "hidden", "lengths", "tokens", "step")}
    return Built(
        BeamSearchStep().eval(),
        sample(4),
        ["reordered_cache", "best_logprob", "new_tokens", "finished"],
        dynamo_shapes={**shapes, "finished_ids": None},
        legacy_axes={
            **{n: {0: "num_beams"} for n in shapes},
            **{n: {0: "num_beams"} for n in ("reordered_cache", "best_logprob", "new_tokens", "finished")},
        },
        other_inputs=sample(6),
    )


# --------------------------------------------------------------------------------------------------
# torchvision detection (If/Loop from the scripted parts of the postprocess)
# --------------------------------------------------------------------------------------------------


def _tiny_backbone(out_channels: int) -> nn.Module:
    body = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, out_channels, 3, stride=2, padding=1),
        nn.ReLU(),
    )
    body.out_channels = out_channels  # type: ignore[assignment]
    return body


class DetectionForward(nn.Module):
    """A torchvision detector on one image tensor, returning the first image's boxes/scores/labels."""

    def __init__(self, model: nn.Module, masks: bool = False) -> None:
        super().__init__()
        self.model = model
        self.masks = masks

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model([image])[0]
        result = (out["boxes"], out["scores"], out["labels"])
        return (*result, out["masks"]) if self.masks else result


def _rcnn(masks: bool) -> Built:
    from torchvision.models.detection import FasterRCNN, MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    rng = _seed(15 if masks else 16)
    anchors = AnchorGenerator(sizes=((8, 16),), aspect_ratios=((0.5, 1.0, 2.0),))
    kwargs: dict[str, Any] = {
        "num_classes": 4,
        "min_size": 64,
        "max_size": 64,
        "rpn_anchor_generator": anchors,
        "box_roi_pool": MultiScaleRoIAlign(["0"], output_size=4, sampling_ratio=2),
        "rpn_pre_nms_top_n_test": 50,
        "rpn_post_nms_top_n_test": 20,
        "box_detections_per_img": 10,
        "box_score_thresh": 0.0,
        "representation_size": 32,
    }
    if masks:
        from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

        kwargs["mask_roi_pool"] = MultiScaleRoIAlign(["0"], output_size=7, sampling_ratio=2)
        kwargs["mask_head"] = MaskRCNNHeads(16, (8,), 1)
        kwargs["mask_predictor"] = MaskRCNNPredictor(8, 8, 4)
    from torchvision.models.detection.faster_rcnn import TwoMLPHead

    rep = kwargs.pop("representation_size")
    kwargs["box_head"] = TwoMLPHead(16 * 4 * 4, rep)
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor

    kwargs["box_predictor"] = FastRCNNPredictor(rep, 4)
    kwargs.pop("num_classes")
    cls = MaskRCNN if masks else FasterRCNN
    model = cls(_tiny_backbone(16), num_classes=None, **kwargs).eval()
    outputs = ["boxes", "scores", "labels"] + (["masks"] if masks else [])
    image = torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))
    return Built(
        DetectionForward(model, masks),
        {"image": image},
        outputs,
        legacy_axes={n: {0: "num_detections"} for n in outputs},
        other_inputs={"image": torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))},
    )


def build_fasterrcnn() -> Built:
    return _rcnn(masks=False)


def build_maskrcnn() -> Built:
    return _rcnn(masks=True)


def build_retinanet() -> Built:
    from torchvision.models.detection import RetinaNet
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    rng = _seed(17)
    anchors = AnchorGenerator(sizes=((8, 16),), aspect_ratios=((0.5, 1.0, 2.0),))
    model = RetinaNet(
        _tiny_backbone(16),
        num_classes=4,
        min_size=64,
        max_size=64,
        anchor_generator=anchors,
        topk_candidates=20,
        detections_per_img=10,
        score_thresh=0.0,
    ).eval()
    return Built(
        DetectionForward(model),
        {"image": torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))},
        ["boxes", "scores", "labels"],
        legacy_axes={n: {0: "num_detections"} for n in ("boxes", "scores", "labels")},
        other_inputs={"image": torch.from_numpy(rng.random((3, 64, 64), dtype=np.float32))},
    )


SPECS: tuple[Spec, ...] = (
    Spec(
        "gpt2_past",
        "transformers",
        "GPT2LMHeadModel",
        "decoder step with past key/values (2 layers)",
        build_gpt2,
    ),
    Spec(
        "qwen2_past", "transformers", "Qwen2ForCausalLM", "GQA decoder step with past key/values", build_qwen2
    ),
    Spec(
        "llama_static_cache",
        "transformers",
        "LlamaForCausalLM",
        "2-token step writing a StaticCache in place (index_copy_) at cache_position",
        build_llama_static,
    ),
    Spec(
        "mixtral_moe",
        "transformers",
        "MixtralForCausalLM",
        "MoE causal LM, top-2 of 4 experts, experts gathered by routed id (batched_mm)",
        build_mixtral,
    ),
    Spec("bert", "transformers", "BertModel", "encoder with padding mask and token types", build_bert),
    # The legacy exporter writes fp16 LayerNormalization with an fp32 scale (onnx rejects the model).
    Spec(
        "bert_fp16",
        "transformers",
        "BertModel",
        "the BERT encoder in float16",
        build_bert_fp16,
        exporters=("dynamo",),
        dtype="float16",
        rtol=2e-2,
        atol=2e-2,
    ),
    Spec("bart", "transformers", "BartForConditionalGeneration", "encoder-decoder forward", build_bart),
    Spec(
        "t5",
        "transformers",
        "T5ForConditionalGeneration",
        "encoder-decoder with relative position buckets",
        build_t5,
    ),
    Spec(
        "whisper",
        "transformers",
        "WhisperForConditionalGeneration",
        "speech encoder-decoder on log-mel features",
        build_whisper,
        exporters=("dynamo",),
    ),  # legacy: aten::diff has no ONNX symbolic
    Spec(
        "swin",
        "transformers",
        "SwinForImageClassification",
        "windowed attention with relative position bias table",
        build_swin,
    ),
    Spec(
        "gnn_scatter",
        "torch",
        "GCN (plain torch)",
        "message passing with index_select and scatter_add, mean readout per graph",
        build_gnn,
    ),
    Spec(
        "beam_search_step",
        "torch",
        "beam search bookkeeping (plain torch)",
        "torch.gather, advanced indexing, index_put and scatter on beams",
        build_beam_step,
    ),
    Spec(
        "fasterrcnn",
        "torchvision",
        "torchvision FasterRCNN",
        "tiny backbone, RPN + RoIAlign + box head, NMS postprocess",
        build_fasterrcnn,
        exporters=("torchscript",),
    ),
    Spec(
        "maskrcnn",
        "torchvision",
        "torchvision MaskRCNN",
        "FasterRCNN plus mask head and paste-masks Loop",
        build_maskrcnn,
        exporters=("torchscript",),
    ),
    Spec(
        "retinanet",
        "torchvision",
        "torchvision RetinaNet",
        "single-stage detector with per-level top-k and batched NMS",
        build_retinanet,
        exporters=("torchscript",),
    ),
)


# --------------------------------------------------------------------------------------------------
# Export, check, record
# --------------------------------------------------------------------------------------------------


def _walk_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _walk_nodes(attr.g)
            for sub in attr.graphs:
                yield from _walk_nodes(sub)


def clean_model(model: onnx.ModelProto) -> None:
    """Drop the exporter's debugging metadata (stack traces name local paths) and doc strings."""
    for node in _walk_nodes(model.graph):
        node.doc_string = ""
        kept = [p for p in node.metadata_props if p.key in KEPT_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    model.doc_string = ""
    model.graph.doc_string = ""


def op_counts(model: onnx.ModelProto, ops: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in _walk_nodes(model.graph):
        if node.domain in ("", "ai.onnx") and node.op_type in ops:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _expected(built: Built) -> list[tuple[str, Inputs, list[np.ndarray]]]:
    """PyTorch's outputs on the sample(s), computed before exporting: the legacy exporter leaves some
    transformers modules in a state where eager calls give other results."""
    samples = [("sample", built.inputs)]
    if built.other_inputs is not None:
        samples.append(("other sizes", built.other_inputs))
    result = []
    for label, inputs in samples:
        with torch.no_grad():
            out = built.module(*inputs.values())
        outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        result.append((label, inputs, [_to_numpy(t) for t in outs]))
    return result


def _check(
    path: Path, expected: list[tuple[str, Inputs, list[np.ndarray]]], built: Built, spec: Spec
) -> list[str]:
    """Run the file in onnxruntime CPU against PyTorch on the sample (and the second sample)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    checked = []
    for label, inputs, want_all in expected:
        got = session.run(None, {n: _to_numpy(inputs[n]) for n in names})
        for out_name, want_np, have in zip(built.output_names, want_all, got, strict=True):
            where = f"{path.name} ({label}): {out_name}"
            if want_np.shape != have.shape:
                raise AssertionError(f"{where}: shape {have.shape} != {want_np.shape}")
            if np.issubdtype(want_np.dtype, np.floating):
                np.testing.assert_allclose(
                    have.astype(np.float32),
                    want_np.astype(np.float32),
                    rtol=spec.rtol,
                    atol=spec.atol,
                    err_msg=where,
                )
            else:
                np.testing.assert_array_equal(have, want_np, err_msg=where)
        checked.append(label)
    return checked


def export_one(spec: Spec, exporter: str, out_dir: Path = HERE) -> dict[str, Any]:
    name = f"{spec.name}_{exporter}"
    built = spec.build()
    expected = _expected(built)
    path = out_dir / f"{name}.onnx"
    args = tuple(built.inputs.values())
    names = list(built.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(
                built.module,
                args,
                dynamo=True,
                opset_version=DYNAMO_OPSET,
                input_names=names,
                output_names=list(built.output_names),
                dynamic_shapes=built.dynamo_shapes,
                verbose=False,
            )
            assert program is not None
            model = program.model_proto
            opset = DYNAMO_OPSET
        else:
            tmp = out_dir / f".{name}.tmp.onnx"
            torch.onnx.export(
                built.module,
                args,
                str(tmp),
                dynamo=False,
                opset_version=LEGACY_OPSET,
                input_names=names,
                output_names=list(built.output_names),
                dynamic_axes=built.legacy_axes,
            )
            model = onnx.load(str(tmp))
            tmp.unlink()
            opset = LEGACY_OPSET
    clean_model(model)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    graph_inputs = [i.name for i in model.graph.input]
    npz = out_dir / f"{name}.npz"
    np.savez(npz, **{n: _to_numpy(built.inputs[n]) for n in graph_inputs})
    checked = _check(path, expected, built, spec)
    size = path.stat().st_size
    if size >= MAX_BYTES:
        raise AssertionError(f"{path.name} is {size} bytes, over the corpus limit of {MAX_BYTES}")
    symbolic = sorted(
        {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    )
    import onnxruntime

    versions = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__}
    for lib in ("transformers", "torchvision", "onnxscript"):
        module = sys.modules.get(lib)
        if module is not None:
            versions[lib] = module.__version__
    return {
        "name": name,
        "file": path.name,
        "inputs_file": npz.name,
        "architecture": spec.architecture,
        "group": spec.group,
        "description": spec.description,
        "exporter": exporter,
        "opset": opset,
        "ir_version": model.ir_version,
        "dtype": spec.dtype,
        "onnx_bytes": size,
        "npz_bytes": npz.stat().st_size,
        "nodes": sum(1 for _ in _walk_nodes(model.graph)),
        "gather_scatter_ops": op_counts(model, GATHER_SCATTER_OPS),
        "control_flow_ops": op_counts(model, CONTROL_FLOW_OPS),
        "inputs": {
            i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input
        },
        "symbolic_dims": symbolic,
        "checked_in_onnxruntime": checked,
        "versions": versions,
    }


def _load_manifest() -> dict[str, dict[str, Any]]:
    if not MANIFEST.exists():
        return {}
    return {m["name"]: m for m in json.loads(MANIFEST.read_text())["models"]}


def _save_manifest(entries: dict[str, dict[str, Any]]) -> None:
    doc = {
        "description": "Real-architecture ONNX corpus; regenerate with onnx_models/real/export_real.py",
        "models": [entries[k] for k in sorted(entries)],
    }
    MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")


def _group_available(group: str) -> bool:
    try:
        if group == "transformers":
            import transformers  # noqa: F401
        elif group == "torchvision":
            import torchvision  # noqa: F401
    except Exception as exc:  # torchvision raises RuntimeError beside a torch it was not built for
        print(f"skipping {group} models: {exc}", file=sys.stderr)
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="export models whose name/group has WORD")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--traceback", action="store_true", help="print the traceback of a failed export")
    args = parser.parse_args(argv)
    if args.list:
        for spec in SPECS:
            print(f"{spec.name:20} {spec.group:13} {','.join(spec.exporters):20} {spec.architecture}")
        return 0
    entries = _load_manifest()
    available: dict[str, bool] = {}
    failures: list[str] = []
    for spec in SPECS:
        if args.only and not any(w in spec.name or w == spec.group for w in args.only):
            continue
        if spec.group not in available:
            available[spec.group] = _group_available(spec.group)
        if not available[spec.group]:
            continue
        for exporter in spec.exporters:
            name = f"{spec.name}_{exporter}"
            print(f"exporting {name} ...", flush=True)
            try:
                entries[name] = export_one(spec, exporter)
            except Exception as exc:  # report and go on: one exporter failing is itself a finding
                for suffix in (".onnx", ".npz"):
                    (HERE / f"{name}{suffix}").unlink(missing_ok=True)
                lines = [line for line in str(exc).splitlines() if line.strip()]
                first = " / ".join(lines[:3])[:400]
                failures.append(f"{name}: {type(exc).__name__}: {first}")
                print(f"  FAILED {failures[-1]}", flush=True)
                if args.traceback:
                    traceback.print_exc()
                continue
            e = entries[name]
            print(f"  {e['onnx_bytes']} bytes, {e['gather_scatter_ops']} {e['control_flow_ops']}", flush=True)
    _save_manifest(entries)
    for failure in failures:
        print("failed:", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
