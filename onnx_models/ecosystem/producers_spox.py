"""Graphs built with spox: ScatterND/ScatterElements reductions min/max/mul (opset 18), integer data,
GatherND batch_dims 2, rank-0 indices, Gather over bool/int8/uint8/float16/float64/string tensors, and a
Shape->Gather->Range->GatherND->ScatterND row write on symbolic dimensions."""

from __future__ import annotations

import numpy as np
import onnx
import spox.opset.ai.onnx.v18 as op18
import spox.opset.ai.onnx.v21 as op21
from eco_common import Built, Spec
from spox import Tensor, Var, argument, build

PACKAGES = ("spox",)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f(seed: int, *shape: int) -> np.ndarray:
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _model(ins: dict[str, Var], outs: dict[str, Var], feeds: dict[str, np.ndarray]) -> Built:
    model = build(ins, outs)
    model.ir_version = 10
    assert isinstance(model, onnx.ModelProto)
    return Built(model, feeds)


def _const(value: object, dtype: type = np.int64) -> Var:
    return op21.constant(value=np.array(value, dtype))


def scatternd_minmax() -> Built:
    x = argument(Tensor(np.float32, ("n", 4)))
    i = argument(Tensor(np.int64, ("k", 1)))
    u = argument(Tensor(np.float32, ("k", 4)))
    outs = {red: op18.scatter_nd(x, i, u, reduction=red) for red in ("min", "max", "mul")}
    feeds = {"x": _f(71, 5, 4), "i": np.array([[1], [3], [1], [-1]], np.int64), "u": _f(72, 4, 4)}
    return _model({"x": x, "i": i, "u": u}, outs, feeds)


def scatter_elements_int() -> Built:
    x = argument(Tensor(np.int32, (3, 6)))
    i = argument(Tensor(np.int64, (3, 4)))
    u = argument(Tensor(np.int32, (3, 4)))
    outs = {red: op18.scatter_elements(x, i, u, axis=-1, reduction=red) for red in ("min", "max", "mul")}
    feeds = {
        "x": _rng(73).integers(-9, 9, (3, 6)).astype(np.int32),
        "i": _rng(74).integers(-6, 6, (3, 4)).astype(np.int64),
        "u": _rng(75).integers(-9, 9, (3, 4)).astype(np.int32),
    }
    return _model({"x": x, "i": i, "u": u}, outs, feeds)


def gathernd_batch2() -> Built:
    d = argument(Tensor(np.float32, (2, 3, 4, 5)))
    i = argument(Tensor(np.int64, (2, 3, 2, 1)))
    e = argument(Tensor(np.int64, (2, 3, 4, 2)))
    outs = {"g": op21.gather_nd(d, i, batch_dims=2), "ge": op21.gather_elements(d, e, axis=-1)}
    feeds = {
        "d": _f(76, 2, 3, 4, 5),
        "i": _rng(77).integers(-4, 4, (2, 3, 2, 1)).astype(np.int64),
        "e": _rng(78).integers(-5, 5, (2, 3, 4, 2)).astype(np.int64),
    }
    return _model({"d": d, "i": i, "e": e}, outs, feeds)


def gather_scalar_index() -> Built:
    x = argument(Tensor(np.float32, (4, 7)))
    k = argument(Tensor(np.int64, ()))
    col = op21.gather(x, k, axis=1)
    outs = {"col": col, "one": op21.gather(col, k, axis=0), "neg": op21.gather(x, op21.neg(k), axis=0)}
    return _model({"x": x, "k": k}, outs, {"x": _f(79, 4, 7), "k": np.array(3, np.int64)})


def gather_dtypes() -> Built:
    rng = _rng(80)
    tables: dict[str, np.ndarray] = {
        "bool": rng.integers(0, 2, (4, 3)).astype(bool),
        "int8": rng.integers(-100, 100, (4, 3)).astype(np.int8),
        "uint8": rng.integers(0, 255, (4, 3)).astype(np.uint8),
        "float16": rng.standard_normal((4, 3)).astype(np.float16),
        "float64": rng.standard_normal((4, 3)),
        "string": np.array(
            [["a", "bb", "c"], ["d", "", "ff"], ["g", "h", "ii"], ["j", "k", "l"]], dtype=np.str_
        ),
    }
    idx = argument(Tensor(np.int32, (3,)))
    ins: dict[str, Var] = {"idx": idx}
    outs: dict[str, Var] = {}
    for name, table in tables.items():
        ins[name] = argument(Tensor(np.str_ if name == "string" else table.dtype.type, (4, 3)))
        outs[f"g_{name}"] = op21.gather(ins[name], idx, axis=0)
    ins["bi"] = argument(Tensor(np.int64, (4, 1)))
    first_col = op21.slice(op21.not_(ins["bool"]), _const([0]), _const([1]), _const([1]))
    outs["s_bool"] = op21.scatter_elements(ins["bool"], ins["bi"], first_col, axis=1)
    feeds = {"idx": np.array([2, 0, -1], np.int32), **tables, "bi": np.array([[2], [0], [1], [2]], np.int64)}
    return _model(ins, outs, feeds)


def kv_row_write() -> Built:
    x = argument(Tensor(np.float32, ("batch", "seq", 8)))
    pos = argument(Tensor(np.int64, ("batch",)))
    rows = op21.range(_const(0), op21.gather(op21.shape(x), _const(0), axis=0), _const(1))
    ind = op21.concat([op21.unsqueeze(rows, _const([1])), op21.unsqueeze(pos, _const([1]))], axis=1)
    doubled = op21.mul(op21.gather_nd(x, ind), _const(2.0, np.float32))
    outs = {"y": op21.scatter_nd(x, ind, doubled, reduction="add")}
    return _model({"x": x, "pos": pos}, outs, {"x": _f(81, 3, 5, 8), "pos": np.array([4, 0, -2], np.int64)})


SPECS: list[Spec] = [
    Spec(
        "spox_scatternd_minmax",
        "spox",
        "ScatterND reduction min, max and mul with a repeated and a negative index",
        scatternd_minmax,
        PACKAGES,
    ),
    Spec(
        "spox_scatter_elements_int",
        "spox",
        "ScatterElements min/max/mul on int32 data, axis -1, negative indices",
        scatter_elements_int,
        PACKAGES,
    ),
    Spec(
        "spox_gathernd_batch2",
        "spox",
        "GatherND batch_dims 2 on rank-4 data, GatherElements axis -1",
        gathernd_batch2,
        PACKAGES,
    ),
    Spec(
        "spox_gather_scalar_index",
        "spox",
        "Gather with a rank-0 index (a rank-0 output), and its negation",
        gather_scalar_index,
        PACKAGES,
    ),
    Spec(
        "spox_gather_dtypes",
        "spox",
        "Gather over bool, int8, uint8, float16, float64 and string; ScatterElements on bool",
        gather_dtypes,
        PACKAGES,
    ),
    Spec(
        "spox_kv_row_write",
        "spox",
        "Shape->Gather->Range->GatherND->ScatterND add on symbolic batch and sequence",
        kv_row_write,
        PACKAGES,
    ),
]
