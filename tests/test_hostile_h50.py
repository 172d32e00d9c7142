"""Hostile pass h50 (issue 35, item 6), sessions and values: initializers added through the session
options, index proofs under overrides, constant indices, the proofs past their first runs, external data
that leaves the model's folder or changes after load. Every expected value is onnxruntime CPU's (one
thread), built the same way; where onnxruntime errors, dmlshim's IndexOutOfRangeError."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError, BadModelError, IndexOutOfRangeError

from .added_initializers import KEPT, options_with_added

ENGINES = ("partitioned", "customop", "cpu")


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto]):
    graph = helper.make_graph(
        nodes, "h50", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def _options(module: Any, adds: dict[str, np.ndarray]) -> Any:
    return options_with_added(module, adds)


def _ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray], adds: dict[str, np.ndarray]) -> Any:
    src = model if isinstance(model, str) else model.SerializeToString()
    try:
        sess = onnxruntime.InferenceSession(
            src, _options(onnxruntime, adds), providers=["CPUExecutionProvider"]
        )
        return sess.run(None, feeds)
    except Exception as exc:  # onnxruntime's refusal: dmlshim must refuse too
        return exc


def _assert_follows_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], adds: dict[str, np.ndarray],
                        engine: str) -> None:  # fmt: skip
    want = _ort(model, feeds, adds)
    sess = dmlshim.InferenceSession(model.SerializeToString(), _options(dmlshim, adds), engine=engine)
    if isinstance(want, Exception):
        assert any(w in str(want) for w in ("out of data bounds", "Out of range", "invalid ind")), want
        with pytest.raises(IndexOutOfRangeError):
            sess.run(None, feeds)
        return
    got = sess.run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


_W = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
_X = helper.make_tensor_value_info("x", TensorProto.INT64, [2])


def _gather_of_input() -> onnx.ModelProto:
    return _model([helper.make_node("Gather", ["W", "x"], ["y"], name="g")], [_X], [_W])


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
@pytest.mark.parametrize("engine", ENGINES)
def test_add_initializer_of_another_dtype_is_refused(dtype: type, engine: str) -> None:
    """onnxruntime does not convert an added value: it reads its bytes as the model's type (float64 7.0
    as float32 gives 0.0 and 2.4375; float16 reads past the value's end). The partitioned engine used to
    compute with the value's own type, silently; now every engine refuses it, naming both types."""
    model = _gather_of_input()
    feeds = {"x": np.array([-1, 2], np.int64)}
    value = np.full((4, 3), 7, dtype)
    theirs = _ort(model, feeds, {"W": value})
    assert not isinstance(theirs, Exception) and not np.array_equal(theirs[0], np.full((2, 3), 7, np.float32))
    with pytest.raises(BadInputError, match=r"replaces the FLOAT initializer 'W' with a \w+ value"):
        dmlshim.InferenceSession(model.SerializeToString(), _options(dmlshim, {"W": value}), engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_add_external_initializers_of_another_dtype_is_refused_as_onnxruntime_refuses_it(
    engine: str, tmp_path: Path
) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    model = _gather_of_input()
    convert_model_to_external_data(model, location="w.bin", size_threshold=0)
    onnx.save(model, tmp_path / "m.onnx")
    so = _options(dmlshim, {})
    value = np.full((4, 3), 7, np.float64)
    ortvalue = onnxruntime.OrtValue.ortvalue_from_numpy(value)
    KEPT.append((value, ortvalue))
    so.add_external_initializers(["W"], [ortvalue])
    # onnxruntime checks this one itself: its words, as a BadInputError
    with pytest.raises(BadInputError, match="data type does not match"):
        dmlshim.InferenceSession(str(tmp_path / "m.onnx"), so, engine=engine)


@pytest.mark.parametrize(
    ("adds", "x"),
    [
        ({"W": np.full((4, 3), 7, np.float32)}, [-1, 2]),  # same type: used everywhere
        ({"W": np.full((2, 3), 7, np.float32)}, [-1, 2]),  # another shape: onnxruntime refuses index 2
        ({"W": np.full((2, 3), 7, np.float32)}, [-2, 1]),
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_add_initializer_of_the_same_dtype_follows_onnxruntime(adds: dict, x: list[int], engine: str) -> None:
    _assert_follows_ort(_gather_of_input(), {"x": np.array(x, np.int64)}, adds, engine)


def _clip_then_gather() -> onnx.ModelProto:
    lo = numpy_helper.from_array(np.array(0, np.int64), "lo")
    return _model(
        [
            helper.make_node("Clip", ["x", "lo"], ["c"]),
            helper.make_node("Gather", ["W", "c"], ["y"], name="g"),
        ],
        [_X],
        [_W, lo],
    )


@pytest.mark.parametrize(("lo", "x"), [(-1, [-1, 0]), (-9, [-5, 0]), (-4, [-4, 3]), (0, [-7, 9])])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_clip_bound_overridden_negative_follows_onnxruntime(lo: int, x: list[int], engine: str) -> None:
    """The proof takes ``Clip(x, lo)`` as non-negative from the model's ``lo = 0``; the session options
    may replace ``lo`` (here -1, -9, -4): the values (or the refusal) are onnxruntime's."""
    adds = {"lo": np.array(lo, np.int64)} if lo else {}
    _assert_follows_ort(_clip_then_gather(), {"x": np.array(x, np.int64)}, adds, engine)


def _constant_index_gather() -> onnx.ModelProto:
    k = numpy_helper.from_array(np.array([1, 2], np.int64), "k")
    return _model([helper.make_node("Gather", ["W", "k"], ["y"], name="g")], [], [_W, k])


@pytest.mark.parametrize("k", [[-1, -4], [4, 0], [[3, 0], [1, 1]]])
@pytest.mark.parametrize("engine", ENGINES)
def test_constant_indices_overridden_follow_onnxruntime(k: list, engine: str) -> None:
    """onnxruntime folds a gather of initializers before it applies the added value (its warning:
    "Removing initializer 'k'"): the model's indices stand, in dmlshim as in onnxruntime."""
    _assert_follows_ort(_constant_index_gather(), {}, {"k": np.array(k, np.int64)}, "partitioned")
    _assert_follows_ort(_constant_index_gather(), {}, {"k": np.array(k, np.int64)}, engine)


def _where_chain() -> onnx.ModelProto:
    inits = [
        numpy_helper.from_array(np.array([True, False]), "cond"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "a"),
        numpy_helper.from_array(np.array([0, 3], np.int64), "b"),
        numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W2"),
        numpy_helper.from_array(np.array([1], np.int64), "ax"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "shp"),
    ]
    nodes = [
        helper.make_node("Where", ["cond", "a", "b"], ["i"]),
        helper.make_node("Unsqueeze", ["i", "ax"], ["i1"]),
        helper.make_node("Expand", ["i1", "shp"], ["i2"]),
        helper.make_node("GatherElements", ["W2", "i2"], ["y"], name="ge", axis=0),
    ]
    return _model(nodes, [], inits)


@pytest.mark.parametrize(
    "adds",
    [
        {},
        {"b": np.array([-4, -1], np.int64)},
        {"b": np.array([-5, 4], np.int64)},
        {"cond": np.array([0, 0], bool)},
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_where_chain_with_overridden_branches_follows_onnxruntime(adds: dict, engine: str) -> None:
    _assert_follows_ort(_where_chain(), {}, adds, engine)


@pytest.mark.parametrize("rows", [4, 50_000])
@pytest.mark.parametrize("k", [[4], [-5], 4, -5, [3], -4, [1_000_000], [0, 4]])
def test_constant_indices_into_fed_data_follow_onnxruntime(rows: int, k: Any) -> None:
    """A constant index is proved in range against each run's data shape; 50,000 rows make the gather's
    input large. Four runs: past the proof runs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    model = _model(
        [helper.make_node("Gather", ["x", "k"], ["y"], name="g", axis=0)],
        [x],
        [numpy_helper.from_array(np.array(k, np.int64), "k")],
    )
    feeds = {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)}
    for engine in ENGINES:
        for _ in range(4):
            _assert_follows_ort(model, feeds, {}, engine)


def _sequence(model: onnx.ModelProto, feed_list: list[dict[str, np.ndarray]], engine: str) -> None:
    ref = onnxruntime.InferenceSession(model.SerializeToString(), _options(onnxruntime, {}),
                                       providers=["CPUExecutionProvider"])  # fmt: skip
    sess = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    for feeds in feed_list:
        try:
            want = ref.run(None, feeds)
        except Exception:  # onnxruntime refuses the index
            with pytest.raises(IndexOutOfRangeError):
                sess.run(None, feeds)
            continue
        for g, w in zip(sess.run(None, feeds), want, strict=True):
            np.testing.assert_array_equal(g, w)


_N = 40_000  # a [N, 4] float32 output: 640 KB, over the 512 KiB where the proofs take over


@pytest.mark.parametrize("engine", ENGINES)
def test_a_large_scatternd_past_its_proof_runs_follows_onnxruntime(engine: str) -> None:
    d = helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, ["K", 1])
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, ["K", 4])
    model = _model([helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="s")], [d, i, u], [])
    data, upd = np.zeros((_N, 4), np.float32), np.arange(8, dtype=np.float32).reshape(2, 4)

    def feeds(idx: list[int]) -> dict[str, np.ndarray]:
        return {"d": data, "i": np.array(idx, np.int64).reshape(2, 1), "u": upd}

    ok = feeds([1, 5])
    _sequence(model, [ok, ok, ok, ok, feeds([_N, 5]), feeds([-1, 5]), feeds([-_N - 1, 5]), feeds([7, 7]), ok],
              engine)  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
def test_a_large_scatterelements_past_its_proof_runs_follows_onnxruntime(engine: str) -> None:
    d = helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4])
    i = helper.make_tensor_value_info("i", TensorProto.INT32, [1, 2])
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 2])
    model = _model(
        [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], name="s", axis=1)], [d, i, u], []
    )
    base = {"d": np.zeros((_N, 4), np.float32), "u": np.array([[5, 6]], np.float32)}

    def feeds(idx: list[int]) -> dict[str, np.ndarray]:
        return {**base, "i": np.array([idx], np.int32)}

    ok = feeds([0, 1])
    _sequence(
        model, [ok, ok, ok, ok, feeds([4, 1]), feeds([-4, -1]), feeds([2, 2]), feeds([-5, 0]), ok], engine
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_large_gatherelements_past_its_proof_runs_follows_onnxruntime(engine: str) -> None:
    d = helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, ["N", 4])
    model = _model([helper.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=1)], [d, i], [])
    data = np.arange(_N * 4, dtype=np.float32).reshape(_N, 4)

    def feeds(last: int) -> dict[str, np.ndarray]:
        idx = np.zeros((_N, 4), np.int64)
        idx[-1, -1] = last
        return {"d": data, "i": idx}

    _sequence(model, [feeds(0)] * 4 + [feeds(4), feeds(-4), feeds(-5), feeds(3)], engine)


def test_a_big_endian_feed_is_read_as_onnxruntime_reads_it() -> None:
    """onnxruntime reads a '>i8' array's bytes in the machine's order (index 1 becomes 2**56 and is
    refused): the drop-in reads it the same way, so the index is out of range there too (an inputs file
    holding it is refused: tests/test_hostile_h50_cli.py)."""
    feeds = {"x": np.array([1, 2], dtype=">i8")}
    theirs = _ort(_gather_of_input(), feeds, {})
    assert isinstance(theirs, Exception) and "72057594037927936" in str(theirs)
    with pytest.raises(BadInputError, match="72057594037927936"):
        dmlshim.InferenceSession(_gather_of_input().SerializeToString()).run(None, feeds)


def _external_model(folder: Path, location: str) -> str:
    weight = onnx.TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 3])
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value=location)
    path = folder / "m.onnx"
    onnx.save(_model([helper.make_node("Gather", ["W", "x"], ["y"], name="g")], [_X], [weight]), path)
    return str(path)


_LOCATIONS: dict[str, Callable[[Path], str]] = {
    "dotdot": lambda d: "../other/w.bin",
    "absolute": lambda d: str(d.parent / "other" / "w.bin"),
    "file_link_out": lambda d: (os.symlink(d.parent / "other" / "w.bin", d / "l.bin"), "l.bin")[1],
    "folder_link_out": lambda d: (os.symlink(d.parent / "other", d / "dl"), "dl/w.bin")[1],
    "hard_link": lambda d: (os.link(d.parent / "other" / "w.bin", d / "h.bin"), "h.bin")[1],
    "dev_zero": lambda d: "/dev/zero",
}


@pytest.mark.parametrize("case", sorted(_LOCATIONS))
def test_external_data_outside_the_folder_is_refused_as_onnxruntime_refuses(
    case: str, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "mdl").mkdir()
    np.arange(12, dtype=np.float32).tofile(tmp_path / "other" / "w.bin")
    path = _external_model(tmp_path / "mdl", _LOCATIONS[case](tmp_path / "mdl"))
    feeds = {"x": np.array([1, -1], np.int64)}
    want = _ort(path, feeds, {})
    for engine in ENGINES:
        if isinstance(want, Exception):
            with pytest.raises(BadModelError):
                dmlshim.InferenceSession(path, engine=engine).run(None, feeds)
        else:
            np.testing.assert_array_equal(
                dmlshim.InferenceSession(path, engine=engine).run(None, feeds)[0], want[0]
            )
    if case != "hard_link":
        assert isinstance(want, Exception) and "External data path validation failed" in str(want)


@pytest.mark.parametrize(
    ("change", "rows"),
    [
        ("edit", 20_000),
        ("edit", 1000),  # 12 KB: under the 64 KiB dmlshim read into the model (found by h50; fixed on main)
        ("edit", 10),  # 120 bytes: onnxruntime 1.24 and 1.32 map even a 12-byte external tensor
        ("replace", 1000),
        ("replace", 20_000),
        ("delete", 1000),
        ("delete", 20_000),
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
def test_external_data_changed_after_load_follows_onnxruntime(
    change: str, rows: int, engine: str, tmp_path: Path
) -> None:
    from onnx.external_data_helper import convert_model_to_external_data

    model = _gather_of_input()
    table = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(table, "W"))
    convert_model_to_external_data(model, location="w.bin", size_threshold=0)
    onnx.save(model, tmp_path / "m.onnx")
    path, data = str(tmp_path / "m.onnx"), tmp_path / "w.bin"
    feeds = {"x": np.array([0, rows - 1], np.int64)}
    ref = onnxruntime.InferenceSession(path, _options(onnxruntime, {}), providers=["CPUExecutionProvider"])
    sess = dmlshim.InferenceSession(path, engine=engine)
    np.testing.assert_array_equal(sess.run(None, feeds)[0], ref.run(None, feeds)[0])
    if change == "edit":
        with open(data, "r+b") as f:
            f.write(np.full(3, 7, np.float32).tobytes())
    elif change == "replace":
        np.full(rows * 3, 5, np.float32).tofile(tmp_path / "new.bin")
        os.replace(tmp_path / "new.bin", data)
    else:
        data.unlink()
    np.testing.assert_array_equal(sess.run(None, feeds)[0], ref.run(None, feeds)[0])


_I64_MIN = int(np.iinfo(np.int64).min)
_ONE_OP_CASES = [
    *(("Gather", {"axis": 1}, [v], None) for v in (-3, 2, 3, _I64_MIN, -1)),
    *(("GatherElements", {"axis": 2}, np.full((2, 3, 1), v).tolist(), None) for v in (-3, 3, _I64_MIN)),
    *(("GatherND", {}, [t], None) for t in ([0, -1], [2, 0], [-3, 0], [0, 3], [1, -4], [_I64_MIN, 0])),
    ("GatherND", {"batch_dims": 1}, [[-1], [2]], None),
    ("GatherND", {"batch_dims": 1}, [[-4], [3]], None),
    *(("ScatterElements", {"axis": 2}, np.full((2, 3, 1), v).tolist(), (2, 3, 1)) for v in (-4, 4, -5, 3)),
    *(("ScatterND", {}, [[0, v]], (1, 4)) for v in (-4, 4, -3, 2)),
]


@pytest.mark.parametrize(("op", "attrs", "idx", "upd"), _ONE_OP_CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_every_op_at_the_edges_of_its_range(op: str, attrs: dict, idx: list, upd: Any, engine: str) -> None:
    """Each op's indices at -dim-1, -dim, -1, dim-1, dim and INT64_MIN, fed: onnxruntime's values, or
    IndexOutOfRangeError where it refuses."""
    data = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(2, 3, 4), "D")
    indices = np.array(idx, np.int64)
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, list(indices.shape))]
    feeds = {"i": indices}
    names = ["D", "i"]
    if upd is not None:
        inputs.append(helper.make_tensor_value_info("u", TensorProto.FLOAT, list(upd)))
        feeds["u"] = np.ones(upd, np.float32)
        names.append("u")
    model = _model([helper.make_node(op, names, ["y"], name="n", **attrs)], inputs, [data])
    _assert_follows_ort(model, feeds, {}, engine)
