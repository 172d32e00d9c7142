"""onnxscript models whose gather/scatter nodes live in model-local functions (domain ``eco.local``):
nested functions, one function called at two call sites with different shapes, an If inside a function.
"""

from __future__ import annotations

import numpy as np
import onnx
from eco_common import Built, Spec
from onnxscript import FLOAT, INT64, script
from onnxscript import opset18 as op
from onnxscript.values import Opset

local = Opset("eco.local", 1)
PACKAGES = ("onnxscript",)


@script(local, default_opset=op)
def pick_rows(table, ids):
    return op.Gather(table, ids, axis=0)


@script(local, default_opset=op)
def pick_along_last(data, idx):
    return op.GatherElements(data, idx, axis=-1)


@script(local, default_opset=op)
def write_rows(data, ids, updates):
    """Rows of ``data`` at ``ids`` replaced (ScatterND), then a column max-accumulated (ScatterElements)."""
    where = op.Unsqueeze(ids, op.Constant(value_ints=[-1]))
    written = op.ScatterND(data, where, updates)
    cols = op.Constant(value=onnx.helper.make_tensor("cols", onnx.TensorProto.INT64, [1, 1], [0]))
    first = op.Gather(updates, op.Constant(value_ints=[0]), axis=0)
    first_col = op.Gather(first, op.Constant(value_ints=[0]), axis=1)
    return op.ScatterElements(written, cols, first_col, axis=1, reduction="max")


@script(local, default_opset=op)
def gather_then_write(data, ids, idx):
    """Nested: calls pick_rows, pick_along_last and write_rows; also a GatherND of its own."""
    rows = pick_rows(data, ids)
    picked = pick_along_last(rows, idx)
    nd = op.GatherND(data, op.Unsqueeze(ids, op.Constant(value_ints=[-1])))
    updated = write_rows(data, ids, nd * op.Constant(value_float=2.0))
    return picked, updated


@script(local, default_opset=op)
def choose(flag, data, ids):
    """An If inside a function: a Gather in each branch, on different axes."""
    if op.ReduceSum(flag) > op.Constant(value_float=0.0):
        out = op.Gather(data, ids, axis=0)
    else:
        out = op.Transpose(op.Gather(data, ids, axis=1), perm=[1, 0])
    return out


@script(default_opset=op)
def two_call_sites(table: FLOAT[10, 4], cube: FLOAT[5, 3, 2], ids: INT64[3], pair: INT64[2, 2]):
    a = pick_rows(table, ids)
    b = pick_rows(cube, pair)
    return a, b


@script(default_opset=op)
def nested(data: FLOAT[6, 5], ids: INT64[3], idx: INT64[3, 4]):
    picked, updated = gather_then_write(data, ids, idx)
    return picked, updated


@script(default_opset=op)
def if_in_function(flag: FLOAT[1], data: FLOAT[4, 4], ids: INT64[2]):
    yes = choose(flag, data, ids)
    no = choose(op.Neg(flag), data, ids)
    return yes, no


def _proto(fn: object) -> onnx.ModelProto:
    model = fn.to_model_proto()  # type: ignore[attr-defined]
    model.ir_version = 10
    return model


def build_two_call_sites() -> Built:
    rng = np.random.default_rng(31)
    feeds = {
        "table": rng.standard_normal((10, 4)).astype(np.float32),
        "cube": rng.standard_normal((5, 3, 2)).astype(np.float32),
        "ids": np.array([9, -10, 4], dtype=np.int64),
        "pair": np.array([[0, 4], [-1, 2]], dtype=np.int64),
    }
    return Built(_proto(two_call_sites), feeds)


def build_nested() -> Built:
    rng = np.random.default_rng(32)
    feeds = {
        "data": rng.standard_normal((6, 5)).astype(np.float32),
        "ids": np.array([5, 0, 2], dtype=np.int64),
        "idx": rng.integers(-5, 5, (3, 4)).astype(np.int64),
    }
    return Built(_proto(nested), feeds)


def build_if_in_function() -> Built:
    rng = np.random.default_rng(33)
    feeds = {
        "flag": np.array([1.0], dtype=np.float32),
        "data": rng.standard_normal((4, 4)).astype(np.float32),
        "ids": np.array([3, -4], dtype=np.int64),
    }
    return Built(_proto(if_in_function), feeds)


SPECS: list[Spec] = [
    Spec("os_two_call_sites", "onnxscript", "one local function (Gather) called with a 2-D and a 3-D table",
         build_two_call_sites, PACKAGES),
    Spec("os_nested_functions", "onnxscript", "nested local functions: Gather, GatherElements, GatherND, "
         "ScatterND, ScatterElements max", build_nested, PACKAGES),
    Spec("os_if_in_function", "onnxscript", "a local function holding an If with a Gather per branch, "
         "called twice", build_if_in_function, PACKAGES),
]
