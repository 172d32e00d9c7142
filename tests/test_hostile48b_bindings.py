"""Hostile sequences held against onnxruntime 1.32 (kept as tests): IOBinding.get_outputs before and
after runs with bind/clear/rebind, a pre-allocated output; added initializers the caller mutates after the
session is built, alone and with free dimension overrides; a session run from several threads after
steady runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from tests.oracle import ort_session

DATA = np.arange(12, dtype=np.float32).reshape(4, 3) - 5


def _gather_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["data", "idx"], ["out"], name="g1"),
            helper.make_node("Relu", ["data"], ["r"], name="relu"),
        ],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"]),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, ["K", 3]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [4, 3]),
        ],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])


def _described(call: Callable[[], Any]) -> object:
    """What ``call()`` gave, comparable across the two libraries (refusals as "refused")."""
    try:
        value = call()
    except Exception:  # both libraries' classes: compared as a refusal
        return "refused"
    if isinstance(value, list):
        return [(v.shape(), v.numpy().tolist()) if hasattr(v, "numpy") else v for v in value]
    return value


def _sequence(session: Any) -> list[object]:
    binding = session.io_binding()
    kept = np.full((2, 3), 7, np.float32)  # memory onnxruntime writes into: alive for the whole sequence
    steps: list[Callable[[], Any]] = [
        binding.get_outputs,
        lambda: binding.bind_cpu_input("data", DATA),
        lambda: binding.bind_cpu_input("idx", np.array([1, 2])),
        lambda: binding.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(kept)),
        binding.get_outputs,
        lambda: session.run_with_iobinding(binding),
        binding.get_outputs,
        lambda: kept.tolist(),
        lambda: binding.bind_output("r"),
        lambda: session.run_with_iobinding(binding),
        binding.get_outputs,
        binding.clear_binding_outputs,
        binding.get_outputs,
        lambda: binding.bind_output("out"),
        lambda: session.run_with_iobinding(binding),
        binding.get_outputs,
        lambda: binding.bind_cpu_input("idx", np.array([9])),
        lambda: session.run_with_iobinding(binding),
        lambda: binding.bind_cpu_input("idx", np.array([0, 3])),
        lambda: session.run_with_iobinding(binding),
        binding.get_outputs,
        lambda: [a.tolist() for a in binding.copy_outputs_to_cpu()],
    ]
    return [_described(step) for step in steps]


@pytest.mark.parametrize("check", [True, False])
def test_get_outputs_through_bind_clear_run_sequences(check: bool) -> None:
    model = _gather_model()
    session = dmlshim.InferenceSession(model.SerializeToString())
    if not check:
        session.engine.drop_check()
    for _ in range(4):  # steady runs first
        session.run(None, {"data": DATA, "idx": np.array([0, 1])})
    assert _sequence(session) == _sequence(ort_session(model, quiet=True))


def _matmul_gather_model() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["W", "idx"], ["y"], name="gather", axis=0),
            helper.make_node("ScatterElements", ["W", "j", "u"], ["s"], name="scatter", axis=0),
        ],
        "g",
        [
            helper.make_tensor_value_info("idx", TensorProto.INT64, ["K"]),
            helper.make_tensor_value_info("j", TensorProto.INT64, [1, 3]),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 3]),
        ],
        [onnx.ValueInfoProto(name="y"), onnx.ValueInfoProto(name="s")],
        [numpy_helper.from_array(DATA, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.mark.parametrize("override", [False, True])
def test_an_added_initializer_mutated_after_the_build(override: bool) -> None:
    """onnxruntime reads the caller's memory on every run (a Gather and a ScatterElements of it)."""

    def runs(make: Callable[[bytes, ort.SessionOptions], Any]) -> list[list[list[float]]]:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        value = np.full((4, 3), 2.0, np.float32)
        added = ort.OrtValue.ortvalue_from_numpy(value)  # onnxruntime keeps no reference: held here
        options.add_initializer("W", added)
        if override:
            options.add_free_dimension_override_by_name("K", 2)
        session = make(_matmul_gather_model(), options)
        feeds = {"idx": np.array([3, 0]), "j": np.array([[1, 2, 3]]), "u": np.ones((1, 3), np.float32)}
        out = []
        for k in range(9):
            if k in (4, 7):
                value[:] = k
            out.append([a.tolist() for a in session.run(None, feeds)])
        assert added is not None  # alive through every run
        return out

    want = runs(lambda m, o: ort.InferenceSession(m, o, providers=["CPUExecutionProvider"]))
    assert runs(dmlshim.InferenceSession) == want


def test_threads_after_steady_runs() -> None:
    model = _gather_model()
    ref = ort_session(model, quiet=True)
    session = dmlshim.InferenceSession(model.SerializeToString())
    for _ in range(5):
        session.run(None, {"data": DATA, "idx": np.array([0, 1])})
    problems: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(30):
            idx = rng.integers(-5, 5, int(rng.integers(1, 4)))
            feeds = {"data": rng.standard_normal((4, 3)).astype(np.float32), "idx": idx}
            want = _described(lambda f=feeds: ref.run(None, f))
            got = _described(lambda f=feeds: session.run(None, f))
            if not isinstance(want, str):
                want = [np.asarray(v).tolist() for v in want]  # type: ignore[union-attr]
            if not isinstance(got, str):
                got = [np.asarray(v).tolist() for v in got]  # type: ignore[union-attr]
            if want != got:
                problems.append(f"{idx}: {want} != {got}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not problems, problems[:3]
