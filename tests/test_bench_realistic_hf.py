"""bench/realistic_hf.py without torch: argument parsing and the fallback to the hand-built decoder step."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from bench import realistic_hf, realistic_hf_models


def test_arguments() -> None:
    args = realistic_hf.parse([])
    assert args.models == ["gpt2", "bert", "llama"] and args.repeats == 2 and args.fallback == "gpt2-small"
    args = realistic_hf.parse(["--models", "bert", "--runs", "3", "--fallback", "tiny", "--prepare-only"])
    assert args.models == ["bert"] and args.runs == 3 and args.prepare_only
    for bad in (["--models", "gpt3"], ["--repeats", "0"], ["--fallback", "huge"]):
        with pytest.raises(SystemExit):
            realistic_hf.parse(bad)


def test_held_out_models_are_a_separate_choice() -> None:
    # The default set stays the three bench models; --held-out swaps in the other architectures, and any
    # model can still be named one by one. Every name is one the exporter knows (importing it needs no torch).
    assert realistic_hf.parse(["--held-out"]).models == ["qwen2", "t5", "deberta", "vit"]
    assert realistic_hf.parse(["--models", "vit", "gpt2"]).models == ["vit", "gpt2"]
    assert not set(realistic_hf.HELD_OUT) & set(realistic_hf.MODELS)
    assert set(realistic_hf_models.MODELS) == {*realistic_hf.MODELS, *realistic_hf.HELD_OUT}
    assert set(realistic_hf_models.MODELS) >= realistic_hf.EXTERNAL
    with pytest.raises(SystemExit):
        realistic_hf.parse(["--held-out", "--models", "bert"])


def test_without_torch_the_hand_built_step_is_generated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A `torch` module that fails to import, first on the export Python's path: torch is "missing"
    # whether or not this Python has it.
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch blocked for this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    assert "torch blocked" in (realistic_hf.exporter_missing(sys.executable) or "")

    workdir = tmp_path / "work"
    argv = [
        "--export-python",
        sys.executable,
        "--fallback",
        "tiny",
        "--workdir",
        str(workdir),
        "--prepare-only",
    ]
    assert realistic_hf.main(argv) == 0
    captured = capsys.readouterr()
    assert "torch + transformers not available" in captured.err and "torch blocked" in captured.err
    (item,) = json.loads(captured.out)
    assert item["source"] == "hand-built" and item["name"] == "hand-built-tiny"
    model, feeds_path = Path(item["model"]), Path(item["feeds"])
    assert workdir in model.parents and workdir in feeds_path.parents

    # The generated step and its feeds are what onnxruntime accepts: logits over the tiny vocabulary and
    # caches of the configured length, the token ids inside the vocabulary.
    config = realistic_hf.FALLBACKS["tiny"]
    with np.load(feeds_path) as data:
        feeds = {k: data[k] for k in data.files}
    assert feeds["input_ids"].min() >= 0 and feeds["input_ids"].max() < config.vocab
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    assert any(v.shape[-1] == config.vocab for v in outputs.values())
    assert any(config.positions in v.shape for v in outputs.values())
