"""Benchmark cases: one ONNX gather/scatter node and the DirectML descriptor that runs it, on shared inputs.

Each case builds, for a target element count, the ONNX inputs, a one-node ONNX model (for onnxruntime and
onnx.reference) and the DirectML descriptor of the same computation laid out the way the DML execution
provider lays it out (ONNX shapes right-aligned to one DimensionCount, Strides null), with the inputs
bound in packed form. Scatter cases use unique indices so every engine's result is defined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from dmlshim.dml import (
    BufferTensorDesc,
    DataType,
    GatherDesc,
    GatherElementsDesc,
    GatherNd1Desc,
    OperatorDesc,
    ScatterDesc,
    ScatterNdDesc,
    right_align,
)

IR_VERSION = 10
"""onnxruntime 1.31 reads IR <= 13; onnx 1.23's make_model would write a newer one."""

OPSET = 18


@dataclass
class KernelCase:
    """One node benchmark.

    Attributes:
        name: the case name (op and layout).
        op_type: the ONNX op.
        shape: the data tensor's ONNX shape, for the table.
        elements: the output's element count (the size the case is named by).
        model: a one-node ONNX model whose graph inputs are ``feeds``.
        feeds: the ONNX inputs by graph input name.
        desc: the DirectML descriptor of the same computation.
        bound: the kernel inputs by DirectML binding name, shaped like their Sizes (views of ``feeds``).
    """

    name: str
    op_type: str
    shape: tuple[int, ...]
    elements: int
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    desc: OperatorDesc
    bound: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def io_bytes(self) -> int:
        """Bytes of the kernel's inputs plus its output."""
        out = self.desc.tensors()["OutputTensor"]
        out_bytes = out.element_count * out.data_type.numpy_dtype.itemsize
        return sum(a.nbytes for a in self.bound.values()) + out_bytes


def _tensor(dtype: np.dtype, shape: tuple[int, ...], d: int) -> BufferTensorDesc:
    return BufferTensorDesc(DataType.from_numpy(dtype), right_align(shape, d))


