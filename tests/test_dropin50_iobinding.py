"""An output bound by name keeps the memory its first run allocated, as in onnxruntime: a later run writes
into it, so the ``OrtValue`` a program took from ``get_outputs()`` after one run (or its ``data_ptr()``)
shows the next run's values. Found by a parity harness running one client on onnxruntime and on dmlshim;
each expectation is what onnxruntime's own binding shows for the same calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim

from .conftest import REPO


def _model() -> bytes:
    nodes = [
        helper.make_node("Gather", ["d", "i"], ["g"], axis=0, name="g0"),
        helper.make_node("ScatterND", ["d", "ni", "nu"], ["snd"], name="snd0"),
    ]
    graph = helper.make_graph(
        nodes,
        "reuse",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT16, [3, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT32, [None]),
            helper.make_tensor_value_info("ni", TensorProto.INT64, [1, 1]),
            helper.make_tensor_value_info("nu", TensorProto.FLOAT16, [1, 4]),
        ],
        [
            helper.make_tensor_value_info("g", TensorProto.FLOAT16, None),
            helper.make_tensor_value_info("snd", TensorProto.FLOAT16, None),
            helper.make_tensor_value_info("d", TensorProto.FLOAT16, [3, 4]),
        ],
    )
    return helper.make_model(
        graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17)]
    ).SerializeToString()


def _feeds() -> dict[str, np.ndarray]:
    return {
        "d": np.arange(12, dtype=np.float16).reshape(3, 4),
        "i": np.array([1, 2], np.int32),
        "ni": np.array([[2]], np.int64),
        "nu": np.ones((1, 4), np.float16),
    }


@pytest.fixture(scope="module")
def sessions() -> tuple[Any, Any]:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    ours = dmlshim.InferenceSession(_model(), so)
    theirs = onnxruntime.InferenceSession(_model(), so, providers=["CPUExecutionProvider"])
    return ours, theirs


def _two_runs(session: Any, outputs: tuple[str, ...]) -> dict[str, Any]:
    feeds = _feeds()
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    for name in outputs:
        binding.bind_output(name)
    session.run_with_iobinding(binding)
    first = binding.get_outputs()
    first_copies = binding.copy_outputs_to_cpu()
    first_ptrs = [v.data_ptr() for v in first]
    binding.bind_cpu_input("i", np.array([0, 0], np.int32))
    binding.bind_cpu_input("nu", np.full((1, 4), 5, np.float16))
    session.run_with_iobinding(binding)
    second = binding.get_outputs()
    return {
        "first OrtValues after the second run": [v.numpy().tolist() for v in first],
        "copies of the first run": [a.tolist() for a in first_copies],
        "second": [v.numpy().tolist() for v in second],
        "same memory": [p == v.data_ptr() for p, v in zip(first_ptrs, second, strict=True)],
        "feed unchanged": bool(np.array_equal(feeds["d"], _feeds()["d"])),
    }


@pytest.mark.parametrize("outputs", [("g",), ("g", "snd"), ("snd", "g")])
def test_a_later_run_writes_into_the_first_runs_output(
    sessions: tuple[Any, Any], outputs: tuple[str, ...]
) -> None:
    ours, theirs = sessions
    expected = _two_runs(theirs, outputs)
    assert all(expected["same memory"])  # onnxruntime's binding reuses the memory
    assert _two_runs(ours, outputs) == expected


def test_an_output_that_is_a_graph_input_leaves_the_feed_alone(sessions: tuple[Any, Any]) -> None:
    ours, theirs = sessions
    got = _two_runs(ours, ("d", "g"))
    assert got["feed unchanged"]
    expected = _two_runs(theirs, ("d", "g"))
    for key in (
        "first OrtValues after the second run",
        "copies of the first run",
        "second",
        "feed unchanged",
    ):
        assert got[key] == expected[key], key


@pytest.mark.parametrize("model", ["tiny_decoder_step", "scatternd_kv_cache", "embedding_gather"])
@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
def test_feeds_a_b_a_through_one_binding(model: str, engine: str) -> None:
    """Writing a run's outputs into the first run's memory corrupts nothing a later run reads (a cache of
    the engine's): three runs with feeds A, B, A give onnxruntime's outputs, and the OrtValues taken
    after the first run hold the last run's."""
    path = str(REPO / "onnx_models" / f"{model}.onnx")
    first = dict(np.load(REPO / "onnx_models" / f"{model}.npz"))
    second = {k: (v + 1).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in first.items()}
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    theirs = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    providers = ["CPUExecutionProvider"] if engine == "cpu" else None
    ours = dmlshim.InferenceSession(path, so, providers=providers, engine=engine)

    def runs(session: Any) -> list[list[np.ndarray]]:
        binding = session.io_binding()
        for output in session.get_outputs():
            binding.bind_output(output.name)
        seen, held = [], None
        for feeds in (first, second, first):
            for name, value in feeds.items():
                binding.bind_cpu_input(name, value)
            session.run_with_iobinding(binding)
            held = binding.get_outputs() if held is None else held
            seen.append(binding.copy_outputs_to_cpu())
        return [*seen, [v.numpy() for v in held]]

    for expected, got in zip(runs(theirs), runs(ours), strict=True):
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(b, a)
