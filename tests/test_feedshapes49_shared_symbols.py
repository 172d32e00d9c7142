"""Round 49 (feedshapes49): a symbol two graph inputs declare, fed with disagreeing sizes.

onnxruntime does not hold feeds to one size for a symbol several inputs declare (``z: ['N']`` fed 5 and
``x: ['N', 4]`` fed 100 rows run). :class:`dmlshim.execute.proofs.gather_given.FeedShapes` took a value's
shape from the first input declaring each of its symbols, so a QDQ gather's data (``x``'s rows) was sized
from ``z``'s: its indices' range proof read a dimension the value does not have (here a needless refusal
to prove, handing the run to the full check; a larger wrong size would prove out-of-range indices in
range, kept from a wrong answer only by onnxruntime's own kernel refusing them). Now the size is taken
from the feeds only where every declaring feed agrees, else from onnx's inference at the run's shapes.

Every case is compared with onnxruntime CPU (one thread) in every engine: same values, and an
out-of-range index raises where onnxruntime (unoptimized, as ONNX requires) raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
import dmlshim.execute.proofs.gather_given as gather_given
from dmlshim.fileio.files import write_npz

from .test_hostile11_cli import _cli

F = TensorProto.FLOAT
I64 = TensorProto.INT64
U8 = TensorProto.UINT8
vi = helper.make_tensor_value_info
ENGINES = ("partitioned", "customop", "cpu")
RNG = np.random.default_rng(4949)
# (size fed to z, rows of x): agreeing runs first (the lean check takes over), then disagreeing ones
SIZES = [(100, 100)] * 6 + [(100, 5)] * 3 + [(5, 100)] * 3 + [(100, 5), (100, 100), (5, 100)]


def _opset(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[Any]
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "fs49", inputs, [vi("y", F, None), vi("zo", F, None)], inits)
    return helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)])


def _ort(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimize: bool = True
) -> list[Any] | Exception:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    if not optimize:
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        return session.run(None, feeds)  # type: ignore[no-any-return]
    except Exception as exc:  # onnxruntime's refusal is the expected answer
        return exc


def _qdq_gather(op: str, indices: Any, z_first: bool) -> onnx.ModelProto:
    """x -> Q -> DQ -> gather(constant indices, axis 0) -> Q -> DQ, beside z (N declared by both)."""
    inits = [
        helper.make_tensor("s", F, [], [0.01]),
        helper.make_tensor("zp", U8, [], [0]),
        helper.make_tensor("ix", I64, np.shape(indices), np.asarray(indices).ravel().tolist()),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"]),
        helper.make_node(op, ["dq", "ix"], ["g"], **({} if op == "GatherND" else {"axis": 0})),
        helper.make_node("QuantizeLinear", ["g", "s", "zp"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "zp"], ["y"]),
        helper.make_node("Identity", ["z"], ["zo"]),
    ]
    inputs = [vi("z", F, ["N"]), vi("x", F, ["N", 4])]
    return _opset(nodes, inputs if z_first else inputs[::-1], inits)


def _scatter(op: str) -> onnx.ModelProto:
    """Relu(x) scattered into by fed indices, then Relu again (two onnxruntime segments)."""
    shape = ["K", 4] if op == "ScatterElements" else ["K", 1]
    nodes = [
        helper.make_node("Relu", ["x"], ["d"]),
        helper.make_node(op, ["d", "i", "u"], ["s"], **({"axis": 0} if op == "ScatterElements" else {})),
        helper.make_node("Relu", ["s"], ["y"]),
        helper.make_node("Identity", ["z"], ["zo"]),
    ]
    inputs = [vi("z", F, ["N"]), vi("x", F, ["N", 4]), vi("i", I64, shape), vi("u", F, ["K", 4])]
    return _opset(nodes, inputs, [])


def _topk_gather() -> onnx.ModelProto:
    """Gather of Relu(x) rows by TopK's indices of w (non-negative by construction), z declaring N."""
    nodes = [
        helper.make_node("Relu", ["x"], ["d"]),
        helper.make_node("TopK", ["w", "k"], ["tv", "ti"], axis=0),
        helper.make_node("Gather", ["d", "ti"], ["g"], axis=0),
        helper.make_node("Relu", ["g"], ["y"]),
        helper.make_node("Identity", ["z"], ["zo"]),
    ]
    inputs = [vi("z", F, ["N"]), vi("x", F, ["N", 4]), vi("w", F, ["M"])]
    return _opset(nodes, inputs, [helper.make_tensor("k", I64, [1], [3])])


def _compare(model: onnx.ModelProto, runs: list[dict[str, np.ndarray]]) -> Iterator[str]:
    """Each engine's answer to each run against onnxruntime's: the divergences, described."""
    for engine in ENGINES:
        session = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
        for k, feeds in enumerate(runs):
            expected, strict = _ort(model, feeds), _ort(model, feeds, optimize=False)
            try:
                got: list[Any] | Exception = session.run(None, feeds)
            except Exception as exc:
                got = exc
            if isinstance(strict, Exception) or isinstance(expected, Exception):
                if not isinstance(got, Exception):
                    yield f"{engine} run {k}: onnxruntime refuses ({strict or expected}), dmlshim answered"
                continue
            if isinstance(got, Exception):
                yield f"{engine} run {k}: dmlshim refused: {got}"
            elif not all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True)):
                yield f"{engine} run {k}: values differ"


