"""A new user's families (newuser-49), at tiny configurations of the real-width models measured: Qwen3
exported by optimum-onnx's ``main_export`` (with past) and run as optimum's generate loop runs it, and a
Gemma2 static-cache decode step exported by torch.onnx (dynamo where onnxscript is installed, else
TorchScript). Random weights, no model hub; every output compared with onnxruntime CPU bit for bit.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest

import dmlshim

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _same(path: str, feeds_list: list[dict[str, np.ndarray]]) -> None:
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(path, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    for feeds in feeds_list:
        want = ort.run(None, feeds)
        for _ in range(4):  # past the third run of a shape, where answers may come with a proof
            got = ours.run(None, feeds)
            assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_qwen3_optimum_decoder_with_past(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exporters = pytest.importorskip("optimum.exporters.onnx")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    transformers.Qwen3ForCausalLM(config).eval().save_pretrained(tmp_path / "hf")
    exporters.main_export(
        str(tmp_path / "hf"),
        output=str(tmp_path / "onnx"),
        task="text-generation-with-past",
        do_validation=False,
    )
    path = str(tmp_path / "onnx" / "model.onnx")
    rng = np.random.default_rng(0)
    feeds_list = []
    for past, new in ((0, 5), (5, 1), (9, 1)):  # the prompt, then decode steps, as generate feeds them
        feeds: dict[str, Any] = {
            "input_ids": rng.integers(0, 128, (2, new), dtype=np.int64),
            "attention_mask": np.ones((2, past + new), np.int64),
            "position_ids": np.tile(np.arange(past, past + new, dtype=np.int64), (2, 1)),
        }
        for layer in range(2):
            for kind in ("key", "value"):
                feeds[f"past_key_values.{layer}.{kind}"] = rng.standard_normal(
                    (2, 2, past, 16), dtype=np.float32
                )
        feeds_list.append(feeds)
    _same(path, feeds_list)


def test_gemma2_static_cache_step(tmp_path: Path) -> None:
    import importlib.util
    import inspect

    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, sliding_window=4096,
        layer_types=["full_attention"] * 2, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.Gemma2ForCausalLM(config).eval()
    cache_len, past = 32, 20

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, cache_position: Any, *caches: Any) -> Any:
            cache = transformers.StaticCache(config=config, max_cache_len=cache_len)
            for i, layer in enumerate(cache.layers):
                k, v = caches[2 * i], caches[2 * i + 1]
                if len(inspect.signature(layer.lazy_initialization).parameters) >= 2:
                    layer.lazy_initialization(k, v)
                else:
                    layer.lazy_initialization(k)
                layer.keys, layer.values = k.clone(), v.clone()
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

    caches = [torch.randn(1, 2, cache_len, 16) for _ in range(4)]
    for c in caches:
        c[:, :, past:] = 0
    args = (torch.tensor([[7]]), torch.tensor([past]), *caches)
    names = ["input_ids", "cache_position", *[f"cache_{i}" for i in range(4)]]
    path = str(tmp_path / "gemma2_step.onnx")
    dynamo = importlib.util.find_spec("onnxscript") is not None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Step(), args, path, dynamo=dynamo, opset_version=18 if dynamo else 17, input_names=names
        )
    feeds = {n: a.numpy() for n, a in zip(names, args, strict=True)}
    other = dict(feeds, cache_position=np.array([past + 3], np.int64), input_ids=np.array([[100]], np.int64))
    _same(path, [feeds, other])
