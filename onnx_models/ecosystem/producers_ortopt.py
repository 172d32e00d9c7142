"""Transformer graphs as onnxruntime's transformer optimizer (what Olive runs for DirectML targets) and
optimum's ``ORTOptimizer`` leave them: tiny BERT, GPT-2 and DistilBERT from transformers with random
weights (``from_config``, fixed seeds, no model hub), exported by ``torch.onnx.export`` (TorchScript,
``dynamo=False``: the optimizer's fusion patterns are written against that exporter), then
``onnxruntime.transformers.optimizer.optimize_model(..., use_gpu=False)``.

What these hold that no other producer here writes: ``com.microsoft`` ``EmbedLayerNormalization`` (the
word, position and segment embedding lookups done inside one node, gather semantics not visible as
ai.onnx Gathers), ``Attention`` (packed QKV weights and a mask index), ``SkipLayerNormalization``,
``BiasGelu`` and ``FastGelu``; the same BERT in float16 (``convert_float_to_float16(keep_io_types=True)``:
int64 inputs, float32 outputs, Casts at the edges); optimum's output. Each imports every opset domain
onnxruntime knows (``com.microsoft.nchwc``, ``org.pytorch.aten``, ``ai.onnx.training``, ...): the
optimizer saves the model onnxruntime's basic graph optimizations wrote.

GPT-2: transformers 4.57's causal mask goes through ``torch.vmap``, which the TorchScript exporter cannot
trace ("unordered_map::at"); the script selects transformers' own pre-2.6 mask code
(``sdpa_mask_older_torch``) with its vmap over positions replaced by broadcasting (vmap traces the
sequence length as a constant: a graph that runs only at the traced length). The optimizer fuses its
GELUs and layer norms, not its attention (the mask pattern is not one it knows): the Shape/Gather chains
of the mask stay.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from eco_common import Built, Spec

VOCAB, HIDDEN, LAYERS, HEADS, FFN, MAXPOS = 64, 32, 2, 4, 64, 32
BATCH, SEQ = 2, 5


def _export(
    module: object, args: tuple[object, ...], names: list[str], outputs: list[str], path: Path
) -> None:
    import torch

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names,
        output_names=outputs,
        dynamic_axes=axes,
        opset_version=17,
        dynamo=False,
    )


def _bert_source(path: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(5201)
    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=MAXPOS,
        type_vocab_size=2,
        attn_implementation="eager",
    )
    ids = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    _export(
        BertModel(cfg).eval(),
        (ids, torch.ones_like(ids), ids),
        ["input_ids", "attention_mask", "token_type_ids"],
        ["last_hidden_state", "pooler_output"],
        path,
    )


def _bert_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, 3:] = 0  # the second sequence padded: Attention's mask index is not all SEQ
    return {
        "input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64),
        "attention_mask": mask,
        "token_type_ids": (np.arange(SEQ)[None, :] >= 2).repeat(BATCH, 0).astype(np.int64),
    }


def _optimized(source: Callable[[Path], None], model_type: str, fp16: bool = False) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "model.onnx")
        source(src)
        opt = optimize_model(
            str(src), model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN, opt_level=1, use_gpu=False
        )
        if fp16:
            opt.convert_float_to_float16(keep_io_types=True)
        return opt.model


def bert_fused() -> Built:
    model = _optimized(_bert_source, "bert")
    return Built(
        model, _bert_feeds(5202), notes="optimize_model(model_type='bert', opt_level=1, use_gpu=False)"
    )


def bert_fp16() -> Built:
    model = _optimized(_bert_source, "bert", fp16=True)
    return Built(
        model,
        _bert_feeds(5203),
        notes="optimize_model(model_type='bert', opt_level=1, use_gpu=False) "
        "then convert_float_to_float16(keep_io_types=True)",
    )


def _gpt2_source(path: Path) -> None:
    import torch
    import transformers.masking_utils as masking
    from transformers import GPT2Config, GPT2LMHeadModel

    # torch.vmap in the >= 2.6 mask code cannot be traced by the TorchScript exporter, and the older code's
    # vmap over query and key positions traces the sequence length as a constant: the causal mask is
    # broadcast instead (the same values), so the exported graph takes any batch and sequence length.
    masking._is_torch_greater_or_equal_than_2_6 = False
    masking.sdpa_mask = masking.sdpa_mask_older_torch
    masking._vmap_for_bhqkv = lambda fn, bh_indices=True: (
        lambda b, h, q, kv: fn(b, h, q[:, None], kv[None, :])
    )
    torch.manual_seed(5204)
    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=MAXPOS,
        use_cache=False,
        attn_implementation="eager",
    )
    lm = GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.lm(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=False
            )[0]

    ids = torch.zeros((BATCH, SEQ), dtype=torch.int64)
    _export(Logits(), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], ["logits"], path)


def gpt2_fused() -> Built:
    model = _optimized(_gpt2_source, "gpt2")
    rng = np.random.default_rng(5205)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[0, :2] = 0  # left padding on the first sequence
    feeds = {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64), "attention_mask": mask}
    return Built(model, feeds, notes="optimize_model(model_type='gpt2', opt_level=1, use_gpu=False)")


def optimum_distilbert() -> Built:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from optimum.onnxruntime import ORTModelForFeatureExtraction, ORTOptimizer
    from optimum.onnxruntime.configuration import OptimizationConfig
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(5206)
    cfg = DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=FFN,
        max_position_embeddings=MAXPOS,
    )
    with tempfile.TemporaryDirectory() as tmp:
        hf, out = Path(tmp, "hf"), Path(tmp, "out")
        DistilBertModel(cfg).eval().save_pretrained(hf)
        ort_model = ORTModelForFeatureExtraction.from_pretrained(hf, export=True)
        config = OptimizationConfig(
            optimization_level=2, enable_gelu_approximation=True, optimize_for_gpu=False
        )
        ORTOptimizer.from_pretrained(ort_model).optimize(save_dir=out, optimization_config=config)
        model = onnx.load(str(out / "model_optimized.onnx"))
    feeds = _bert_feeds(5207)
    del feeds["token_type_ids"]
    return Built(
        model,
        feeds,
        notes="ORTOptimizer, OptimizationConfig(optimization_level=2, "
        "enable_gelu_approximation=True, optimize_for_gpu=False)",
    )


PACKAGES = ("onnxruntime", "torch", "transformers")
SPECS: list[Spec] = [
    Spec(
        "ortopt_bert_fused",
        "onnxruntime.transformers",
        "tiny BERT after optimize_model(model_type='bert'): "
        "EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu",
        bert_fused,
        PACKAGES,
    ),
    Spec(
        "ortopt_bert_fp16",
        "onnxruntime.transformers",
        "ortopt_bert_fused then convert_float_to_float16("
        "keep_io_types=True): float16 fused ops, int64 inputs, float32 outputs",
        bert_fp16,
        PACKAGES,
    ),
    Spec(
        "ortopt_gpt2_fused",
        "onnxruntime.transformers",
        "tiny GPT-2 LM after optimize_model(model_type="
        "'gpt2'): FastGelu, SkipLayerNormalization, the causal-mask Shape/Gather chains",
        gpt2_fused,
        PACKAGES,
    ),
    Spec(
        "ortopt_optimum_distilbert",
        "optimum",
        "tiny DistilBERT after ORTOptimizer level 2 with gelu "
        "approximation: Attention, FastGelu, SkipLayerNormalization, embedding Gathers",
        optimum_distilbert,
        (*PACKAGES, "optimum", "optimum-onnx"),
    ),
]
