"""JAX functions exported by jax2onnx: gathers and scatters from jnp.take, take_along_axis, fancy
indexing and ``.at[].set/add`` (jax2onnx wraps indices in Where(idx < 0, idx + n, idx) normalisations)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
from eco_common import Built, Spec
from jax2onnx import to_onnx

PACKAGES = ("jax", "jaxlib", "jax2onnx")
jax.config.update("jax_platforms", "cpu")


def _export(fn: object, feeds: dict[str, np.ndarray], opset: int = 21) -> Built:
    specs = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in feeds.values()]
    model = to_onnx(fn, specs, model_name=getattr(fn, "__name__", "jax_model"), opset=opset,
                    input_names=list(feeds))
    assert isinstance(model, onnx.ModelProto)
    model.ir_version = min(model.ir_version, 10)
    return Built(model, feeds)


def take_embedding(table: jax.Array, ids: jax.Array) -> jax.Array:
    return jnp.take(table, ids, axis=0) * 2.0


def take_along(x: jax.Array, idx: jax.Array) -> jax.Array:
    return jnp.take_along_axis(x, idx, axis=1)


def scatter_set_add(buf: jax.Array, rows: jax.Array, upd: jax.Array) -> tuple[jax.Array, jax.Array]:
    written = buf.at[rows].set(upd)
    hist = jnp.zeros((buf.shape[0],), buf.dtype).at[rows].add(1.0)
    return written, hist


def fancy_index(x: jax.Array, i: jax.Array, j: jax.Array) -> jax.Array:
    return x[i, j] + x[i].sum(axis=-1)


def segment_sum(data: jax.Array, segments: jax.Array) -> jax.Array:
    return jax.ops.segment_sum(data, segments, num_segments=4)


def _i(seed: int, low: int, high: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, shape).astype(np.int32)


def _f(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


SPECS: list[Spec] = [
    Spec("jax_take_embedding", "jax2onnx", "jnp.take(table, ids, axis=0)",
         lambda: _export(take_embedding, {"table": _f(51, 12, 5), "ids": _i(52, -12, 12, (2, 3))}), PACKAGES),
    Spec("jax_take_along_axis", "jax2onnx", "jnp.take_along_axis(x, idx, axis=1)",
         lambda: _export(take_along, {"x": _f(53, 3, 6), "idx": _i(54, -6, 6, (3, 4))}), PACKAGES),
    Spec("jax_at_set_add", "jax2onnx", "buf.at[rows].set(upd) and a histogram by .at[rows].add(1)",
         lambda: _export(scatter_set_add, {"buf": _f(55, 6, 3), "rows": np.array([4, 0, -1], np.int32),
                                            "upd": _f(56, 3, 3)}), PACKAGES),
    Spec("jax_fancy_index", "jax2onnx", "x[i, j] + x[i].sum(-1) (advanced indexing)",
         lambda: _export(fancy_index, {"x": _f(57, 5, 7), "i": _i(58, -5, 5, (4,)),
                                        "j": _i(59, -7, 7, (4,))}), PACKAGES),
    Spec("jax_segment_sum", "jax2onnx", "jax.ops.segment_sum(data, segments, 4)",
         lambda: _export(segment_sum, {"data": _f(60, 8, 2), "segments": _i(61, 0, 4, (8,))}), PACKAGES),
]
