"""Hostile round 49c: the memory limit's feed-sized gathers (``execute/plan/fed_sizes.py``).

A model onnxruntime runs within the limit must not be refused, and a gather whose output passes it must
be. Each case's output is the largest tensor of the run; the limit is set to its exact size (the run must
give onnxruntime's values) and one byte below (refused, naming node, op and output), in every engine.
Two false refusals found here: a shape the model declares for an intermediate (``value_info``), which
onnxruntime does not hold the run to, and a symbol two inputs declare while the feeds disagree on it
(onnxruntime does not hold them to one size either).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import TooLargeError

F = TensorProto.FLOAT
I64 = TensorProto.INT64
vi = helper.make_tensor_value_info
ENGINES = ("partitioned", "customop", "cpu")
RNG = np.random.default_rng(49)
TABLE = helper.make_tensor("t", F, [1000, 64], RNG.random(64000, dtype=np.float32))
START = helper.make_tensor("st", I64, [1], [0])
END = helper.make_tensor("en", I64, [1], [10])


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    inits: list[onnx.TensorProto] | None = None,
    value_info: list[onnx.ValueInfoProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", inputs, [vi("y", F, None)], inits or [], value_info=value_info or []
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _theirs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _gather(axis: int, indices: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=axis)
    model = _model([node], [vi("d", F, [3, "n"]), vi("i", indices, ["m"])])
    i = RNG.integers(-500, 500, 20000).astype(np.int64 if indices == I64 else np.int32)
    return model, {"d": RNG.random((3, 500), dtype=np.float32), "i": i}


def _gather_nd(batch_dims: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    node = helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=batch_dims)
    if batch_dims:
        inputs = [vi("d", F, ["b", "n", 50]), vi("i", I64, ["b", "m", 1])]
        return _model([node], inputs), {
            "d": RNG.random((2, 20, 50), dtype=np.float32),
            "i": RNG.integers(-20, 20, (2, 300, 1)),
        }
    # the last index dimension is the data's rank: one element per index tuple, an output smaller than
    # the indices, so the data is the gathered table's rows
    inputs = [vi("d", F, ["n", 500]), vi("i", I64, ["m", 1])]
    return _model([node], inputs), {
        "d": RNG.random((4, 500), dtype=np.float32),
        "i": RNG.integers(-4, 4, (300, 1)),
    }


def _shared_symbol_initializer() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    nodes = [helper.make_node("Identity", ["i"], ["j"]), helper.make_node("Gather", ["t", "j"], ["y"])]
    model = _model(nodes, [vi("i", I64, ["m"])], [TABLE])
    return model, {"i": RNG.integers(-1000, 1000, 5000)}


CASES = {
    "gather, negative axis": _gather(-1, I64),
    "gather, int32 indices": _gather(1, TensorProto.INT32),
    "gathernd, batch_dims 1": _gather_nd(1),
    "gathernd, index tuples of the data's rank": _gather_nd(0),
    "gather of an initializer by an inferred shape": _shared_symbol_initializer(),
}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], engine: str) -> np.ndarray:
    return dmlshim.InferenceSession(model.SerializeToString(), engine=engine).run(None, feeds)[0]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_limit_at_the_output_size(case: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, feeds = CASES[case]
    expected = _theirs(model, feeds)
    assert expected.nbytes > max(v.nbytes for v in feeds.values())  # the output is the run's largest
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(expected.nbytes))
    np.testing.assert_array_equal(_run(model, feeds, engine), expected)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(expected.nbytes - 1))
    with pytest.raises(TooLargeError, match="output 'y'") as info:
        _run(model, feeds, engine)
    assert "op Gather" in str(info.value)


def _declared_intermediate() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model declares the Slice's output ['n'], the symbol of a 100,000-long input: 10 long in a run."""
    nodes = [
        helper.make_node("Slice", ["x", "st", "en"], ["i"]),
        helper.make_node("Gather", ["t", "i"], ["y"]),
    ]
    model = _model(nodes, [vi("x", I64, ["n"])], [TABLE, START, END], [vi("i", I64, ["n"])])
    return model, {"x": RNG.integers(0, 1000, 100_000)}


def _disagreeing_feeds() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Two inputs declare 'n'; the feeds give 100,000 and 10 (onnxruntime runs it)."""
    nodes = [
        helper.make_node("Identity", ["i"], ["j"]),
        helper.make_node("Gather", ["t", "j"], ["y"]),
        helper.make_node("ReduceSum", ["d"], ["s"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [vi("d", F, [1, "n"]), vi("i", I64, ["n"])], [vi("y", F, None), vi("s", F, None)], [TABLE]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"d": RNG.random((1, 100_000), dtype=np.float32), "i": RNG.integers(0, 1000, 10)}


FALSE_REFUSALS = {"declared intermediate": _declared_intermediate(), "feeds disagree": _disagreeing_feeds()}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(FALSE_REFUSALS))
def test_no_refusal_from_a_shape_the_run_does_not_have(
    case: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, feeds = FALSE_REFUSALS[case]
    expected = _theirs(model, feeds)
    assert expected.shape == (10, 64)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")  # above every tensor of the run, 25.6 MB predicted
    np.testing.assert_array_equal(_run(model, feeds, engine), expected)


@pytest.mark.parametrize("engine", ENGINES)
def test_no_build_refusal_from_a_contradicted_static_declaration(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build-time static check refused a gather sized by a value_info size inference contradicts."""
    nodes = [
        helper.make_node("Slice", ["x", "st", "en"], ["i"]),
        helper.make_node("Gather", ["t", "i"], ["y"]),
    ]
    model = _model(nodes, [vi("x", I64, [50])], [TABLE, START, END], [vi("i", I64, [100_000])])
    feeds = {"x": RNG.integers(0, 1000, 50)}
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    np.testing.assert_array_equal(_run(model, feeds, engine), _theirs(model, feeds))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_static_declaration_inference_confirms_still_refuses(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same model whose Slice does give 100,000 indices: its 25.6 MB gather is refused at build."""
    end = helper.make_tensor("en", I64, [1], [100_000])
    nodes = [
        helper.make_node("Slice", ["x", "st", "en"], ["i"]),
        helper.make_node("Gather", ["t", "i"], ["y"]),
    ]
    model = _model(nodes, [vi("x", I64, [100_000])], [TABLE, START, end], [vi("i", I64, [100_000])])
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    with pytest.raises(TooLargeError, match="output 'y'") as info:
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    assert "op Gather" in str(info.value)
