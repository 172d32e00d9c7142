"""Size limits: 32-bit DirectML element counts (translated without allocating), and work that would need
more memory than the machine has (refused before allocating, naming the tensor and the size)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dmlshim import BadInputError, BadModelError, InferenceSession, TooLargeError
from dmlshim.limits import (
    check_tensor,
    format_bytes,
    gather_scatter_output_shape,
    memory_limit,
    tensor_nbytes,
)
from dmlshim.translate import Status, TensorInfo, translate_node
from tests.fuzz_settings import assert_cli_error, opset_for, run_cli
from tests.oracle import IR_VERSION, ort_session

F, I64 = TensorProto.FLOAT, TensorProto.INT64
BIG = 70_000  # BIG * BIG = 4.9e9 > 2^32 - 1


@pytest.fixture
def traced() -> Iterator[None]:
    """Trace allocations (numpy's included) so a test can assert nothing big was allocated."""
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


# op -> (attrs, input infos) with a data tensor of BIG * BIG elements.
HUGE_NODES: dict[str, tuple[dict[str, object], list[TensorInfo]]] = {
    "Gather": ({"axis": 0}, [TensorInfo((BIG, BIG), F), TensorInfo((2,), I64)]),
    "GatherElements": ({"axis": 1}, [TensorInfo((BIG, BIG), F), TensorInfo((BIG, 2), I64)]),
    "GatherND": ({}, [TensorInfo((BIG, BIG), F), TensorInfo((2, 2), I64)]),
    "Scatter": ({"axis": 0}, [TensorInfo((BIG, BIG), F), TensorInfo((1, BIG), I64), TensorInfo((1, BIG), F)]),
    "ScatterElements": (
        {"axis": 0},
        [TensorInfo((BIG, BIG), F), TensorInfo((1, BIG), I64), TensorInfo((1, BIG), F)],
    ),
    "ScatterND": ({}, [TensorInfo((BIG, BIG), F), TensorInfo((2, 1), I64), TensorInfo((2, BIG), F)]),
}


@pytest.mark.parametrize("op", list(HUGE_NODES))
def test_more_than_uint32_elements_falls_back(op: str, traced: None) -> None:
    attrs, infos = HUGE_NODES[op]
    names = ["data", "indices", "updates"][: len(infos)]
    node = helper.make_node(op, names, ["y"], name="huge", **attrs)
    t = translate_node(node, opset_for(op), infos)
    assert t.status is Status.FALLBACK
    codes = {r.code for r in t.reasons}
    assert "TOO_MANY_ELEMENTS" in codes, t.reasons
    reason = next(r for r in t.reasons if r.code == "TOO_MANY_ELEMENTS")
    assert reason.value == BIG * BIG
    assert t.operator is None
    assert tracemalloc.get_traced_memory()[1] < 64 * 2**20


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str]
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "limits", inputs, [onnx.ValueInfoProto(name=o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


@pytest.fixture
def huge_input_model(tmp_path: Path) -> Path:
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [
            helper.make_tensor_value_info("x", F, [100000, 100000, 100]),
            helper.make_tensor_value_info("i", I64, [2]),
        ],
        ["y"],
    )
    path = tmp_path / "huge_input.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("command", ["validate", "run"])
def test_huge_graph_input_refused_by_cli(huge_input_model: Path, command: str, traced: None) -> None:
    r = run_cli(command, huge_input_model)
    need = 100000 * 100000 * 100 * 4
    assert_cli_error(r.code, r.err, str(huge_input_model), "'x'", "[100000, 100000, 100]", format_bytes(need))
    assert tracemalloc.get_traced_memory()[1] < 256 * 2**20


def _unfeedable_model(tmp_path: Path, dims: list[int]) -> Path:
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [helper.make_tensor_value_info("x", F, dims), helper.make_tensor_value_info("i", I64, [2])],
        ["y"],
    )
    path = tmp_path / "unfeedable.onnx"
    onnx.save(model, path)
    return path


