"""transformers decoders of the corpus: decoding steps with past key/values or a static cache, and a
mixture-of-experts LM."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from export_common import Built, Inputs, ids, randn, seed
from torch import nn
from torch.export import Dim

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
            "input_ids": ids(rng, vocab, batch, 1),
            "attention_mask": torch.ones(batch, past_len + 1, dtype=torch.int64),
            "position_ids": torch.full((batch, 1), past_len, dtype=torch.int64),
        }
        for name in _past_names(layers):
            inputs[name] = randn(rng, batch, heads, past_len, head_dim)
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

    seed(0)
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    return _decoder_step(GPT2LMHeadModel(cfg), GPT2Step, heads=2, head_dim=16, vocab=256, seed=1)


def build_qwen2() -> Built:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    seed(2)
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

    rng = seed(4)
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
    inputs: Inputs = {"input_ids": ids(rng, 256, 1, 2), "cache_position": torch.tensor([5, 6])}
    for i in range(2):
        # Positions >= 5 are not yet written: zeros, as in a fresh static cache.
        for kind in ("key", "value"):
            buf = randn(rng, 1, 2, cache_len, 8)
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

    rng = seed(5)
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
        return {"input_ids": ids(rng, 200, b, s), "attention_mask": mask}

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
