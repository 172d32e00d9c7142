"""Values that come from outside the model reach every engine exactly as onnxruntime applies them.

An initializer can be replaced by the caller in four ways: fed as a graph input when it is also one (IR
>= 4), ``SessionOptions.add_initializer``, ``SessionOptions.add_external_initializers`` (external-data
initializers only), or bound through ``run_with_ort_values`` / io_binding. Every engine (partitioned
with and without the whole-model check, custom-op, the CLI) must answer what onnxruntime's CPU provider
answers, on models where the replaced value is read both by an emulated gather and by a CPU node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError

REPO = Path(__file__).resolve().parents[1]
ROWS = 4


def override_model(rows: int = ROWS) -> onnx.ModelProto:
    """``y = Gather(Relu(x + b), i) * 2`` and ``z = Gather(w, i) + x``: ``b`` is an initializer that is
    also a graph input (read by a CPU node), ``w`` a plain initializer read directly by an emulated node."""
    f32 = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f32, [rows, 3])
    b_in = helper.make_tensor_value_info("b", f32, [rows, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [rows])
    outs = [helper.make_tensor_value_info(n, f32, None) for n in ("y", "z")]
    inits = [
        numpy_helper.from_array(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "b"),
        numpy_helper.from_array(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) * -1.5, "w"),
        numpy_helper.from_array(np.array(2, dtype=np.float32), "two"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "b"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Gather", ["r", "i"], ["g"], axis=0),
        helper.make_node("Mul", ["g", "two"], ["y"]),
        helper.make_node("Gather", ["w", "i"], ["gw"], axis=0),
        helper.make_node("Add", ["gw", "x"], ["z0"]),
        helper.make_node("Sigmoid", ["z0"], ["z1"]),
        helper.make_node("Gather", ["z1", "i"], ["z"], axis=0),
    ]
    graph = helper.make_graph(nodes, "overrides", [x, b_in, i], outs, inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def feeds(rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(23)
    return {
        "x": rng.standard_normal((rows, 3)).astype(np.float32),
        "i": rng.permutation(rows).astype(np.int64),
    }


NEW_B = np.full((ROWS, 3), 100.0, dtype=np.float32)
NEW_W = np.linspace(-3, 3, ROWS * 3, dtype=np.float32).reshape(ROWS, 3)

# (engine, whole-model check): profiling switches the check off, so every partition runs.
ENGINES = [("partitioned", True), ("partitioned", False), ("customop", False)]


def options(tmp_path: Path, check: bool) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if not check:
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / "profile")
    return so


def reference(source: Any, so: ort.SessionOptions, run_feeds: dict[str, Any]) -> list[np.ndarray]:
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, run_feeds)]


def assert_same(got: list[Any], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g = g.numpy() if isinstance(g, ort.OrtValue) else np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_overridable_initializers_are_described_as_onnxruntime_does() -> None:
    data = override_model().SerializeToString()
    ours = dmlshim.InferenceSession(data)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [a.name for a in ours.get_inputs()] == [a.name for a in theirs.get_inputs()] == ["x", "i"]
    assert [a.name for a in ours.get_overridable_initializers()] == ["b"]
    assert [a.name for a in theirs.get_overridable_initializers()] == ["b"]


@pytest.mark.parametrize(("engine", "check"), ENGINES)
@pytest.mark.parametrize("how", ["run", "run_with_ort_values", "io_binding"])
def test_fed_initializer_replaces_the_models(tmp_path: Path, engine: str, check: bool, how: str) -> None:
    data = override_model().SerializeToString()
    run_feeds = {**feeds(), "b": NEW_B}
    want = reference(data, ort.SessionOptions(), run_feeds)
    default = reference(data, ort.SessionOptions(), feeds())
    assert not np.array_equal(want[0], default[0])  # the fed b makes a difference
    session = dmlshim.InferenceSession(data, options(tmp_path, check), engine=engine)
    for _ in range(2):  # the first run and a later one (the whole-model check answers from the second)
        if how == "run":
            got = session.run(None, run_feeds)
        elif how == "run_with_ort_values":
            ortvalues = {n: ort.OrtValue.ortvalue_from_numpy(v) for n, v in run_feeds.items()}
            got = session.run_with_ort_values(None, ortvalues)
        else:
            binding = session.io_binding()
            for name, value in run_feeds.items():
                binding.bind_cpu_input(name, value)
            for out in ("y", "z"):
                binding.bind_output(out)
            session.run_with_iobinding(binding)
            got = binding.copy_outputs_to_cpu()
        assert_same(got, want)
    assert_same(session.run(None, feeds()), default)  # not fed: the model's own b again


@pytest.mark.parametrize(("engine", "check"), ENGINES)
def test_add_initializer_reaches_emulated_nodes(tmp_path: Path, engine: str, check: bool) -> None:
    data = override_model().SerializeToString()
    keep = [ort.OrtValue.ortvalue_from_numpy(NEW_W), ort.OrtValue.ortvalue_from_numpy(NEW_B)]
    theirs = ort.SessionOptions()
    theirs.add_initializer("w", keep[0])
    theirs.add_initializer("b", keep[1])
    want = reference(data, theirs, feeds())
    assert not np.array_equal(want[1], reference(data, ort.SessionOptions(), feeds())[1])
    so = options(tmp_path, check)
    so.add_initializer("w", keep[0])
    so.add_initializer("b", keep[1])
    session = dmlshim.InferenceSession(data, so, engine=engine)
    assert_same(session.run(None, feeds()), want)
    assert_same(session.run(None, feeds()), want)
    assert so.enable_profiling is not check  # the caller's options are left as they were


def external_model(tmp_path: Path) -> Path:
    path = tmp_path / "ext.onnx"
    onnx.save(
        override_model(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="ext.bin",
        size_threshold=0,
    )
    return path


@pytest.mark.parametrize(("engine", "check"), ENGINES)
def test_add_external_initializers_reach_every_node(tmp_path: Path, engine: str, check: bool) -> None:
    path = external_model(tmp_path)
    keep = [ort.OrtValue.ortvalue_from_numpy(NEW_W)]
    theirs = ort.SessionOptions()
    theirs.add_external_initializers(["w"], keep)
    want = reference(str(path), theirs, feeds())
    so = options(tmp_path, check)
    so.add_external_initializers(["w"], keep)
    session = dmlshim.InferenceSession(str(path), so, engine=engine)
    assert_same(session.run(None, feeds()), want)


def test_add_external_initializers_refused_as_onnxruntime_refuses(tmp_path: Path) -> None:
    data = override_model().SerializeToString()  # weights inline: nothing external to replace
    keep = [ort.OrtValue.ortvalue_from_numpy(NEW_W)]
    theirs = ort.SessionOptions()
    theirs.add_external_initializers(["w"], keep)
    with pytest.raises(Exception, match="non-external"):
        ort.InferenceSession(data, theirs, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.add_external_initializers(["w"], keep)
    with pytest.raises(BadInputError, match=r"'w'.*inline"):
        dmlshim.InferenceSession(data, so)


def test_cli_run_feeds_the_overridable_initializer(tmp_path: Path) -> None:
    model_path = tmp_path / "m.onnx"
    onnx.save(override_model(), str(model_path))
    run_feeds = {**feeds(), "b": NEW_B}
    np.savez(tmp_path / "in.npz", **run_feeds)
    want = reference(str(model_path), ort.SessionOptions(), run_feeds)
    env = dict(os.environ, PYTHONPATH=str(REPO / "provider"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmlshim",
            "run",
            "-q",
            str(model_path),
            "--inputs",
            "in.npz",
            "-o",
            "out.npz",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert_same([out["y"], out["z"]], want)


def test_before_ir4_initializers_are_constants_as_in_onnxruntime() -> None:
    model = override_model()
    model.ir_version = 3
    model.opset_import[0].version = 9
    for tensor in model.graph.initializer:  # IR 3: every initializer is also a graph input
        if tensor.name not in {i.name for i in model.graph.input}:
            model.graph.input.append(
                helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
    data = model.SerializeToString()
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(data)
    assert [a.name for a in ours.get_inputs()] == [a.name for a in theirs.get_inputs()] == ["x", "i"]
    assert ours.get_overridable_initializers() == theirs.get_overridable_initializers() == []
    with pytest.raises(Exception, match="Invalid input name: b"):
        theirs.run(None, {**feeds(), "b": NEW_B})
    with pytest.raises(BadInputError, match="'b' is not an input of the model"):
        ours.run(None, {**feeds(), "b": NEW_B})
    assert_same(ours.run(None, feeds()), [np.asarray(o) for o in theirs.run(None, feeds())])
