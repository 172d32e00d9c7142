"""Export tiny GPT-2, Llama and BERT models with optimum from local configs (no hub), seeded weights.

Usage: python optimum_export.py OUT_DIR   (with the real onnxruntime; the `clients` extra installed)
"""

import os
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import torch
from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSequenceClassification
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

out = Path(sys.argv[1])
work = Path(tempfile.mkdtemp())
torch.manual_seed(0)
models = {
    "gpt2": GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=211, n_positions=64)),
    "llama": LlamaForCausalLM(
        LlamaConfig(
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            hidden_size=32,
            intermediate_size=64,
            vocab_size=211,
            max_position_embeddings=64,
        )
    ),
    "bert": BertForSequenceClassification(
        BertConfig(
            num_hidden_layers=2,
            num_attention_heads=2,
            hidden_size=32,
            intermediate_size=64,
            vocab_size=211,
            max_position_embeddings=64,
            num_labels=3,
        )
    ),
}
for name, model in models.items():
    model.eval().save_pretrained(work / name)
for name in ("gpt2", "llama"):
    for cache in (True, False):
        exported = ORTModelForCausalLM.from_pretrained(work / name, export=True, use_cache=cache)
        exported.save_pretrained(out / f"{name}_{'cache' if cache else 'nocache'}")
ORTModelForSequenceClassification.from_pretrained(work / "bert", export=True).save_pretrained(out / "bert")