# [2^40, 2^30] float: 4 ZiB, no machine's memory; [2^40, 2^40]: the output [2, 2^40] is 8 TiB too.
@pytest.mark.parametrize("dims", [[2**40, 2**30], [2**40, 2**40], [100000, 100000, 100]])
def test_unfeedable_graph_input_loads_and_refuses_smaller_feeds_as_onnxruntime(
    tmp_path: Path, dims: list[int], traced: None
) -> None:
    # onnxruntime loads the model, and refuses a feed whose shape is not the declared one (issue 35)
    path = _unfeedable_model(tmp_path, dims)
    feeds = {"x": np.ones((3, 4), np.float32), "i": np.array([0, 1], np.int64)}
    expected = ort_session(str(path))
    with pytest.raises(Exception) as ort_info:
        expected.run(None, feeds)
    session = InferenceSession(path)
    assert [i.shape for i in session.get_inputs()] == [i.shape for i in expected.get_inputs()]
    with pytest.raises(BadInputError) as info:
        session.run(None, feeds)
    assert isinstance(info.value, type(ort_info.value))
    assert str(ort_info.value) in str(info.value)  # onnxruntime's own words first
    assert info.value.tensor == "x"
    assert tracemalloc.get_traced_memory()[1] < 64 * 2**20


def test_unfeedable_graph_input_inspected(tmp_path: Path) -> None:
    path = _unfeedable_model(tmp_path, [2**40, 2**30])
    r = run_cli("inspect", path)
    assert r.code == 1 and "Traceback" not in r.err, r.err  # a verdict (NO), not a refusal (2)
    assert "x  float [1099511627776,1073741824]" in r.out
    assert "TOO_MANY_ELEMENTS" in r.out  # DirectML tensors hold at most 2^32-1 elements


def test_huge_static_gather_output_refused(traced: None) -> None:
    # Small inputs (400 KB, 800 KB), a 40 GB output: declared statically by shape inference.
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="blowup", axis=0)],
        [
            helper.make_tensor_value_info("x", F, [1, 100000]),
            helper.make_tensor_value_info("i", I64, [100000]),
        ],
        ["y"],
    )
    with pytest.raises(TooLargeError) as info:
        InferenceSession(model)
    err = info.value
    assert (err.node, err.op_type, err.tensor) == ("blowup", "Gather", "y")
    assert err.value == 100000 * 100000 * 4
    assert "[100000, 100000]" in str(err)


def test_huge_expanded_indices_refused() -> None:
    shape = helper.make_tensor("shape", I64, [2], [100000, 100000])
    model = _model(
        [
            helper.make_node("Constant", [], ["s"], value=shape),
            helper.make_node("Expand", ["i", "s"], ["wide"], name="widen"),
            helper.make_node("Gather", ["x", "wide"], ["y"], name="g", axis=0),
        ],
        [helper.make_tensor_value_info("x", F, [4, 8]), helper.make_tensor_value_info("i", I64, [1])],
        ["y"],
    )
    with pytest.raises(TooLargeError) as info:
        InferenceSession(model)
    assert info.value.node == "widen" and info.value.tensor == "wide"


def test_huge_dynamic_gather_output_refused_at_run(traced: None) -> None:
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="dyn", axis=1)],
        [
            helper.make_tensor_value_info("x", F, ["a", "b"]),
            helper.make_tensor_value_info("i", I64, ["n", "m"]),
        ],
        ["y"],
    )
    session = InferenceSession(model)
    x = np.ones((2000, 4), np.float32)
    i = np.zeros((20000, 1000), np.int64)  # 160 MB of indices, a 320 GB output
    with pytest.raises(TooLargeError) as info:
        session.run(None, {"x": x, "i": i})
    assert info.value.node == "dyn"
    assert info.value.value == 2000 * 20000 * 1000 * 4
    assert tracemalloc.get_traced_memory()[1] < 512 * 2**20  # the indices, not the output


