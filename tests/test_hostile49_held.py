"""Hostile round 49: cases that held, kept so that they keep holding. Every value is onnxruntime CPU's
(one intra-op thread); a refusal must be a refusal there too.

- feeds aliasing each other (a ScatterND whose data and updates are one array), non-contiguous or
  read-only feeds: onnxruntime's values, and no feed is written;
- gathers and scatters of constant indices (past the axis, negative) at each optimization level, where
  onnxruntime folds them at the higher levels;
- a Loop whose body gathers and scatters with an index computed from the iteration (negative ones too),
  an If choosing a Gather or a GatherND, a Scan gathering rows: every engine, runs past the proofs;
- a model file replaced, edited, cut or deleted after the session was built, then a rank-0 index fed at
  rank 1 (the custom-op engine lowers a copy then) and an IOBinding: onnxruntime's values.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

ENGINES = ["partitioned", "customop", "cpu"]


def _options(level: ort.GraphOptimizationLevel | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if level is not None:
        so.graph_optimization_level = level
    return so


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[str],
    inits: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def _outcome(session: Any, feeds: dict[str, Any]) -> object:
    try:
        return [np.asarray(o).tolist() for o in session.run(None, feeds)]
    except Exception:  # both libraries' classes: compared as a refusal
        return "refused"


def _follows(model: onnx.ModelProto, feeds: list[dict[str, Any]], engine: str, level: Any = None) -> None:
    data = model.SerializeToString()
    try:
        ref = ort.InferenceSession(data, _options(level), providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime refuses the model: so must dmlshim
        with pytest.raises(dmlshim.DmlShimError):
            dmlshim.InferenceSession(data, _options(level), engine=engine)
        return
    session = dmlshim.InferenceSession(data, _options(level), engine=engine)
    for i, f in enumerate(feeds):
        assert _outcome(session, f) == _outcome(ref, f), f"run {i}"


_A = np.arange(16, dtype=np.float32).reshape(4, 4)
_F4 = helper.make_tensor_value_info


def _scatter(op: str, index_shape: list[int], **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op, ["d", "i", "u"], ["y"], name="s", **attrs)
    inputs = [
        _F4("d", TensorProto.FLOAT, [4, 4]),
        _F4("i", TensorProto.INT64, index_shape),
        _F4("u", TensorProto.FLOAT, [4, 4]),
    ]
    return _model([node], inputs, ["y"])


_ALIASED: list[tuple[str, onnx.ModelProto, Callable[[], dict[str, np.ndarray]]]] = [
    ("scatternd", _scatter("ScatterND", [4, 1]), lambda: {"i": np.array([[3], [2], [1], [0]])}),
    (
        "scatterelements",
        _scatter("ScatterElements", [4, 4], axis=1),
        lambda: {"i": np.array([[3, 2, 1, 0]] * 4)},
    ),
    (
        "scatterelements_add",
        _scatter("ScatterElements", [4, 4], axis=1, reduction="add"),
        lambda: {"i": np.array([[3, 2, 1, 0]] * 4)},
    ),
]


@pytest.mark.parametrize(("label", "model", "indices"), _ALIASED, ids=[c[0] for c in _ALIASED])
@pytest.mark.parametrize("engine", ENGINES)
def test_data_and_updates_one_array(
    label: str, model: onnx.ModelProto, indices: Callable, engine: str
) -> None:
    ref = ort.InferenceSession(model.SerializeToString(), _options())
    session = dmlshim.InferenceSession(model.SerializeToString(), _options(), engine=engine)
    for _ in range(8):
        ours, theirs = _A.copy(), _A.copy()
        got = session.run(None, {"d": ours, "u": ours, **indices()})[0]
        want = ref.run(None, {"d": theirs, "u": theirs, **indices()})[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ours, _A)  # the caller's array is never written


@pytest.mark.parametrize("engine", ENGINES)
def test_strided_and_read_only_feeds(engine: str) -> None:
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="s")
    inputs = [
        _F4("d", TensorProto.FLOAT, [4, 4]),
        _F4("i", TensorProto.INT64, [2, 1]),
        _F4("u", TensorProto.FLOAT, [2, 4]),
    ]
    model = _model([node], inputs, ["y"])
    big = np.arange(64, dtype=np.float32).reshape(8, 8)
    read_only = _A.copy()
    read_only.flags.writeable = False
    feeds = [
        {"d": big[::2, ::2], "i": np.array([[3], [0]])[::-1], "u": big[:2, 1::2]},
        {"d": read_only, "i": np.array([[-1], [0]]), "u": np.ones((2, 4), np.float32)},
    ]
    _follows(model, feeds * 4, engine)
    np.testing.assert_array_equal(big, np.arange(64, dtype=np.float32).reshape(8, 8))


_CONSTANT_CASES = [
    ("Gather", [7], {}),
    ("Gather", [-5], {}),
    ("Gather", [-4, 3], {}),
    ("Gather", [[3]], {"axis": 1}),
    ("GatherElements", [[4, 0, 0]], {}),
    ("GatherElements", [[-5, 0, 0]], {}),
    ("GatherND", [[4, 0]], {}),
    ("GatherND", [[-1, -3]], {}),
    ("ScatterElements", [[4, 0, 0]], {}),
    ("ScatterElements", [[-1, 0, 1]], {}),
    ("ScatterND", [[-4]], {}),
    ("ScatterND", [[1, 3]], {}),
    ("ScatterND", [[0], [0]], {"reduction": "add"}),
]


@pytest.mark.parametrize(("op", "idx", "attrs"), _CONSTANT_CASES)
@pytest.mark.parametrize(
    "level",
    [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL],
    ids=["disabled", "all"],
)
def test_constant_indices_at_each_level(op: str, idx: list, attrs: dict, level: Any) -> None:
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    indices = np.array(idx, np.int64)
    names = ["W", "I"]
    inits = [table, numpy_helper.from_array(indices, "I")]
    if op.startswith("Scatter"):
        shape = (
            list(indices.shape)
            if op == "ScatterElements"
            else [*indices.shape[:-1], *[3] * (2 - indices.shape[-1])]
        )
        inits.append(numpy_helper.from_array(np.ones(shape, np.float32), "U"))
        names.append("U")
    nodes = [
        helper.make_node(op, names, ["y"], name="n", **attrs),
        helper.make_node("Add", ["y", "x"], ["out"]),
    ]
    model = _model(nodes, [_F4("x", TensorProto.FLOAT, None)], ["out"], inits)
    for engine in ENGINES:
        _follows(model, [{"x": np.array(1.0, np.float32)}] * 5, engine, level)


def _loop_model() -> onnx.ModelProto:
    consts = [
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
    ]
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["i", "step"], ["is"]),
            helper.make_node("Sub", ["is", "two"], ["k"]),
            helper.make_node("Unsqueeze", ["k", "ax0"], ["k1"]),
            helper.make_node("Gather", ["W", "k1"], ["row"], axis=0),
            helper.make_node("Unsqueeze", ["k1", "ax1"], ["k2"]),
            helper.make_node("ScatterND", ["acc", "k2", "row"], ["acc2"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("GatherElements", ["acc2", "ge_idx"], ["ge"], axis=1),
        ],
        "body",
        [
            _F4("i", TensorProto.INT64, []),
            _F4("cond_in", TensorProto.BOOL, []),
            _F4("acc", TensorProto.FLOAT, [5, 4]),
        ],
        [
            _F4("cond_out", TensorProto.BOOL, []),
            _F4("acc2", TensorProto.FLOAT, [5, 4]),
            _F4("ge", TensorProto.FLOAT, None),
        ],
        consts,
    )
    table = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(5, 4), "W")
    inputs = [
        _F4("n", TensorProto.INT64, []),
        _F4("c", TensorProto.BOOL, []),
        _F4("acc0", TensorProto.FLOAT, [5, 4]),
        _F4("step", TensorProto.INT64, []),
        _F4("ge_idx", TensorProto.INT64, [5, 2]),
    ]
    loop = helper.make_node("Loop", ["n", "c", "acc0"], ["accN", "ges"], body=body)
    return _model([loop], inputs, ["accN", "ges"], [table])


@pytest.mark.parametrize("engine", ENGINES)
def test_loop_body_gathers_and_scatters_by_iteration(engine: str) -> None:
    def feeds(n: int, step: int, ge: list) -> dict[str, np.ndarray]:
        return {
            "n": np.array(n, np.int64),
            "c": np.array(True),
            "acc0": np.zeros((5, 4), np.float32),
            "step": np.array(step, np.int64),
            "ge_idx": np.array(ge, np.int64),
        }

    ge = [[0, -1], [3, -4], [1, 1], [2, 0], [-2, 3]]
    runs = [feeds(3, 1, ge), feeds(4, 2, ge), feeds(0, 1, ge), feeds(5, 1, ge), feeds(2, -1, ge)]
    runs += [feeds(3, 1, [[0, 4]] * 5), feeds(1, 7, ge)]
    _follows(_loop_model(), runs * 2, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_if_and_scan_bodies_with_gathers(engine: str) -> None:
    table = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(5, 4), "W")
    then = helper.make_graph(
        [helper.make_node("Gather", ["W", "idx"], ["o"], axis=1)],
        "then",
        [],
        [_F4("o", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("GatherND", ["W", "idx2"], ["o2"])],
        "else",
        [],
        [_F4("o2", TensorProto.FLOAT, None)],
    )
    inputs = [
        _F4("c", TensorProto.BOOL, []),
        _F4("idx", TensorProto.INT64, ["a"]),
        _F4("idx2", TensorProto.INT64, ["b", 2]),
    ]
    branch = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], inputs, ["y"], [table]
    )

    def choose(c: bool, i: list, i2: list) -> dict[str, np.ndarray]:
        return {"c": np.array(c), "idx": np.array(i, np.int64), "idx2": np.array(i2, np.int64).reshape(-1, 2)}

    runs = [
        choose(True, [0, -1], [[0, 0]]),
        choose(False, [0], [[-1, -4], [4, 3]]),
        choose(True, [-4, 3, 2], []),
    ]
    runs += [choose(False, [1], [[5, 0]]), choose(True, [4], [[0, 0]]), choose(False, [0], [])]
    _follows(branch, runs * 2, engine)
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["W", "x"], ["r"], axis=0),
            helper.make_node("Add", ["s", "r"], ["s2"]),
            helper.make_node("Identity", ["r"], ["ro"]),
        ],
        "sb",
        [_F4("s", TensorProto.FLOAT, [4]), _F4("x", TensorProto.INT64, [])],
        [_F4("s2", TensorProto.FLOAT, [4]), _F4("ro", TensorProto.FLOAT, [4])],
    )
    scan = _model(
        [helper.make_node("Scan", ["s0", "xs"], ["sN", "rs"], body=body, num_scan_inputs=1)],
        [_F4("s0", TensorProto.FLOAT, [4]), _F4("xs", TensorProto.INT64, ["T"])],
        ["sN", "rs"],
        [table],
    )
    rows = [[0, -1, 3], [], [4, -5], [-5], [5], [2] * 7]
    _follows(scan, [{"s0": np.zeros(4, np.float32), "xs": np.array(r, np.int64)} for r in rows] * 2, engine)


def _rank0_model(scale: float) -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(4 * 1024 * 256, dtype=np.float32).reshape(-1, 4) * scale, "W")
    nodes = [
        helper.make_node("Gather", ["W", "k"], ["y"], axis=0),
        helper.make_node("Relu", ["y"], ["z"]),
        helper.make_node("Gather", ["z", "j"], ["out"], axis=-1),
    ]
    inputs = [_F4("k", TensorProto.INT64, []), _F4("j", TensorProto.INT64, ["J"])]
    return _model(nodes, inputs, ["out"], [table])


@pytest.mark.parametrize("change", ["replace", "edit", "truncate", "delete"])
@pytest.mark.parametrize("engine", ENGINES)
def test_model_file_changed_then_new_ranks_and_bindings(change: str, engine: str, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_rank0_model(1.0), path)
    ref = ort.InferenceSession(str(path), _options())
    session = dmlshim.InferenceSession(str(path), _options(), engine=engine)
    session.run(None, {"k": np.array(5, np.int64), "j": np.array([1, 2])})
    if change == "replace":
        onnx.save(_rank0_model(-3.0), tmp_path / "m2.onnx")
        os.replace(tmp_path / "m2.onnx", path)
    elif change == "edit":
        with open(path, "r+b") as f:
            f.seek(4096)
            f.write(b"\x11" * 65536)
    elif change == "truncate":
        with open(path, "r+b") as f:
            f.truncate(100)
    else:
        path.unlink()
    runs = [
        {"k": np.array(5, np.int64), "j": np.array([1, 2])},
        {"k": np.array([5, 262143], np.int64), "j": np.array([0])},
        {"k": np.array([[7]], np.int64), "j": np.array([3, 3])},
    ]
    for feeds in runs * 3:
        assert _outcome(session, feeds) == _outcome(ref, feeds)
    binding = session.io_binding()
    binding.bind_cpu_input("k", np.array([1, 2, 3]))
    binding.bind_cpu_input("j", np.array([0]))
    binding.bind_output("out")
    session.run_with_iobinding(binding)
    want = ref.run(None, {"k": np.array([1, 2, 3]), "j": np.array([0])})[0]
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], want)
