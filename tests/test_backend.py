"""ONNX's backend test suite on dmlshim.backend, restricted to the gather/scatter node tests.

Cases the DirectML provider cannot express (scatter reductions) pass through the CPU fallback. The
real-model tests are excluded: they download models.
"""

from __future__ import annotations

import re
import unittest

import numpy as np
import onnx.backend.test
import pytest
from onnx import TensorProto, helper

import dmlshim.backend as backend
from dmlshim import BadInputError
from dmlshim.dml import FeatureLevel
from tests.oracle import IR_VERSION

backend_test = onnx.backend.test.BackendTest(backend, __name__)
backend_test.include(r"(test_gather_|test_gathernd_|test_scatter)")
backend_test.exclude(r"_cuda$")
backend_test.exclude(r"^test_(real|pytorch|simple)")

# enable_report() is left out: its onnx_coverage marker needs onnx's report plugin registered in the root
# conftest, and this suite runs with --strict-markers.


def _selected_only(case: type[unittest.TestCase]) -> type[unittest.TestCase]:
    # BackendTest adds a method for every node test and skips the unselected ones at run time; dropping them
    # here keeps the report to the cases that actually run.
    for name in [n for n in vars(case) if n.startswith("test_") and not _SELECTED.match(n)]:
        delattr(case, name)
    return case


_SELECTED = re.compile(r"^test_(gather_|gathernd_|scatter).*_cpu$")
globals().update({name: _selected_only(case) for name, case in backend_test.test_cases.items()})


def _gather_model() -> onnx.ModelProto:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def test_module_level_aliases_and_devices() -> None:
    for name in ("prepare", "run_model", "run_node", "supports_device", "is_compatible"):
        assert callable(getattr(backend, name))
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    with pytest.raises(BadInputError, match="device 'CPU' only"):
        backend.prepare(_gather_model(), "CUDA")


def test_prepare_run_and_record(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    i = np.array([1, -1], dtype=np.int64)
    monkeypatch.setenv(backend.FEATURE_LEVEL_ENV, "3_0")
    rep = backend.prepare(_gather_model())
    (y,) = rep.run([x, i])
    assert y.dtype == np.float32 and np.isnan(y[0]) and y[1] == 3.0
    record = rep.last_run_record
    assert record is not None and record.feature_level == FeatureLevel.FL_3_0.dml_name
    assert record.nodes[0].placement == "dml"
    (y2,) = backend.prepare(_gather_model(), feature_level="0x5000").run({"x": x, "i": i})
    assert y2.tobytes() == y.tobytes()
    assert backend.run_model(_gather_model(), [x, i])[0].tobytes() == y.tobytes()


def test_bad_feature_level_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(backend.FEATURE_LEVEL_ENV, "7_7")
    with pytest.raises(BadInputError, match="DMLSHIM_FEATURE_LEVEL"):
        backend.prepare(_gather_model())


def test_run_node() -> None:
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    i = np.array([[2, 0], [1, 1]], dtype=np.int64)
    (y,) = backend.run_node(node, [x, i])
    assert y.tolist() == [[2.0, 0.0], [4.0, 4.0]]


def test_suite_cases_were_collected() -> None:
    names = [n for n in backend_test.test_cases]
    assert any("Node" in n for n in names)
    assert issubclass(backend_test.test_cases[names[0]], unittest.TestCase)
