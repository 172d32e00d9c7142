"""TensorFlow functions and a Keras model converted by tf2onnx (needs tensorflow-cpu; its own venv)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf2onnx
from eco_common import Built, Spec

PACKAGES = ("tensorflow-cpu", "tf2onnx")
tf.random.set_seed(0)


def _convert(fn: object, feeds: dict[str, np.ndarray], opset: int = 17) -> Built:
    spec = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype), name=k) for k, v in feeds.items()]
    model, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=opset)
    model.ir_version = min(model.ir_version, 10)
    names = [i.name for i in model.graph.input]
    return Built(model, dict(zip(names, feeds.values(), strict=True)))


@tf.function
def gathers(params: tf.Tensor, ids: tf.Tensor, nd: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    rows = tf.gather(params, ids, axis=1)
    picked = tf.gather_nd(params, nd, batch_dims=1)
    return rows, picked


@tf.function
def scatters(buf: tf.Tensor, where: tf.Tensor, upd: tf.Tensor, seg: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    written = tf.tensor_scatter_nd_update(buf, where, upd)
    sums = tf.math.unsorted_segment_sum(upd, seg, num_segments=3)
    return written, sums


def _f(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def build_gathers() -> Built:
    feeds = {"params": _f(71, 2, 5, 3), "ids": np.array([4, 0, 2], np.int32),
             "nd": np.array([[[1], [4]], [[0], [3]]], np.int64)}
    return _convert(gathers, feeds)


def build_scatters() -> Built:
    feeds = {"buf": _f(72, 6, 4), "where": np.array([[5], [1], [2]], np.int32), "upd": _f(73, 3, 4),
             "seg": np.array([2, 0, 2], np.int32)}
    return _convert(scatters, feeds)


def build_keras_embedding() -> Built:
    tf.keras.utils.set_random_seed(1)
    inp = tf.keras.Input((5,), dtype="int32", name="tokens")
    x = tf.keras.layers.Embedding(40, 8)(inp)
    x = tf.keras.layers.GlobalAveragePooling1D()(x)
    out = tf.keras.layers.Dense(3)(x)
    keras_model = tf.keras.Model(inp, out)
    spec = (tf.TensorSpec((None, 5), tf.int32, name="tokens"),)
    model, _ = tf2onnx.convert.from_keras(keras_model, input_signature=spec, opset=17)
    model.ir_version = min(model.ir_version, 10)
    ids = np.random.default_rng(74).integers(0, 40, (2, 5)).astype(np.int32)
    return Built(model, {model.graph.input[0].name: ids})


SPECS: list[Spec] = [
    Spec("tf_gathers", "tf2onnx", "tf.gather axis 1 and tf.gather_nd batch_dims 1", build_gathers, PACKAGES),
    Spec("tf_scatters", "tf2onnx", "tf.tensor_scatter_nd_update and unsorted_segment_sum", build_scatters,
         PACKAGES),
    Spec("tf_keras_embedding", "tf2onnx", "Keras Embedding -> GlobalAveragePooling1D -> Dense",
         build_keras_embedding, PACKAGES),
]
