"""The models of ``build_cost.py``'s figures (issue 36): real configurations, random weights, exported by
torch's TorchScript exporter at opset 17 into a folder of your choice (never into the repository).

Usage::

    python bench/build_cost_models.py OUT_DIR graphsage t5 qwen3moe   # torch + transformers (export extra)
    python bench/build_cost_models.py OUT_DIR fasterrcnn maskrcnn     # torch + torchvision (export-vision)
    python bench/build_cost_models.py OUT_DIR fasterrcnn320 ssdlite   # the 320 x 320 mobile detectors

Writes ``OUT_DIR/NAME.onnx`` and ``OUT_DIR/NAME.npz`` (the feeds). Needs torch; nothing in dmlshim or its
tests imports this file.
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

OUT = Path(".")
torch.manual_seed(0)


def save(name, model, args, names, outs, dynamic=None):
    path = OUT / f"{name}.onnx"
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=names,
        output_names=outs,
        opset_version=17,
        dynamo=False,
        dynamic_axes=dynamic,
    )
    if all(isinstance(a, torch.Tensor) for a in args):
        np.savez(OUT / f"{name}.npz", **{n: a.numpy() for n, a in zip(names, args, strict=True)})
    print(name, path.stat().st_size / 2**20, "MB")


def rcnn(kind):
    import torchvision

    detection = torchvision.models.detection
    builders = {
        "maskrcnn": detection.maskrcnn_resnet50_fpn,
        "fasterrcnn": detection.fasterrcnn_mobilenet_v3_large_fpn,
        "fasterrcnn320": detection.fasterrcnn_mobilenet_v3_large_320_fpn,
        "ssdlite": detection.ssdlite320_mobilenet_v3_large,
    }
    m = builders[kind](weights=None, weights_backbone=None)  # the real configuration, random weights
    m.eval()
    img = torch.rand(3, 480, 640)
    # the traced outputs follow each model's result dict: SSD's is boxes, scores, labels
    outs = ["boxes", "scores", "labels"] if kind == "ssdlite" else ["boxes", "labels", "scores"]
    outs += ["masks"] if kind == "maskrcnn" else []
    save(kind, m, ([img],), ["image"], outs)
    np.savez(OUT / f"{kind}.npz", image=img.numpy())


class Sage(nn.Module):
    """GraphSAGE-like: mean aggregation with index_add, two layers, plain torch."""

    def __init__(self, dim=64, hidden=128, classes=16):
        super().__init__()
        self.l1s, self.l1n = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
        self.l2s, self.l2n = nn.Linear(hidden, classes), nn.Linear(hidden, classes)

    def layer(self, x, src, dst, ls, ln):
        msg = x.index_select(0, src)
        agg = torch.zeros_like(x).scatter_add(0, dst.unsqueeze(1).expand_as(msg), msg)
        ones = torch.ones_like(src, dtype=x.dtype).unsqueeze(1)
        deg = torch.zeros_like(x[:, :1]).scatter_add(0, dst.unsqueeze(1), ones)
        return ls(x) + ln(agg / deg.clamp(min=1))

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        h = torch.relu(self.layer(x, src, dst, self.l1s, self.l1n))
        return self.layer(h, src, dst, self.l2s, self.l2n)


def sage():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((50000, 64), dtype=np.float32))
    ei = torch.from_numpy(rng.integers(0, 50000, size=(2, 500000), dtype=np.int64))
    save(
        "graphsage",
        Sage().eval(),
        (x, ei),
        ["x", "edge_index"],
        ["logits"],
        {"x": {0: "num_nodes"}, "edge_index": {1: "num_edges"}},
    )


def t5_decoder():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config.from_dict(
        dict(
            vocab_size=32128,
            d_model=512,
            d_kv=64,
            d_ff=2048,
            num_layers=6,
            num_decoder_layers=6,
            num_heads=8,
            relative_attention_num_buckets=32,
            feed_forward_proj="relu",
            tie_word_embeddings=True,
            use_cache=True,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
    )
    cfg._attn_implementation = "eager"
    model = T5ForConditionalGeneration(cfg).eval()
    L, H, D = 6, 8, 64
    past_len, src = 31, 64

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, enc, enc_mask, *past):
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            self_c, cross_c = DynamicCache(), DynamicCache()
            for i in range(L):
                self_c.update(past[4 * i], past[4 * i + 1], i)
                cross_c.update(past[4 * i + 2], past[4 * i + 3], i)
            cache = EncoderDecoderCache(self_c, cross_c)
            out = self.m.decoder(
                input_ids=ids,
                encoder_hidden_states=enc,
                encoder_attention_mask=enc_mask,
                past_key_values=cache,
                use_cache=True,
                return_dict=True,
            )
            logits = self.m.lm_head(out.last_hidden_state * (512**-0.5))
            c = out.past_key_values
            news = []
            for i in range(L):
                news += [c.self_attention_cache.layers[i].keys, c.self_attention_cache.layers[i].values]
            return (logits, *news)

    rng = np.random.default_rng(2)
    ids = torch.from_numpy(rng.integers(0, 32128, (1, 1), dtype=np.int64))
    enc = torch.from_numpy(rng.standard_normal((1, src, 512), dtype=np.float32))
    mask = torch.ones(1, src, dtype=torch.int64)
    past = []
    names = ["input_ids", "encoder_hidden_states", "encoder_attention_mask"]
    for i in range(L):
        past += [
            torch.randn(1, H, past_len, D),
            torch.randn(1, H, past_len, D),
            torch.randn(1, H, src, D),
            torch.randn(1, H, src, D),
        ]
        names += [f"past.{i}.dec.key", f"past.{i}.dec.value", f"past.{i}.enc.key", f"past.{i}.enc.value"]
    outs = ["logits"] + [f"present.{i}.dec.{kv}" for i in range(L) for kv in ("key", "value")]
    with torch.no_grad():
        Step()(ids, enc, mask, *past)
    dyn = {n: {2: "past_len"} for n in names if ".dec." in n}
    save("t5_decoder_past", Step().eval(), (ids, enc, mask, *past), names, outs, dyn)


def qwen3_moe_step():
    """A Qwen3-MoE decode step (transformers' Qwen3MoeForCausalLM, random weights, 4 layers of 16 experts,
    top-2 routing, 31 positions of past): 104 Gather, 8 ScatterElements, 4 TopK, 157 MB."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.realistic_hf_models import _traceable_masks

    _traceable_masks()
    from transformers import masking_utils

    if hasattr(masking_utils, "sdpa_mask_older_torch"):  # the vmap builder does not trace
        masking_utils.sdpa_mask_recent_torch = masking_utils.sdpa_mask_older_torch
    cfg = Qwen3MoeConfig(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1024,
        moe_intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        num_experts=16,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        norm_topk_prob=True,
        max_position_embeddings=2048,
        use_cache=True,
    )
    cfg._attn_implementation = "eager"
    model = Qwen3MoeForCausalLM(cfg).eval()
    layers, kv_heads, head_dim, past = 4, 4, 64, 31

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, mask, pos, *kv):
            from transformers.cache_utils import DynamicCache

            cache = DynamicCache()
            for i in range(layers):
                cache.update(kv[2 * i], kv[2 * i + 1], i)
            out = self.m(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache)
            news = []
            for i in range(layers):
                news += [out.past_key_values.layers[i].keys, out.past_key_values.layers[i].values]
            return (out.logits, *news)

    rng = np.random.default_rng(3)
    ids = torch.from_numpy(rng.integers(0, 32000, (1, 1), dtype=np.int64))
    mask = torch.ones(1, past + 1, dtype=torch.int64)
    pos = torch.tensor([[past]], dtype=torch.int64)
    kv = [torch.randn(1, kv_heads, past, head_dim) for _ in range(2 * layers)]
    names = ["input_ids", "attention_mask", "position_ids"]
    names += [f"past.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    with torch.no_grad():
        Step()(ids, mask, pos, *kv)
    dyn = {n: {2: "past_len"} for n in names if n.startswith("past.")}
    dyn["attention_mask"] = {1: "total_len"}
    save("qwen3_moe_step", Step().eval(), (ids, mask, pos, *kv), names, outs, dyn)


if __name__ == "__main__":
    OUT = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    for what in sys.argv[2:]:
        {
            "maskrcnn": lambda: rcnn("maskrcnn"),
            "fasterrcnn": lambda: rcnn("fasterrcnn"),
            "fasterrcnn320": lambda: rcnn("fasterrcnn320"),
            "ssdlite": lambda: rcnn("ssdlite"),
            "graphsage": sage,
            "t5": t5_decoder,
            "qwen3moe": qwen3_moe_step,
        }[what]()