def test_memory_limit_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    physical = memory_limit()
    assert physical is None or physical > 0
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(2**20))
    assert memory_limit() == 2**20
    check_tensor((256, 1024), np.float32)  # exactly 1 MiB fits
    with pytest.raises(TooLargeError):
        check_tensor((256, 1025), np.float32)
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [helper.make_tensor_value_info("x", F, [512, 1024]), helper.make_tensor_value_info("i", I64, [2])],
        ["y"],
    )
    InferenceSession(model)  # a graph input is the caller's feed: loads, as in onnxruntime
    model.graph.node[0].CopyFrom(helper.make_node("Identity", ["x"], ["y"], name="g"))
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", F, [256, 1024]))
    model.graph.node.append(helper.make_node("Tile", ["x", "reps"], ["big"], name="t"))
    model.graph.initializer.append(helper.make_tensor("reps", I64, [2], [2, 1]))
    with pytest.raises(TooLargeError) as info:
        InferenceSession(model)  # a value the engine would allocate, 2 MiB
    assert (info.value.node, info.value.tensor, info.value.value) == ("t", "big", 2**21)


def test_size_helpers() -> None:
    assert tensor_nbytes((2**40, 2**40), np.float64) == 2**83  # exact, no overflow
    assert tensor_nbytes((3,), TensorProto.STRING) is None
    assert tensor_nbytes((3, 0), TensorProto.FLOAT16) == 0
    assert format_bytes(512) == "512 B" and format_bytes(3 * 2**30) == "3.00 GiB"
    assert gather_scatter_output_shape("Gather", {"axis": -1}, [(2, 3), (4, 5)]) == (2, 4, 5)
    assert gather_scatter_output_shape("GatherND", {"batch_dims": 1}, [(2, 3, 4), (2, 5, 1)]) == (2, 5, 4)
    assert gather_scatter_output_shape("GatherND", {}, [(2, 3), (5, 3)]) is None  # malformed: left to others
    assert gather_scatter_output_shape("ScatterND", {}, [(2, 3), (1, 1), (1, 3)]) == (2, 3)


def test_generated_inputs_checked_against_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.validate import validate_model

    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        [helper.make_tensor_value_info("x", F, ["N"]), helper.make_tensor_value_info("i", I64, [2])],
        ["y"],
    )
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", str(2**20))
    with pytest.raises(TooLargeError):
        validate_model(model, input_shapes={"N": (1_000_000,)})


def test_generate_inputs_refuses_malformed_model() -> None:
    from dmlshim.inputs import generate_inputs

    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("x", 0, [2])],
        [onnx.helper.make_tensor_value_info("y", 1, [2])],
    )
    model = onnx.helper.make_model(graph, ir_version=10)
    with pytest.raises(BadModelError):
        generate_inputs(model)


@pytest.mark.parametrize("value", ["-5", "abc", "1.5", "1e9", "4G", "-0x10"])
def test_malformed_memory_limit_is_one_error(
    huge_input_model: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/safety.md: a guard set wrongly is refused, never read as another limit (issue 35: -5 was 0,
    # "abc" warned three times and was ignored)
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", value)
    with pytest.raises(BadInputError) as info:
        memory_limit()
    assert info.value.value == value and "DMLSHIM_MEMORY_LIMIT" in str(info.value)
    # a process of its own: the warnings went to the logging set up by the CLI
    env = {**os.environ, "DMLSHIM_MEMORY_LIMIT": value}
    r = subprocess.run(
        [sys.executable, "-m", "dmlshim", "inspect", str(huge_input_model)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert_cli_error(r.returncode, r.stderr, f"DMLSHIM_MEMORY_LIMIT={value!r}", "integer >= 0")
    assert r.stderr.count("DMLSHIM_MEMORY_LIMIT=") == 2 and "WARNING" not in r.stderr, r.stderr  # once


@pytest.mark.parametrize("value", ["0", " 1048576 ", "1_048_576"])
def test_memory_limit_integers(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", value)
    assert memory_limit() == int(value)
    with pytest.raises(TooLargeError):
        check_tensor((256, 1025), np.float32)