def node_model(op_type: str, feeds: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> onnx.ModelProto:
    """A model holding one ``op_type`` node whose inputs are the graph inputs ``feeds``."""
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in feeds.items()
    ]
    node = helper.make_node(op_type, list(feeds), ["output"], **dict(attrs))
    graph = helper.make_graph([node], f"bench_{op_type}", inputs, [onnx.ValueInfoProto(name="output")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _bind(desc: OperatorDesc, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = desc.tensors()
    return {name: a.reshape(tensors[name].sizes) for name, a in arrays.items()}


def _data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _gather(name: str, data: np.ndarray, indices: np.ndarray, axis: int) -> KernelCase:
    r, q = data.ndim, indices.ndim
    d = max(r, q, r + q - 1)
    a = axis % r
    out_shape = data.shape[:a] + indices.shape + data.shape[a + 1 :]
    desc = GatherDesc(
        _tensor(data.dtype, data.shape, d),
        _tensor(indices.dtype, indices.shape, d),
        _tensor(data.dtype, out_shape, d),
        axis=a + d - r,
        index_dimensions=q,
    )
    feeds = {"data": data, "indices": indices}
    return KernelCase(
        name,
        "Gather",
        data.shape,
        int(np.prod(out_shape)),
        node_model("Gather", feeds, {"axis": axis}),
        feeds,
        desc,
        _bind(desc, {"InputTensor": data, "IndicesTensor": indices}),
    )


def _gather_elements(name: str, data: np.ndarray, indices: np.ndarray, axis: int) -> KernelCase:
    r = data.ndim
    desc = GatherElementsDesc(
        _tensor(data.dtype, data.shape, r),
        _tensor(indices.dtype, indices.shape, r),
        _tensor(data.dtype, indices.shape, r),
        axis=axis % r,
    )
    feeds = {"data": data, "indices": indices}
    return KernelCase(
        name,
        "GatherElements",
        data.shape,
        indices.size,
        node_model("GatherElements", feeds, {"axis": axis}),
        feeds,
        desc,
        _bind(desc, {"InputTensor": data, "IndicesTensor": indices}),
    )


def _gather_nd(name: str, data: np.ndarray, indices: np.ndarray, batch_dims: int) -> KernelCase:
    r, q = data.ndim, indices.ndim
    out_shape = indices.shape[:-1] + data.shape[batch_dims + indices.shape[-1] :]
    d = max(r, q, len(out_shape))
    desc = GatherNd1Desc(
        _tensor(data.dtype, data.shape, d),
        _tensor(indices.dtype, indices.shape, d),
        _tensor(data.dtype, out_shape, d),
        input_dimension_count=r,
        indices_dimension_count=q,
        batch_dimension_count=batch_dims,
    )
    feeds = {"data": data, "indices": indices}
    return KernelCase(
        name,
        "GatherND",
        data.shape,
        int(np.prod(out_shape)),
        node_model("GatherND", feeds, {"batch_dims": batch_dims}),
        feeds,
        desc,
        _bind(desc, {"InputTensor": data, "IndicesTensor": indices}),
    )


def _scatter_elements(
    name: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int
) -> KernelCase:
    r = data.ndim
    d = max(r, 4)
    desc = ScatterDesc(
        _tensor(data.dtype, data.shape, d),
        _tensor(indices.dtype, indices.shape, d),
        _tensor(data.dtype, indices.shape, d),
        _tensor(data.dtype, data.shape, d),
        axis=axis % r + d - r,
    )
    feeds = {"data": data, "indices": indices, "updates": updates}
    return KernelCase(
        name,
        "ScatterElements",
        data.shape,
        data.size,
        node_model("ScatterElements", feeds, {"axis": axis}),
        feeds,
        desc,
        _bind(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates}),
    )


def _scatter_nd(name: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> KernelCase:
    r, q = data.ndim, indices.ndim
    d = max(r, q, updates.ndim)
    desc = ScatterNdDesc(
        _tensor(data.dtype, data.shape, d),
        _tensor(indices.dtype, indices.shape, d),
        _tensor(data.dtype, updates.shape, d),
        _tensor(data.dtype, data.shape, d),
        input_dimension_count=r,
        indices_dimension_count=q,
    )
    feeds = {"data": data, "indices": indices, "updates": updates}
    return KernelCase(
        name,
        "ScatterND",
        data.shape,
        data.size,
        node_model("ScatterND", feeds, {}),
        feeds,
        desc,
        _bind(desc, {"InputTensor": data, "IndicesTensor": indices, "UpdatesTensor": updates}),
    )


def _idx(rng: np.random.Generator, shape: tuple[int, ...], high: int) -> np.ndarray:
    return rng.integers(0, high, size=shape, dtype=np.int64)


def gather_first_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """Gather axis 0 of a (rows, 64) matrix by a random row list as long as the matrix (index_select)."""
    rows = max(1, n // 64)
    return _gather("Gather axis=0", _data(rng, (rows, 64)), _idx(rng, (rows,), rows), 0)


def gather_last_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """Gather the last axis of a (rows, 256) matrix by 256 random column numbers (a column shuffle)."""
    cols = 256
    rows = max(1, n // cols)
    return _gather("Gather axis=-1", _data(rng, (rows, cols)), _idx(rng, (cols,), cols), -1)


def gather_embedding(n: int, rng: np.random.Generator) -> KernelCase:
    """An embedding lookup: token ids (batch, seq) into a (8192, 128) table; output of ``n`` elements."""
    width, vocab = 128, 8192
    tokens = max(1, n // width)
    batch = max(1, tokens // 64)
    table = _data(rng, (vocab, width))
    return _gather("Gather embedding", table, _idx(rng, (batch, tokens // batch), vocab), 0)


def gather_elements_first_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """GatherElements axis 0 of a (rows, 256) matrix, indices shaped like the data."""
    rows = max(1, n // 256)
    data = _data(rng, (rows, 256))
    return _gather_elements("GatherElements axis=0", data, _idx(rng, data.shape, rows), 0)


def gather_elements_last_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """GatherElements axis -1 of a (rows, 256) matrix, indices shaped like the data (torch.gather)."""
    rows = max(1, n // 256)
    data = _data(rng, (rows, 256))
    return _gather_elements("GatherElements axis=-1", data, _idx(rng, data.shape, 256), -1)


def gather_nd_one(n: int, rng: np.random.Generator) -> KernelCase:
    """GatherND with 1-tuples: whole rows of a (rows, 64) matrix."""
    rows = max(1, n // 64)
    data = _data(rng, (rows, 64))
    return _gather_nd("GatherND t=1", data, _idx(rng, (rows, 1), rows), 0)


def gather_nd_two(n: int, rng: np.random.Generator) -> KernelCase:
    """GatherND with 2-tuples into a (16, m, 16) tensor: rows of 16 elements, ``n / 16`` of them."""
    mid = max(1, n // 256)
    data = _data(rng, (16, mid, 16))
    count = max(1, n // 16)
    indices = np.stack([_idx(rng, (count,), 16), _idx(rng, (count,), mid)], axis=-1)
    return _gather_nd("GatherND t=2", data, indices, 0)


def gather_nd_batch(n: int, rng: np.random.Generator) -> KernelCase:
    """GatherND batch_dims=1: per batch of 8, rows of a (rows, 64) matrix by 1-tuples."""
    rows = max(1, n // 512)
    data = _data(rng, (8, rows, 64))
    return _gather_nd("GatherND batch_dims=1", data, _idx(rng, (8, rows, 1), rows), 1)


def scatter_elements_first_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """ScatterElements axis 0 of a (rows, 256) matrix: half the rows of every column, no duplicates."""
    rows = max(2, n // 256)
    data = _data(rng, (rows, 256))
    chosen = rng.permutation(rows)[: rows // 2]
    # Shifting a set of distinct rows by a per-column constant (mod rows) keeps them distinct.
    indices = (chosen[:, None] + _idx(rng, (1, 256), rows)) % rows
    updates = _data(rng, indices.shape)
    return _scatter_elements("ScatterElements axis=0", data, indices, updates, 0)


def scatter_elements_last_axis(n: int, rng: np.random.Generator) -> KernelCase:
    """ScatterElements axis -1 of a (rows, 256) matrix: half the columns of every row, no duplicates."""
    rows = max(1, n // 256)
    data = _data(rng, (rows, 256))
    chosen = rng.permutation(256)[:128]
    indices = (chosen[None, :] + _idx(rng, (rows, 1), 256)) % 256
    updates = _data(rng, indices.shape)
    return _scatter_elements("ScatterElements axis=-1", data, indices, updates, -1)


def scatter_nd_one(n: int, rng: np.random.Generator) -> KernelCase:
    """ScatterND with 1-tuples: half the rows of a (rows, 64) matrix replaced, no duplicates."""
    rows = max(2, n // 64)
    data = _data(rng, (rows, 64))
    indices = rng.permutation(rows)[: rows // 2].astype(np.int64)[:, None]
    return _scatter_nd("ScatterND t=1", data, indices, _data(rng, (rows // 2, 64)))


def scatter_nd_two(n: int, rng: np.random.Generator) -> KernelCase:
    """ScatterND with 2-tuples into a (rows, 64) matrix: single elements, a quarter of them, no duplicates."""
    rows = max(1, n // 64)
    data = _data(rng, (rows, 64))
    flat = rng.permutation(data.size)[: data.size // 4]
    indices = np.stack(np.unravel_index(flat, data.shape), axis=-1).astype(np.int64)
    return _scatter_nd("ScatterND t=2", data, indices, _data(rng, (flat.size,)))


CASE_BUILDERS: tuple[Callable[[int, np.random.Generator], KernelCase], ...] = (
    gather_first_axis,
    gather_last_axis,
    gather_embedding,
    gather_elements_first_axis,
    gather_elements_last_axis,
    gather_nd_one,
    gather_nd_two,
    gather_nd_batch,
    scatter_elements_first_axis,
    scatter_elements_last_axis,
    scatter_nd_one,
    scatter_nd_two,
)
"""Every kernel case, in table order."""


def build_cases(n: int, seed: int = 0) -> list[KernelCase]:
    """Every kernel case at about ``n`` elements, with reproducible inputs."""
    return [build(n, np.random.default_rng(seed + i)) for i, build in enumerate(CASE_BUILDERS)]
