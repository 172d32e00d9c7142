"""bench/realistic_models.py: the decoder step written with its weights streamed to an external-data file
(how ``--config large`` stays under protobuf's 2 GiB) is the same model as the one saved inline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from bench.realistic_models import LARGE, DecoderConfig, decoder_feeds, write_decoder_step

import dmlshim
from tests.oracle import ort_run

TINY = DecoderConfig(layers=2, hidden=64, heads=4, vocab=500, positions=32, past=5)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("realistic")
    inline = write_decoder_step(TINY, root / "inline" / "step.onnx")
    external = write_decoder_step(TINY, root / "external" / "step.onnx", external=True)
    return inline, external


def test_streamed_external_data_is_the_inline_model(written: tuple[Path, Path]) -> None:
    inline, external = written
    feeds = decoder_feeds(TINY)
    expected = ort_run(inline, feeds)  # onnxruntime CPU on the model saved in one message
    got = ort_run(external, feeds)
    assert len(got) == 1 + 2 * TINY.layers
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_weights_are_external_page_aligned_and_only_small_tensors_inline(written: tuple[Path, Path]) -> None:
    inline_path, external = written
    model = onnx.load(str(external), load_external_data=False)
    data = external.parent / "step.onnx.data"
    big = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    names = {t.name for t in big}
    assert {"wte", "wpe", "lm_head", "l0_qkv_w", "l1_down_w"} <= names
    total = 0
    for t in big:
        entries = {e.key: e.value for e in t.external_data}
        assert entries["location"] == "step.onnx.data"
        assert int(entries["offset"]) % 4096 == 0
        assert int(entries["length"]) == 4 * int(np.prod(t.dims))
        total += int(entries["length"])
    inline = [t for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    assert all(len(t.raw_data) < 1024 for t in inline)
    whole = onnx.load(str(inline_path)).graph.initializer  # the same tensors, saved in one message
    expected = sum(onnx.numpy_helper.to_array(t).nbytes for t in whole)
    assert total + sum(len(t.raw_data) for t in inline) == expected
    assert sum(int(np.prod(t.dims)) * 4 for t in whole if t.data_type == onnx.TensorProto.FLOAT) == (
        TINY.weight_bytes + 4 * 4  # weight_bytes counts every fp32 weight; four fp32 scalars besides
    )
    assert data.stat().st_size >= total
    assert external.stat().st_size < 64 * 1024


def test_default_session_on_streamed_model_equals_onnxruntime(written: tuple[Path, Path]) -> None:
    _, external = written
    feeds = decoder_feeds(TINY)
    expected = ort_run(external, feeds)
    got = dmlshim.InferenceSession(str(external)).run(None, feeds)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_large_config_is_above_protobufs_limit() -> None:
    assert LARGE.weight_bytes > 2**31
