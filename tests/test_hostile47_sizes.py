"""Hostile cases against two changes of issue 35's round (stop 47), each against onnxruntime's CPU session
(one thread): static sizes refused in every engine (a value read by ``Shape`` alone is not allocated when
onnxruntime folds constants, and is when the caller turns optimizations off; a value of constants is
folded, so allocated), and long one-dimensional integer constants in external data handed inline to the
sessions whose type inference reads them (values as onnxruntime's, with ``add_initializer`` and
``add_external_initializers`` too)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import dmlshim


def _shape_of_big(n: int, *, of_feed: bool) -> bytes:
    """``Gather(Shape(Expand(x, [n])), idx)``: the Expand reads the feed ``x`` (of_feed) or a constant."""
    inits = [onnx.numpy_helper.from_array(np.array([n], np.int64), "shp")]
    if not of_feed:
        inits.append(onnx.numpy_helper.from_array(np.ones(1, np.float32), "x"))
    g = h.make_graph(
        [
            h.make_node("Expand", ["x", "shp"], ["big"]),
            h.make_node("Shape", ["big"], ["s"]),
            h.make_node("Gather", ["s", "idx"], ["y"], axis=0),
        ],
        "g",
        [h.make_tensor_value_info("idx", T.INT64, [1])]
        + ([h.make_tensor_value_info("x", T.FLOAT, [1])] if of_feed else []),
        [h.make_tensor_value_info("y", T.INT64, [1])],
        initializer=inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
@pytest.mark.parametrize("limit", [None, "150000000"])
def test_value_read_by_shape_alone_is_not_refused(
    engine: str, limit: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Expand of a feed read by Shape alone is never allocated by onnxruntime (it folds the Shape and drops
    the Expand: 75 MB peak at 10^10 floats, 40 GB): not refused, with or without a memory limit."""
    if limit is not None:
        monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", limit)
    n = 10**10 if limit is None else 10**8
    model = _shape_of_big(n, of_feed=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    feeds = {"idx": np.array([0], np.int64), "x": np.ones(1, np.float32)}
    expected = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dmlshim.InferenceSession(model, so, engine=engine).run(None, feeds)
    assert got[0].tolist() == expected[0].tolist() == [n]


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
def test_value_read_by_shape_alone_refused_when_onnxruntime_folds_nothing(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``ORT_DISABLE_ALL`` onnxruntime folds no Shape, so it computes the Expand (485 MB peak for 10^8
    floats under a 150 MB limit): refused, in every engine, when the caller's options say so."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "150000000")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with pytest.raises(dmlshim.TooLargeError, match="big"):
        dmlshim.InferenceSession(_shape_of_big(10**8, of_feed=True), so, engine=engine)


def test_constant_read_by_shape_alone_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """An Expand of constants is folded (allocated: 456 MB peak in onnxruntime for 10^8 floats) before the
    Shape reading it: refused under a 150 MB limit."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "150000000")
    with pytest.raises(dmlshim.TooLargeError, match="big"):
        dmlshim.InferenceSession(_shape_of_big(10**8, of_feed=False), engine="cpu")


def _table_model(folder: Any, n: int) -> str:
    """A 1-D int64 table in external data read by a Gather and by Cast (then ReduceSum) and Add (then
    ReduceMax): the long integer constants inlined for sessions (issue 35 part 3)."""
    table = (np.arange(n, dtype=np.int64) * 3) % 1000
    nodes = [
        h.make_node("Gather", ["table", "idx"], ["g"], axis=0),
        h.make_node("Cast", ["table"], ["tf"], to=T.FLOAT),
        h.make_node("ReduceSum", ["tf"], ["rs"], keepdims=0),
        h.make_node("Add", ["table", "table"], ["a"]),
        h.make_node("ReduceMax", ["a"], ["am"], keepdims=0),
    ]
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("idx", T.INT64, [3])],
        [
            h.make_tensor_value_info("g", T.INT64, [3]),
            h.make_tensor_value_info("rs", T.FLOAT, []),
            h.make_tensor_value_info("am", T.INT64, []),
        ],
        initializer=[onnx.numpy_helper.from_array(table, "table")],
    )
    path = str(folder / "m.onnx")
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path, save_as_external_data=True, location="m.data", size_threshold=0)
    return path


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
@pytest.mark.parametrize("change", [None, "add_initializer", "add_external_initializers"])
def test_long_int_constant_read_by_gather_and_add(engine: str, change: str | None, tmp_path: Any) -> None:
    """onnxruntime's answers, the caller's value where it takes it: with add_initializer onnxruntime 1.32's
    Gather reads the caller's table while Cast/Add keep the file's (folded at load), with
    add_external_initializers every reader takes the caller's."""
    n = 2**20
    path = _table_model(tmp_path, n)
    feeds = {"idx": np.array([0, 5, n - 1], np.int64)}
    answers = []
    for mod in (ort, dmlshim):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        value = ort.OrtValue.ortvalue_from_numpy(np.full(n, 7, np.int64))
        if change == "add_initializer":
            so.add_initializer("table", value)
        elif change == "add_external_initializers":
            so.add_external_initializers(["table"], [value])
        if mod is ort:
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        else:
            sess = dmlshim.InferenceSession(path, so, engine=engine)
        answers.append([x.tolist() for x in sess.run(None, feeds)])
    assert answers[1] == answers[0]


def test_small_external_data_loaded_in_place(tmp_path: Any) -> None:
    """load_small_external_data hides the large external initializers by location only: the small external
    one is read, the large one stays external, the inline one untouched, the order kept (taking them out
    and back copied every inline one twice: 200 MB more for a caller's 100 MB added initializer)."""
    from pathlib import Path

    from dmlshim.execute.weights.values import load_small_external_data

    tensors = [
        onnx.numpy_helper.from_array(np.arange(4, dtype=np.int64), "small"),
        onnx.numpy_helper.from_array(np.arange(4096, dtype=np.float32), "inline"),
        onnx.numpy_helper.from_array(np.arange(8192, dtype=np.float32), "large"),
    ]
    g = h.make_graph([], "g", [], [h.make_tensor_value_info("small", T.INT64, [4])], initializer=tensors)
    path = tmp_path / "m.onnx"
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    loaded = onnx.load(str(path), load_external_data=False)
    inline = loaded.graph.initializer[1]
    inline.CopyFrom(tensors[1])
    load_small_external_data(loaded, Path(path), 16384)
    small, inline, large = loaded.graph.initializer
    assert [t.name for t in loaded.graph.initializer] == ["small", "inline", "large"]
    assert onnx.numpy_helper.to_array(small).tolist() == [0, 1, 2, 3]
    assert (
        inline.data_location == T.DEFAULT
        and onnx.numpy_helper.to_array(inline).sum() == np.arange(4096).sum()
    )
    assert large.data_location == T.EXTERNAL and not large.raw_data
