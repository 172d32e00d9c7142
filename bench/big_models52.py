"""Real-size models from exporters the corpus uses less, for measuring dmlshim on models it never saw.

Needs torch, transformers and onnxscript (``pip install '.[export]'``; never the measuring Python)::

    python bench/big_models52.py MODEL OUT_DIR

``MODEL`` is one of :data:`MODELS`; each is a transformers class at a real configuration with weights
drawn from a fixed seed (no model hub, no network), exported with ``torch.onnx.export(..., dynamo=True)``:

* ``llama_past_dynamo``: a Llama/Mistral-style decoder (hidden 1024, 8 layers, 16 heads, 4 key/value
  heads, vocab 32000, untied output layer, ~540 MB) as one decoding step with past key/values inputs
  (batch 1, 127 past tokens), weights in ``<model>.onnx.data`` beside the model;
* ``roberta_base_dynamo``: RoBERTa-base's configuration (12 layers x 768, vocab 50265, ~500 MB, weights
  inline), 2 x 128 tokens with the second row padded;
* ``llama_past_ortfusions``: the first model through onnxscript's onnxruntime fusions
  (``onnxscript.rewriter.ort_fusions.optimize_for_ort``: com.microsoft attention, rotary and
  normalization nodes), weights in ``<model>.onnx.data``.

Writes ``OUT_DIR/<model>.onnx`` and ``OUT_DIR/<model>.npz`` (one array per graph input), checks
onnxruntime CPU against PyTorch on the sample, and logs one JSON line describing what it wrote. Measured
by ``bench/big_models52_run.py``; results in docs/performance.md. The files are never committed.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

LOG = logging.getLogger("big_models52")
OPSET = 18
MODELS = ("llama_past_dynamo", "roberta_base_dynamo", "llama_past_ortfusions")
LLAMA = {
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
PAST = 127


def _llama() -> tuple[Any, dict[str, Any], list[str], dict[str, Any]]:
    import torch
    from torch.export import Dim
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    cfg = LlamaConfig(**LLAMA)
    layers = cfg.num_hidden_layers
    head_dim = cfg.hidden_size // cfg.num_attention_heads

    class Step(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, position_ids: Any, past: Any) -> Any:
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(layers)], config=cfg)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
            present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    inputs: dict[str, Any] = {
        "input_ids": torch.from_numpy(rng.integers(0, cfg.vocab_size, (1, 1), dtype=np.int64)),
        "attention_mask": torch.ones(1, PAST + 1, dtype=torch.int64),
        "position_ids": torch.full((1, 1), PAST, dtype=torch.int64),
    }
    past = [
        torch.from_numpy(rng.standard_normal((1, cfg.num_key_value_heads, PAST, head_dim), dtype=np.float32))
        for _ in names
    ]
    batch, plen = Dim("batch_size", min=1, max=16), Dim("past_sequence_length", min=1, max=1024)
    shapes = {
        "input_ids": {0: batch},
        "attention_mask": {0: batch, 1: plen + 1},
        "position_ids": {0: batch},
        "past": [{0: batch, 2: plen} for _ in names],
    }
    out_names = ["logits"] + [n.replace("past", "present") for n in names]
    module = Step(LlamaForCausalLM(cfg).eval())
    return (
        module,
        {**inputs, "past": past},
        ["input_ids", "attention_mask", "position_ids", *names],
        {
            "shapes": shapes,
            "outputs": out_names,
        },
    )


def _roberta() -> tuple[Any, dict[str, Any], list[str], dict[str, Any]]:
    import torch
    from torch.export import Dim
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(2)
    rng = np.random.default_rng(3)
    cfg = RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1)
    ids = rng.integers(3, cfg.vocab_size, (2, 128), dtype=np.int64)
    mask = np.ones((2, 128), dtype=np.int64)
    ids[1, 100:] = cfg.pad_token_id
    mask[1, 100:] = 0

    class Encoder(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    batch, seq = Dim("batch_size", min=1, max=64), Dim("sequence_length", min=2, max=512)
    inputs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return (
        Encoder(RobertaModel(cfg, add_pooling_layer=True).eval()),
        inputs,
        list(inputs),
        {
            "shapes": shapes,
            "outputs": ["last_hidden_state", "pooler_output"],
        },
    )


def _flat(inputs: dict[str, Any]) -> list[np.ndarray]:
    arrays: list[np.ndarray] = []
    for value in inputs.values():
        arrays += [t.numpy() for t in value] if isinstance(value, list) else [value.numpy()]
    return arrays


def export(name: str, out_dir: Path) -> dict[str, Any]:
    import onnxruntime as ort
    import torch

    out_dir.mkdir(parents=True, exist_ok=True)
    base = "llama_past_dynamo" if name.startswith("llama") else name
    module, inputs, input_names, extra = _llama() if base.startswith("llama") else _roberta()
    started = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        expected = [t.numpy() for t in module(**inputs)]
        program = torch.onnx.export(
            module,
            (),
            kwargs=inputs,
            dynamo=True,
            opset_version=OPSET,
            input_names=input_names,
            output_names=extra["outputs"],
            dynamic_shapes=extra["shapes"],
        )
    assert program is not None
    path = out_dir / f"{name}.onnx"
    external = base.startswith("llama")
    if name == "llama_past_ortfusions":
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        optimize_for_ort(program.model)
    program.save(str(path), external_data=external)
    feeds = dict(zip(input_names, _flat(inputs), strict=True))
    np.savez(out_dir / f"{name}.npz", **feeds)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    got = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected, strict=True))
    size = sum(p.stat().st_size for p in out_dir.glob(f"{name}.onnx*"))
    return {
        "model": name,
        "path": str(path),
        "bytes": size,
        "external_data": external,
        "export_seconds": round(time.perf_counter() - started, 1),
        "max_abs_vs_torch": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)  # onnx_ir logs every deduplicated initializer at INFO
    LOG.setLevel(logging.INFO)
    LOG.info("%s", json.dumps(export(args.model, args.out_dir)))


if __name__ == "__main__":
    main()
