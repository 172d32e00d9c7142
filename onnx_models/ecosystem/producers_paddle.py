"""PaddlePaddle layers exported by paddle2onnx: an Embedding (lookup_table_v2), gather_nd, index_select,
scatter_nd_add, scatter with overwrite on and off, take_along_axis and put_along_axis (assign, add)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import paddle
from eco_common import Built, Spec
from paddle.static import InputSpec

PACKAGES = ("paddlepaddle", "paddle2onnx")


class _Gathers(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(30, 8)

    def forward(self, ids, x, nd_idx, sel):  # type: ignore[no-untyped-def]
        return self.emb(ids).sum(axis=-1), paddle.gather_nd(x, nd_idx), paddle.index_select(x, sel, axis=1)


class _Scatters(paddle.nn.Layer):
    def forward(self, x, idx, upd, nd_idx, nd_upd):  # type: ignore[no-untyped-def]
        return (
            paddle.scatter_nd_add(x, nd_idx, nd_upd),
            paddle.scatter(x, idx, upd, overwrite=True),
            paddle.scatter(x, idx, upd, overwrite=False),
        )


class _AlongAxis(paddle.nn.Layer):
    def forward(self, x, idx, v):  # type: ignore[no-untyped-def]
        return (
            paddle.take_along_axis(x, idx, axis=1),
            paddle.put_along_axis(x, idx, v, axis=1, reduce="assign"),
            paddle.put_along_axis(x, idx, v, axis=1, reduce="add"),
        )


def _export(layer: paddle.nn.Layer, feeds: dict[str, np.ndarray]) -> Built:
    specs = [InputSpec(shape=list(v.shape), dtype=str(v.dtype), name=k) for k, v in feeds.items()]
    layer.eval()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "model")
        paddle.onnx.export(layer, prefix, input_spec=specs, opset_version=17)
        model = onnx.load(prefix + ".onnx")
    model.ir_version = min(model.ir_version, 10)
    names = [i.name for i in model.graph.input]
    return Built(model, dict(zip(names, feeds.values(), strict=True)))


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def gathers() -> Built:
    paddle.seed(0)
    rng = np.random.default_rng(90)
    return _export(
        _Gathers(),
        {
            "ids": rng.integers(0, 30, (2, 5)).astype(np.int64),
            "x": _f(rng, 4, 6, 3),
            "nd_idx": np.array([[3, 5], [0, 0], [2, 1], [3, 5], [1, 4]], np.int64),
            "sel": np.array([5, 0, 2, 2], np.int64),
        },
    )


def scatters() -> Built:
    rng = np.random.default_rng(91)
    return _export(
        _Scatters(),
        {
            "x": _f(rng, 6, 4),
            "idx": np.array([4, 1, 5], np.int64),
            "upd": _f(rng, 3, 4),
            "nd_idx": np.array([[0, 1], [5, 3], [0, 1]], np.int64),
            "nd_upd": _f(rng, 3),
        },
    )


def along_axis() -> Built:
    rng = np.random.default_rng(92)
    return _export(
        _AlongAxis(),
        {"x": _f(rng, 3, 5), "idx": np.array([[0, 4], [2, 2], [1, 3]], np.int64), "v": _f(rng, 3, 2)},
    )


SPECS: list[Spec] = [
    Spec("pd_gathers", "paddle2onnx", "Embedding, gather_nd and index_select (axis 1)", gathers, PACKAGES),
    Spec(
        "pd_scatters",
        "paddle2onnx",
        "scatter_nd_add and scatter with overwrite True/False (ScatterND chains)",
        scatters,
        PACKAGES,
    ),
    Spec(
        "pd_along_axis", "paddle2onnx", "take_along_axis, put_along_axis assign and add", along_axis, PACKAGES
    ),
]
