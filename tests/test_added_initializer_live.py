"""Values added through ``SessionOptions.add_initializer`` and updated in place between runs (issue 35).

onnxruntime keeps the caller's OrtValue and reads its buffer on every run (except in nodes its constant
folding computed at build, and in kernels that pack a weight at build: MatMul's B, Gemm's B). Every case
runs the same model with the same options and the same updates in onnxruntime's CPU provider
(``intra_op_num_threads=1``) and in each dmlshim engine, and compares every run's outputs bit for bit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import IndexOutOfRangeError

from .added_initializers import both_sides
from .oracle import IR_VERSION, assert_same_bits

ENGINES = ["partitioned", "customop", "cpu", None]


def _model(
    nodes: list[Any], inputs: list[Any], inits: list[np.ndarray], names: Sequence[str], outs: Sequence[str]
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "live",
        inputs,
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
        [numpy_helper.from_array(a, n) for a, n in zip(inits, names, strict=True)],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def _compare(
    model: bytes,
    added: dict[str, np.ndarray],
    updates: Sequence[dict[str, np.ndarray]],
    feeds: dict[str, np.ndarray],
    engine: str | None,
    level: Any = None,
) -> list[Any]:
    def values() -> dict[str, Any]:  # the caller's OrtValues: onnxruntime reads their buffers
        return {n: ort.OrtValue.ortvalue_from_numpy(a.copy()) for n, a in added.items()}

    def changes(update: dict[str, np.ndarray]) -> Callable[[dict[str, Any]], None]:
        def change(held: dict[str, Any]) -> None:
            for name, arr in update.items():
                held[name].update_inplace(arr.copy())

        return change

    want, got = both_sides(
        model, engine, values, [changes(u) for u in updates], lambda s: s.run(None, feeds), level
    )
    for w, g in zip(want, got, strict=True):
        if isinstance(w, Exception):
            assert isinstance(g, Exception), f"onnxruntime raised {w!r}, dmlshim returned {g!r}"
            # the drop-in's error for onnxruntime's "indices element out of data bounds" (as for a feed)
            assert "out of data bounds" in str(w)
            assert isinstance(g, IndexOutOfRangeError) and re.search(r"\b(index |idx=)9\b", str(g))
        else:
            assert not isinstance(g, Exception), f"dmlshim raised {g!r}"
            assert_same_bits(g, w)
    return want


def _gather(indices_added: bool) -> bytes:
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    if indices_added:
        return _model(
            [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
            [helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])],
            [np.array([0, 1], np.int64)],
            ["i"],
            ["y"],
        )
    return _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [data],
        ["d"],
        ["y"],
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_gathered_data_updated_in_place_is_read_on_every_run(engine: str | None) -> None:
    want = _compare(
        _gather(False),
        {"d": np.full((4, 3), 2, np.float32)},
        [{"d": np.full((4, 3), 5, np.float32)}, {"d": np.arange(12, dtype=np.float32).reshape(4, 3) * -1}],
        {"i": np.array([0, 3], np.int64)},
        engine,
    )
    assert want[1][0].ravel().tolist() == [5.0] * 6  # onnxruntime reads the new values


@pytest.mark.parametrize("engine", ENGINES)
def test_indices_updated_in_place_are_read_and_checked_on_every_run(engine: str | None) -> None:
    """Indices added as [0, 1] (non-negative, in range at build): updated to negative ones (wrapped), then
    out of range (onnxruntime's run fails: so must dmlshim's), then back in range."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    want = _compare(
        _gather(True),
        {"i": np.array([0, 1], np.int64)},
        [
            {"i": np.array([-1, -4], np.int64)},
            {"i": np.array([2, 9], np.int64)},
            {"i": np.array([3, 3], np.int64)},
        ],
        {"d": data},
        engine,
    )
    assert isinstance(want[2], Exception)
    assert want[1][0].tolist() == data[[3, 0]].tolist()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_update_of_another_shape_keeps_the_added_shape(engine: str | None) -> None:
    """``update_inplace`` refuses another element count, and keeps the OrtValue's shape and type for the
    same count in another shape: the session still sees a [2] int64 index, as onnxruntime's does."""
    ov = ort.OrtValue.ortvalue_from_numpy(np.array([0, 1], np.int64))
    with pytest.raises(RuntimeError, match="does not match the size"):
        ov.update_inplace(np.zeros(3, np.int64))
    _compare(
        _gather(True),
        {"i": np.array([0, 1], np.int64)},
        [{"i": np.array([[2, 3]], np.int64)}],
        {"d": np.arange(12, dtype=np.float32).reshape(4, 3)},
        engine,
    )


@pytest.mark.parametrize("level", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_weight_read_by_a_gather_a_matmul_an_add_and_a_folded_relu(engine: str | None, level: Any) -> None:
    """One added weight read four ways: the Gather and the Add read it anew, MatMul keeps the value it
    packed at build, and Relu(w) (folded at build unless optimizations are off) the model's own."""
    w = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    model = _model(
        [
            helper.make_node("Gather", ["w", "i"], ["g"], axis=0),
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["x", "w"], ["a"]),
            helper.make_node("Relu", ["w"], ["r"]),
            helper.make_node("Gather", ["r", "i"], ["rg"], axis=0),
        ],
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3]),
        ],
        [w],
        ["w"],
        ["g", "m", "a", "rg"],
    )
    want = _compare(
        model,
        {"w": np.full((3, 3), -2, np.float32)},
        [{"w": np.full((3, 3), 7, np.float32)}],
        {"i": np.array([2, 0], np.int64), "x": np.eye(3, dtype=np.float32)},
        engine,
        level,
    )
    assert want[1][0].ravel().tolist() == [7.0] * 6 and want[1][1][0, 0] == -2.0


@pytest.mark.parametrize("engine", ENGINES)
def test_an_added_overridable_initializer_fed_or_not(engine: str | None) -> None:
    """An initializer the caller may also feed (a graph input): a feed wins; without one, the added value
    as updated."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("GatherElements", ["d", "i"], ["y"], axis=0)],
            "live",
            [helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.zeros((2, 3), np.int64), "i")],
        ),
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.graph.input.append(helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3]))
    raw = model.SerializeToString()
    fed = {"d": data, "i": np.full((2, 3), 1, np.int64)}
    for feeds in ({"d": data}, fed):
        _compare(
            raw, {"i": np.full((2, 3), 2, np.int64)}, [{"i": np.full((2, 3), 3, np.int64)}], feeds, engine
        )
