"""TensorFlow functions converted to TFLite flatbuffers by TFLiteConverter, then to ONNX by tf2onnx's tflite
path (``from_tflite``): GATHER with batch_dims 1, GATHER_ND with batch_dims 1, an embedding lookup,
SCATTER_ND with a repeated index, unsorted segment max/sum, and a TOPK_V2 whose indices feed a batched
gather."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import onnx
import tensorflow as tf
from eco_common import Built, Spec
from tf2onnx.convert import from_tflite

PACKAGES = ("tensorflow-cpu", "tf2onnx")


@tf.function
def _gathers(x, i, j, e):  # type: ignore[no-untyped-def]
    return (
        tf.gather(x, i, axis=2, batch_dims=1),
        tf.gather_nd(x, j, batch_dims=1),
        tf.nn.embedding_lookup(e, i),
    )


@tf.function
def _scatters(i, u, seg, data):  # type: ignore[no-untyped-def]
    return (
        tf.scatter_nd(i, u, tf.constant([6, 3])),
        tf.math.unsorted_segment_max(data, seg, 4),
        tf.math.unsorted_segment_sum(data, seg, 4),
    )


@tf.function
def _topk_gather(x):  # type: ignore[no-untyped-def]
    v, idx = tf.math.top_k(x, k=3)
    return tf.gather(x, idx, batch_dims=1) * 2.0 + v


def _convert(fn: tf.types.experimental.GenericFunction, feeds: list[np.ndarray]) -> Built:
    concrete = fn.get_concrete_function(*[tf.TensorSpec(v.shape, v.dtype) for v in feeds])
    flatbuffer = tf.lite.TFLiteConverter.from_concrete_functions([concrete], fn).convert()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.tflite"
        path.write_bytes(flatbuffer)
        model, _ = from_tflite(str(path), opset=17)
    assert isinstance(model, onnx.ModelProto)
    model.ir_version = min(model.ir_version, 10)
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return Built(model, dict(zip(names, feeds, strict=True)))


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def gathers() -> Built:
    rng = np.random.default_rng(11)
    return _convert(
        _gathers,
        [
            _f(rng, 2, 4, 5),
            rng.integers(0, 5, (2, 3)).astype(np.int32),
            np.array([[[1, 4], [3, 0]], [[0, 2], [2, 2]]], np.int32),
            _f(rng, 5, 6),
        ],
    )


def scatters() -> Built:
    rng = np.random.default_rng(12)
    return _convert(
        _scatters,
        [
            np.array([[1], [4], [1], [0]], np.int32),
            _f(rng, 4, 3),
            np.array([0, 3, 3, 1, 0], np.int32),
            _f(rng, 5, 2),
        ],
    )


def topk_gather() -> Built:
    return _convert(_topk_gather, [_f(np.random.default_rng(13), 4, 9)])


SPECS: list[Spec] = [
    Spec(
        "tfl_gathers",
        "tf2onnx (tflite)",
        "GATHER batch_dims 1, GATHER_ND batch_dims 1, embedding lookup",
        gathers,
        PACKAGES,
    ),
    Spec(
        "tfl_scatters",
        "tf2onnx (tflite)",
        "SCATTER_ND with a repeated index, unsorted segment max and sum",
        scatters,
        PACKAGES,
    ),
    Spec(
        "tfl_topk_gather", "tf2onnx (tflite)", "TOPK_V2 indices into a batched GATHER", topk_gather, PACKAGES
    ),
]
