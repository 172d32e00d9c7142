"""Parity gaps in values, feeds and outputs a new user binding dmlshim under programs and libraries found
(helper parity55). Every expectation is what the installed onnxruntime does with the same call, computed in
the test (1.32 and 1.24.4 alike):

4. a list fed to a string input: each element as str() writes it (b"ab" is "b'ab'"; dmlshim decoded bytes),
   and a string with a lone surrogate is onnxruntime's UnicodeEncodeError (dmlshim: InvalidArgument);
5. an array taken from an IOBinding output (get_outputs()[0].numpy()) outlives the binding and the session,
   as onnxruntime's does (dmlshim's read freed memory: garbage or a crash);
7. an input of an optional type may be left out of the feed (dmlshim called it missing);
9. output_names: a bytearray name is read as bytes, a generator yielding nothing is onnxruntime's
   InvalidArgument "At least one output should be requested." (dmlshim: TypeError, and [] returned);
11. a 0-d value fed beside a bfloat16 OrtValue, and a 0-d output of run_with_ortvaluevector, stay 0-d
   (numpy's ascontiguousarray made them 1-d); the custom-op engine reads a 0-d bfloat16 feed's rank;
12. a float8e4m3fn value beside an emulated node comes out of run_with_ort_values as float8e4m3fn (the
   whole-model check read it through onnxruntime's run, as uint8);
13. a model onnxruntime loads only once its optimizations remove a node no kernel runs (an int4 Identity)
   is accepted at those levels (the acceptance session, optimizations off, refused it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from tests.oracle import IR_VERSION
from tests.parity55_cases import (
    CPU,
    DATA,
    ENGINES,
    IDX,
    as_ortvalue,
    engine_kwargs,
    outcome,
    same_error,
    two_input_model,
)

# --- 4. string feeds given as lists, and strings UTF-8 cannot hold ---------------------------------------


def _string_model() -> onnx.ModelProto:
    """``y = Gather(s, i)`` and ``z = Identity(s)`` over a string input of any length."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["s", "i"], ["y"], name="g"), helper.make_node("Identity", ["s"], ["z"])],
        "strings",
        [
            helper.make_tensor_value_info("s", TensorProto.STRING, [None]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [None]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.STRING, None),
            helper.make_tensor_value_info("z", TensorProto.STRING, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


STRING_FEEDS: dict[str, Any] = {
    "a list of bytes": [b"ab", b"c"],  # onnxruntime: "b'ab'", as str() writes them
    "a list of mixed values": ["a", b"b", 1, None, 2.5],
    "a list of numpy bytes": [np.bytes_(b"q"), "r"],
    "a list of floats": [np.float32(0.1), 1e20, 0.5],
    "a ragged list": [["a"], ["b", "c"]],
    "a list with a lone surrogate": ["\ud800", "c"],
    "an object array with a lone surrogate": np.array(["\ud800", "c"], dtype=object),
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("feed", list(STRING_FEEDS))
def test_string_feeds_read_as_onnxruntime(feed: str, engine: str) -> None:
    model = _string_model().SerializeToString()
    feeds = {"s": STRING_FEEDS[feed], "i": np.array([1, 0], dtype=np.int64)}
    theirs = outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(None, feeds))
    ours = outcome(lambda: dmlshim.InferenceSession(model, **engine_kwargs(engine)).run(None, feeds))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
        return
    for mine, want in zip(ours[1], theirs[1], strict=True):
        assert mine.dtype == want.dtype and mine.tolist() == want.tolist()


# --- 5. an IOBinding's outputs outlive the binding and the session -----------------------------------------


@pytest.mark.parametrize("engine", list(ENGINES))
def test_iobinding_output_arrays_outlive_the_binding(engine: str) -> None:
    """An array taken with ``get_outputs()[0].numpy()`` keeps the memory onnxruntime's binding allocated
    alive (its base holds the OrtValue): it reads the run's values after the binding and the session are
    gone. dmlshim's binding handed out an OrtValue borrowing its own array, so such an array read freed
    memory (garbage, or a crash)."""
    import gc

    model = two_input_model().SerializeToString()

    def outputs(make: Any) -> list[np.ndarray]:
        session = make()
        binding = session.io_binding()
        binding.bind_cpu_input("d", DATA)
        binding.bind_cpu_input("i", IDX)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
        return [value.numpy() for value in binding.get_outputs()]

    want = outputs(lambda: ort.InferenceSession(model, providers=[CPU]))
    kept = [outputs(lambda: dmlshim.InferenceSession(model, **engine_kwargs(engine))) for _ in range(3)]
    gc.collect()
    for _ in range(3):  # memory freed by then is handed out again
        np.zeros((64, 64), dtype=np.float32).fill(-7.0)
    for got in kept:
        assert [a.tolist() for a in got] == [a.tolist() for a in want] == [[[4.0, 5.0], [4.0, 5.0]]]


@pytest.mark.parametrize("engine", list(ENGINES))
def test_iobinding_output_shows_the_next_run_after_the_fix(engine: str) -> None:
    """Still as onnxruntime: an output bound by name keeps the memory its first run allocated, so an
    OrtValue (and an array viewing it) taken after one run shows the next run's values."""
    model = two_input_model().SerializeToString()

    def two_runs(session: Any) -> tuple[list[Any], list[Any]]:
        binding = session.io_binding()
        binding.bind_cpu_input("d", DATA)
        binding.bind_cpu_input("i", IDX)
        binding.bind_output("y")
        session.run_with_iobinding(binding)
        first = binding.get_outputs()[0]
        view = first.numpy()
        binding.bind_cpu_input("i", np.array([0, 1], dtype=np.int64))
        session.run_with_iobinding(binding)
        return first.numpy().tolist(), view.tolist()

    want = two_runs(ort.InferenceSession(model, providers=[CPU]))
    assert two_runs(dmlshim.InferenceSession(model, **engine_kwargs(engine))) == want


# --- 7. an input of an optional type may be left out of the feed -----------------------------------------


def _optional_input_model() -> onnx.ModelProto:
    """``y`` gathers ``d`` at the optional input's indices when it holds a value (``d`` itself when not),
    ``z = Gather(d, i)``, and the optional input is also an output."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, [2]))
    fed = helper.make_graph(
        [
            helper.make_node("OptionalGetElement", ["o"], ["oi"]),
            helper.make_node("Gather", ["d", "oi"], ["r"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
    )
    empty = helper.make_graph(
        [helper.make_node("Identity", ["d"], ["r"])],
        "else",
        [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("OptionalHasElement", ["o"], ["h"]),
            helper.make_node("If", ["h"], ["y"], then_branch=fed, else_branch=empty),
            helper.make_node("Gather", ["d", "i"], ["z"], name="g"),
        ],
        "optional_input",
        [
            helper.make_value_info("o", optional),
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
            helper.make_value_info("o", optional),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=IR_VERSION)


OPTIONAL_FEEDS: dict[str, dict[str, Any]] = {
    "left out": {},
    "None": {"o": None},
    "given": {"o": np.array([1, 1], dtype=np.int64)},
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("given", list(OPTIONAL_FEEDS))
def test_optional_input_may_be_left_out(given: str, engine: str) -> None:
    model = _optional_input_model().SerializeToString()
    feeds = {
        "d": np.arange(3, dtype=np.float32),
        "i": np.array([2, 0], dtype=np.int64),
        **OPTIONAL_FEEDS[given],
    }
    theirs = outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(None, feeds))
    ours = outcome(lambda: dmlshim.InferenceSession(model, **engine_kwargs(engine)).run(None, feeds))
    assert theirs[0] == ours[0] == "ok", (theirs, ours)
    assert [None if v is None else v.tolist() for v in ours[1]] == [
        None if v is None else v.tolist() for v in theirs[1]
    ]


def test_a_required_input_left_out_still_names_every_input() -> None:
    model = _optional_input_model().SerializeToString()
    theirs = outcome(
        lambda: ort.InferenceSession(model, providers=[CPU]).run(None, {"d": np.ones(3, np.float32)})
    )
    ours = outcome(lambda: dmlshim.InferenceSession(model).run(None, {"d": np.ones(3, np.float32)}))
    assert theirs[0] == ours[0] == "error"
    same_error(theirs[1], ours[1])
    assert "model inputs: o, d, i" in str(ours[1])


# --- 9. output_names that onnxruntime's binding reads: a bytearray name, a generator yielding nothing ------

OUTPUT_NAMES: dict[str, Any] = {
    "a bytearray name": lambda: [bytearray(b"y")],
    "an empty generator": lambda: (n for n in ()),
    "a generator": lambda: (n for n in ["y"]),
}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("names", list(OUTPUT_NAMES))
def test_output_names_read_as_onnxruntime_binding(names: str, engine: str) -> None:
    model = two_input_model().SerializeToString()
    feeds = {"d": DATA, "i": IDX}
    theirs = outcome(lambda: ort.InferenceSession(model, providers=[CPU]).run(OUTPUT_NAMES[names](), feeds))
    ours = outcome(
        lambda: dmlshim.InferenceSession(model, **engine_kwargs(engine)).run(OUTPUT_NAMES[names](), feeds)
    )
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
    else:
        assert [a.tolist() for a in ours[1]] == [a.tolist() for a in theirs[1]]


# --- 11. a 0-d value stays 0-d beside an OrtValue numpy cannot hold, and through run_with_ortvaluevector --


def _bfloat16_scalar_model() -> onnx.ModelProto:
    """``y = Gather(d, i)`` of a bfloat16 vector at a scalar index (a 0-d output), ``t = Identity(s)`` of a
    0-d bfloat16 input."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], name="g"), helper.make_node("Identity", ["s"], ["t"])],
        "bf16",
        [
            helper.make_tensor_value_info("d", TensorProto.BFLOAT16, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("s", TensorProto.BFLOAT16, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None),
            helper.make_tensor_value_info("t", TensorProto.BFLOAT16, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_scalar_beside_bfloat16_keeps_its_rank(engine: str) -> None:
    """A 0-d index fed beside a bfloat16 OrtValue went to onnxruntime as a 1-element vector (the output was
    ``[1]``, onnxruntime's ``[]``), and the custom-op engine could not read a 0-d bfloat16 feed's rank."""
    model = _bfloat16_scalar_model().SerializeToString()

    def shapes(session: Any) -> list[Any]:
        bits = ort.OrtValue.ortvalue_from_numpy_with_onnx_type
        feeds = {
            "d": bits(np.array([16256, 16384, 16448], dtype=np.uint16), TensorProto.BFLOAT16),
            "i": as_ortvalue(np.array(1, dtype=np.int64)),
            "s": bits(np.array(16256, dtype=np.uint16), TensorProto.BFLOAT16),
        }
        outs = session.run_with_ort_values(None, feeds)
        return [(o.shape(), o.data_type()) for o in outs]

    want = shapes(ort.InferenceSession(model, providers=[CPU]))
    assert want[0][0] == []
    assert shapes(dmlshim.InferenceSession(model, **engine_kwargs(engine))) == want


@pytest.mark.parametrize("engine", list(ENGINES))
def test_run_with_ortvaluevector_keeps_a_scalar_output(engine: str) -> None:
    model = two_input_model()
    del model.graph.input[0].type.tensor_type.shape.dim[1:]  # d: a vector of 3
    model.graph.input[1].type.tensor_type.shape.ClearField("dim")  # i: a scalar, so y is 0-d
    model.graph.output[0].type.tensor_type.ClearField("shape")
    source = model.SerializeToString()
    c = ort.capi._pybind_state

    def fetched(session: Any) -> list[Any]:
        feeds = c.OrtValueVector()
        feeds.push_back(as_ortvalue(np.array([1.0, 2.0, 3.0], dtype=np.float32))._get_c_value())
        feeds.push_back(as_ortvalue(np.array(2, dtype=np.int64))._get_c_value())
        fetches = c.OrtValueVector()
        device = c.OrtDevice(c.OrtDevice.cpu(), c.OrtDevice.default_memory(), 0)
        session.run_with_ortvaluevector(ort.RunOptions(), ["d", "i"], feeds, ["y"], fetches, [device])
        value = ort.OrtValue(fetches[0])
        return [value.shape(), value.numpy().tolist()]

    want = fetched(ort.InferenceSession(source, providers=[CPU]))
    assert want == [[], 3.0]
    assert fetched(dmlshim.InferenceSession(source, **engine_kwargs(engine))) == want


# --- 12. a float8e4m3fn value beside an emulated node keeps its type in run_with_ort_values -----------------


@pytest.mark.parametrize("engine", list(ENGINES))
def test_float8e4m3fn_output_keeps_its_type(engine: str) -> None:
    """The whole-model check ran onnxruntime's ``run``, which gives a float8e4m3fn value as its bytes: the
    output of ``run_with_ort_values`` came back a uint8 OrtValue (onnxruntime: float8e4m3fn). ``run``
    still gives the bytes, as onnxruntime's."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["d"], ["y"]), helper.make_node("Gather", ["f", "i"], ["z"], name="g")],
        "f8",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT8E4M3FN, [3]),
            helper.make_tensor_value_info("f", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)
    source = model.SerializeToString()

    def answers(session: Any) -> list[Any]:
        feeds = {
            "d": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.array([56, 60, 64], dtype=np.uint8), TensorProto.FLOAT8E4M3FN
            ),
            "f": as_ortvalue(np.arange(3, dtype=np.float32)),
            "i": as_ortvalue(np.array(2, dtype=np.int64)),
        }
        runs = []
        for _ in range(3):  # the check answers from the second run on
            values = session.run_with_ort_values(None, feeds)
            arrays = session.run(None, feeds)
            runs.append(
                [(v.data_type(), v.shape()) for v in values] + [(a.dtype.name, a.tolist()) for a in arrays]
            )
        return runs

    want = answers(ort.InferenceSession(source, providers=[CPU]))
    assert want[0][0] == ("tensor(float8e4m3fn)", [3]) and want[0][2] == ("uint8", [56, 60, 64])
    assert answers(dmlshim.InferenceSession(source, **engine_kwargs(engine))) == want


# --- 13. a model onnxruntime loads only once it optimizes a node away is accepted at those levels ----------


def _int4_identity_model() -> onnx.ModelProto:
    """``Identity`` of an int4 value (no CPU kernel at opset 21: onnxruntime loads the model only once its
    optimizations remove the node), and a Gather of the float input."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["c"], to=TensorProto.INT4),
            helper.make_node("Identity", ["c"], ["y"]),
            helper.make_node("Gather", ["x", "i"], ["z"], name="g"),
        ],
        "int4",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.INT4, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=IR_VERSION)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("level", [None, 0, 1, 99], ids=["default", "disable all", "basic", "all"])
def test_model_loading_only_once_optimized_as_onnxruntime(level: Any, engine: str) -> None:
    """dmlshim's acceptance session ran with optimizations off, so it refused a model onnxruntime loads at
    the caller's level (``NotImplemented``: no kernel for the node its optimizations remove)."""
    model = _int4_identity_model().SerializeToString()

    def options() -> ort.SessionOptions | None:
        if level is None:
            return None
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel(level)
        return so

    def answer(session: Any) -> list[Any]:
        feeds = {
            "x": as_ortvalue(np.array([0.5, 1.0, -2.0, 7.0], np.float32)),
            "i": as_ortvalue(np.array([3, 0])),
        }
        values = session.run_with_ort_values(None, feeds)
        return [(v.data_type(), v.shape()) for v in values] + [values[1].numpy().tolist()]

    theirs = outcome(lambda: answer(ort.InferenceSession(model, options(), providers=[CPU])))
    ours = outcome(lambda: answer(dmlshim.InferenceSession(model, options(), **engine_kwargs(engine))))
    assert theirs[0] == ours[0], (theirs, ours)
    if theirs[0] == "error":
        same_error(theirs[1], ours[1])
    else:
        assert ours[1] == theirs[1]