def _qdq_runs() -> list[dict[str, np.ndarray]]:
    return [
        {"z": RNG.random(n, dtype=np.float32), "x": RNG.random((rows, 4), dtype=np.float32)}
        for n, rows in SIZES
    ]


QDQ_CASES = {
    "gather_1d": ("Gather", [7]),
    "gather_scalar": ("Gather", 7),
    "gather_two": ("Gather", [1, 7]),
    "gather_elements": ("GatherElements", [[7, 0, 1, 2]]),
    "gather_nd": ("GatherND", [[7]]),
}


@pytest.mark.parametrize("z_first", [True, False])
@pytest.mark.parametrize("case", sorted(QDQ_CASES))
def test_qdq_gather_sized_from_its_own_feed(
    case: str, z_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    op, indices = QDQ_CASES[case]
    model = _qdq_gather(op, indices, z_first)
    runs = _qdq_runs()
    resolved: list[tuple[tuple[int, ...] | None, tuple[int, ...]]] = []
    original = gather_given.FeedShapes.resolve

    def spy(self: Any, name: str, values: Any) -> tuple[int, ...] | None:
        shape = original(self, name, values)
        if name == "dq" and "x" in values:
            resolved.append((shape, values["x"].shape))  # dq has x's shape, whatever z's
        return shape

    monkeypatch.setattr(gather_given.FeedShapes, "resolve", spy)
    assert list(_compare(model, runs)) == []
    assert resolved, "the lean check never sized the gather's data from the feeds"
    assert [r for r in resolved if r[0] not in (None, r[1])] == []


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_data_tied_by_a_shared_symbol(op: str) -> None:
    model = _scatter(op)
    runs = []
    for (n, rows), idx in zip(SIZES, [[0, 3, 9]] * 6 + [[0, 3, 4], [0, 7, 4], [1, 50, 2]] * 3, strict=True):
        indices = np.asarray(idx, np.int64)
        runs.append(
            {
                "z": RNG.random(n, dtype=np.float32),
                "x": RNG.random((rows, 4), dtype=np.float32),
                "i": np.repeat(indices[:, None], 4, 1) if op == "ScatterElements" else indices[:, None],
                "u": RNG.random((len(idx), 4), dtype=np.float32),
            }
        )
    assert list(_compare(model, runs)) == []


def test_topk_gather_data_tied_by_a_shared_symbol() -> None:
    runs = [
        {
            "z": RNG.random(n, dtype=np.float32),
            "x": RNG.random((rows, 4), dtype=np.float32),
            "w": RNG.random(rows if k % 2 else 5, dtype=np.float32),  # TopK rows may pass x's
        }
        for k, (n, rows) in enumerate(SIZES)
    ]
    assert list(_compare(_topk_gather(), runs)) == []


@pytest.mark.parametrize("command", ["run", "validate"])
def test_cli_on_disagreeing_feeds(tmp_path: Path, command: str) -> None:
    model = _qdq_gather("Gather", [1, 7], z_first=True)
    onnx.save(model, tmp_path / "m.onnx")
    for name, rows, fails in (("ok", 100, False), ("oob", 5, True)):
        feeds = {"z": RNG.random(100, dtype=np.float32), "x": RNG.random((rows, 4), dtype=np.float32)}
        assert isinstance(_ort(model, feeds, optimize=False), Exception) == fails
        write_npz(tmp_path / f"{name}.npz", feeds)
        args = [command, "-q", "m.onnx", "--inputs", f"{name}.npz"]
        done = _cli([*args, "-o", f"{name}_out.npz"] if command == "run" else args, tmp_path)
        assert (done.returncode != 0) == fails, done.stderr
        if command == "run" and not fails:
            expected = _ort(model, feeds)
            assert not isinstance(expected, Exception)
            with np.load(tmp_path / f"{name}_out.npz") as out:
                np.testing.assert_array_equal(out["y"], expected[0])


def test_initializer_input_declaring_the_symbol(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gather's data comes from ``w``, an initializer listed as a graph input (``['N', 4]``, 5 rows by
    default), while ``x`` (declared first, ``['N', 4]``) is fed 100 rows: ``w``'s rows size the data."""
    model = _qdq_gather("Gather", [3], z_first=False)
    graph = model.graph
    graph.node[0].input[0] = "w"
    graph.node.append(helper.make_node("Identity", ["x"], ["xo"]))
    graph.output.append(vi("xo", F, None))
    graph.input.append(vi("w", F, ["N", 4]))
    graph.initializer.append(helper.make_tensor("w", F, [5, 4], RNG.random(20, dtype=np.float32).tolist()))
    resolved: list[tuple[tuple[int, ...] | None, tuple[int, ...]]] = []
    original = gather_given.FeedShapes.resolve

    def spy(self: Any, name: str, values: Any) -> tuple[int, ...] | None:
        shape = original(self, name, values)
        if name == "dq":
            resolved.append((shape, (5, 4) if "w" not in values else tuple(np.shape(values["w"]))))
        return shape

    monkeypatch.setattr(gather_given.FeedShapes, "resolve", spy)
    runs = [
        {"z": RNG.random(5, dtype=np.float32), "x": RNG.random((rows, 4), dtype=np.float32)}
        for rows in [5] * 6 + [100] * 4
    ]
    runs += [dict(runs[-1], w=RNG.random((9, 4), dtype=np.float32)) for _ in range(3)]
    assert list(_compare(model, runs)) == []
    assert resolved, "the lean check never sized the gather's data from the feeds"
    assert [r for r in resolved if r[0] not in (None, r[1])] == []
