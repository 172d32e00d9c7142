"""``dmlshim validate`` answered by one onnxruntime run (issue 22: validate at real size as fast and lean as
comparing two onnxruntime runs).

At the default optimisation level (disabled), when every emulated node's kernel reproduces onnxruntime's
output bit for bit on the inputs onnxruntime computed, dmlshim's run, the like-for-like reference and the
whole model are the same values: validate runs the model once. Anything else (a kernel that differs, half
floats, another level) makes the three runs apart. Expected values come from onnxruntime CPU run by the
test; planted faults go through the kernel registry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.comparison import exact_difference, same_bits
from dmlshim.dml.operators import GatherDesc
from dmlshim.graph import uses_half_floats
from dmlshim.kernels import _KERNELS, KernelOptions, KernelResult
from dmlshim.validate import validate_model
from dmlshim.validate.results import RUNS_ONE, RUNS_THREE
from dmlshim.validate.statistics import error_statistics
from tests.oracle import IR_VERSION, ort_run

# Faults are planted in the numpy kernels' table (dmlshim.kernels._KERNELS).
pytestmark = pytest.mark.usefixtures("numpy_kernels")

F32, F16, BF16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT64
RNG = np.random.default_rng(22)


Step = tuple[Path, onnx.ModelProto, dict[str, Any]]


def _decoder_step(
    vocab: int = 600, hidden: int = 64, cache: int = 16
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Embedding Gather (a 150 KB table: read from the file, never into the proto), a MatMul, and a
    KV-cache ScatterND between two CPU segments."""
    inits = {
        "wte": RNG.standard_normal((vocab, hidden)).astype(np.float32),
        "w": RNG.standard_normal((hidden, hidden)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["emb"], name="tok_emb", axis=0),
        helper.make_node("MatMul", ["emb", "w"], ["h"], name="proj"),
        helper.make_node("Tanh", ["h"], ["k"], name="act"),
        helper.make_node("ScatterND", ["past", "where", "k"], ["present"], name="cache_write"),
        helper.make_node("ReduceSum", ["present"], ["total"], name="sum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "step",
        [
            helper.make_tensor_value_info("ids", I64, [1]),
            helper.make_tensor_value_info("past", F32, [cache, hidden]),
            helper.make_tensor_value_info("where", I64, [1, 1]),
        ],
        [
            helper.make_tensor_value_info("present", F32, [cache, hidden]),
            helper.make_tensor_value_info("total", F32, []),
        ],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    feeds = {
        "ids": np.array([421], np.int64),
        "past": RNG.standard_normal((cache, hidden)).astype(np.float32),
        "where": np.array([[5]], np.int64),
    }
    return model, feeds


@pytest.fixture()
def step_file(tmp_path: Path) -> Step:
    model, feeds = _decoder_step()
    path = tmp_path / "step.onnx"
    onnx.save(model, path)
    return path, model, feeds


def test_one_run_when_every_kernel_agrees(step_file: Step) -> None:
    path, model, feeds = step_file
    report = validate_model(path, inputs=feeds)
    assert report.match and report.runs == RUNS_ONE
    expected = dict(zip(["present", "total"], ort_run(model, feeds), strict=True))
    for out in report.outputs:
        assert out.dmlshim is not None and exact_difference(out.dmlshim, expected[out.name]).first is None
        assert out.reference is not None and exact_difference(out.reference, expected[out.name]).first is None
        assert out.whole_model is not None and out.whole_model.identical
    assert {n.name: (n.placement, n.attribution) for n in report.nodes} == {
        "tok_emb": ("dml", "match"),
        "cache_write": ("dml", "match"),
    }
    # The kernels really ran: their records are the run's.
    assert all(n.record is not None and n.record.status == "dml" for n in report.nodes)


def test_one_run_is_said_in_text_and_json(
    step_file: Step, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, _, feeds = step_file
    np.savez(tmp_path / "feeds.npz", **feeds)
    assert main(["validate", str(path), "--inputs", str(tmp_path / "feeds.npz")]) == 0
    assert "runs: one onnxruntime run of the whole model" in capsys.readouterr().out
    assert main(["validate", str(path), "--inputs", str(tmp_path / "feeds.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == RUNS_ONE


def _plant(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _KERNELS[GatherDesc]

    def faulty(desc: Any, inputs: Mapping[str, Any], options: KernelOptions) -> KernelResult:
        result = real(desc, inputs, options)
        return KernelResult(np.ascontiguousarray(result.output * 2), result.duplicate_indices)

    monkeypatch.setitem(_KERNELS, GatherDesc, faulty)


def test_a_kernel_that_differs_makes_the_runs_apart(step_file: Step, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model, feeds = step_file
    _plant(monkeypatch)
    report = validate_model(path, inputs=feeds)
    assert report.runs == RUNS_THREE and not report.match
    assert {n.name: n.attribution for n in report.nodes} == {
        "tok_emb": "diverges_here",
        "cache_write": "inputs_differed",
    }
    expected = dict(zip(["present", "total"], ort_run(model, feeds), strict=True))
    for out in report.outputs:  # the reference is still onnxruntime's answer
        assert out.reference is not None and exact_difference(out.reference, expected[out.name]).first is None


def test_other_optimization_levels_run_apart(step_file: Step) -> None:
    path, _, feeds = step_file
    report = validate_model(path, inputs=feeds, optimization_level="basic")
    assert report.match and report.runs == RUNS_THREE


def test_half_floats_run_apart() -> None:
    table = RNG.standard_normal((200, 8)).astype(np.float16)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["g"], name="pick", axis=0),
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Add", ["sq", "g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [helper.make_tensor_value_info("x", F16, [3, 8]), helper.make_tensor_value_info("ids", I64, [3])],
        [helper.make_tensor_value_info("y", F16, [3, 8])],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    feeds = {"x": RNG.standard_normal((3, 8)).astype(np.float16), "ids": np.array([1, 150, 7], np.int64)}
    report = validate_model(model, inputs=feeds)
    assert report.match and report.runs == RUNS_THREE


def test_a_model_with_nothing_emulated_runs_once(tmp_path: Path) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    graph = helper.make_graph(
        nodes,
        "plain",
        [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    onnx.save(model, tmp_path / "plain.onnx")
    feeds = {"x": RNG.standard_normal((2, 4)).astype(np.float32)}
    report = validate_model(tmp_path / "plain.onnx", inputs=feeds)
    assert report.match and report.runs == RUNS_ONE
    (expected,) = ort_run(model, feeds)
    assert report.outputs[0].dmlshim is not None
    assert exact_difference(report.outputs[0].dmlshim, expected).first is None


def _typed(elem: int, *, inside_if: bool = False, as_cast: bool = False) -> onnx.GraphProto:
    if as_cast:
        body_nodes = [helper.make_node("Cast", ["x"], ["z"], to=elem)]
        out_type = elem
    else:
        body_nodes = [helper.make_node("Identity", ["x"], ["z"])]
        out_type = F32
    body = helper.make_graph(body_nodes, "body", [], [helper.make_tensor_value_info("z", out_type, [2])])
    if inside_if:
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)]
        inputs = [helper.make_tensor_value_info("x", F32, [2]), helper.make_tensor_value_info("c", 9, [])]
        return helper.make_graph(nodes, "g", inputs, [onnx.ValueInfoProto(name="y")])
    return helper.make_graph(
        body_nodes, "g", [helper.make_tensor_value_info("x", F32, [2])], [onnx.ValueInfoProto(name="z")]
    )


def test_uses_half_floats_finds_every_way_a_graph_says_so() -> None:
    assert not uses_half_floats(_typed(F32))
    assert not uses_half_floats(_typed(TensorProto.DOUBLE, as_cast=True))
    assert uses_half_floats(_typed(F16, as_cast=True))
    assert uses_half_floats(_typed(BF16, as_cast=True))
    assert uses_half_floats(_typed(F16, as_cast=True, inside_if=True))
    g = _typed(F32)
    g.initializer.append(numpy_helper.from_array(np.zeros(2, np.float16), "h"))
    assert uses_half_floats(g)
    g = _typed(F32)
    g.value_info.append(helper.make_tensor_value_info("v", BF16, [2]))
    assert uses_half_floats(g)


def test_same_bits_and_statistics_of_equal_arrays() -> None:
    a = np.array([1.0, np.nan, -0.0, np.inf], np.float32)
    assert same_bits(a, a) and same_bits(a, a.copy())
    assert not same_bits(a, np.array([1.0, np.nan, 0.0, np.inf], np.float32))  # the sign of zero
    assert not same_bits(a, a.astype(np.float64))
    fast = error_statistics(a, a.copy())
    # The arithmetic path on arrays that differ only where both are NaN gives the same figures.
    b = a.copy()
    b[1] = np.float32("nan") * -1
    slow = error_statistics(a, b)
    assert fast is not None and slow is not None
    assert fast.to_json() == slow.to_json()


def test_a_scalar_output_that_differs_is_reported_not_raised() -> None:
    from dmlshim.validate import compare_arrays

    c = compare_arrays(np.array(1.5, np.float32), np.array(2.5, np.float32), exact=True)
    assert not c.match and c.first_mismatch is not None
    assert c.first_mismatch.index == () and float(c.first_mismatch.dmlshim) == 1.5


@pytest.mark.parametrize("external", [False, True])
def test_random_inputs_and_external_data_read_from_the_files(tmp_path: Path, external: bool) -> None:
    model, _ = _decoder_step()
    path = tmp_path / "step.onnx"
    if external:
        saved = onnx.ModelProto()
        saved.CopyFrom(model)  # saving as external data changes the proto it is given
        onnx.save(saved, path, save_as_external_data=True, location="step.bin", size_threshold=1024)
    else:
        onnx.save(model, path)
    report = validate_model(path)  # random inputs: ids generated within the table, where within the cache
    assert report.match and report.runs == RUNS_ONE and report.inputs_source == "random"
    feeds = dict(report.feeds)
    expected = dict(zip(["present", "total"], ort_run(model, feeds), strict=True))
    for out in report.outputs:
        assert out.dmlshim is not None and exact_difference(out.dmlshim, expected[out.name]).first is None
