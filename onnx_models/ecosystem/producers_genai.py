"""onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder``) on a tiny Llama
saved with random weights (transformers ``from_config``, fixed seed, no model hub): the decoder with past
key/values as onnxruntime-genai writes it for the CPU, fp32.

What the builder writes that no other producer here does: ``SimplifiedLayerNormalization`` (RMSNorm) in
the ONNX domain itself (an operator onnxruntime registers there, onnx does not), ``com.microsoft``
``SkipSimplifiedLayerNormalization`` and ``GroupQueryAttention`` (the KV cache: past inputs
``[batch, kv_heads, past_sequence_length, kv_cache_dim]``, ``kv_cache_dim`` being the head size), an
embedding Gather on ``input_ids`` and a Gather in the attention-mask subgraph (a shape computation).

onnxruntime-genai 0.18 imports transformers 5 and needs a tokenizer in the folder; the builder runs in a
subprocess of the same Python. Inputs: 3 new tokens after 4 cached ones.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from eco_common import Built, Spec

HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB = 64, 2, 4, 2, 512
HEAD = HIDDEN // HEADS
PAST, NEW = 4, 3


def _hf_folder(folder: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(5001)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(VOCAB - 1)} | {"<unk>": VOCAB - 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="t1", eos_token="t2")
    fast.save_pretrained(folder)


def genai_llama_gqa() -> Built:
    with tempfile.TemporaryDirectory() as tmp:
        hf, out = Path(tmp) / "hf", Path(tmp) / "onnx"
        _hf_folder(hf)
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", "tiny-llama", "-i", str(hf)]
        cmd += ["-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(Path(tmp) / "cache")]
        subprocess.run(cmd, check=True, capture_output=True, env={"HF_HUB_OFFLINE": "1", "PATH": ""})
        model = onnx.load(str(out / "model.onnx"))  # its external data read in; saved inline here
    rng = np.random.default_rng(5002)
    feeds: dict[str, np.ndarray] = {
        "input_ids": rng.integers(0, VOCAB, (1, NEW)).astype(np.int64),
        "attention_mask": np.ones((1, PAST + NEW), np.int64),
    }
    for i in range(LAYERS):
        for kind in ("key", "value"):
            past = rng.standard_normal((1, KV_HEADS, PAST, HEAD)).astype(np.float32)
            feeds[f"past_key_values.{i}.{kind}"] = past
    return Built(model, feeds, notes="builder -p fp32 -e cpu; inputs: 3 new tokens after 4 cached")


SPECS = [
    Spec(
        "genai_llama_gqa",
        "onnxruntime-genai",
        "tiny Llama decoder with past: GroupQueryAttention, SimplifiedLayerNormalization in the ONNX domain, "
        "embedding Gather",
        genai_llama_gqa,
        ("onnxruntime-genai", "transformers", "torch"),
    ),
]
