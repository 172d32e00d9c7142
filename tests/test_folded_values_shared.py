"""Issue 35 leftover: the static size check's "values read by ``Shape`` alone" and validate's DirectML
attribution ask one function which values onnxruntime's constant folding computes
(``dmlshim.execute.weights.folded_reads.folded_values``), the one the ``add_initializer`` reads use.

The size check had a twin of its own that took a random draw and a ``DequantizeLinear`` of constants as
folded: a 200 MB value read by ``Shape`` alone was refused under a 100 MB limit, though onnxruntime never
allocates it (it folds the ``Shape`` and drops the producer it does not fold; its peak RSS below). A
``ConstantOfShape`` of constants is folded, so allocated, and still refused (tests/test_hostile47_sizes.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.oracle import IR_VERSION

N = 50_000_000  # float32: 200 MB, twice the limit
LIMIT = "100000000"


def _model(kind: str) -> onnx.ModelProto:
    """z = Shape(r) + x, where ``r`` (N floats) is a random draw or a DequantizeLinear of an int8 Expand."""
    if kind == "random":
        nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[N], seed=1.0, name="draw")]
        inits = []
    else:
        nodes = [
            helper.make_node(
                "Expand", ["one", "n"], ["q"], name="expand"
            ),  # 50 MB int8: folded, under the limit
            helper.make_node("DequantizeLinear", ["q", "scale"], ["r"], name="dq"),
        ]
        inits = [
            numpy_helper.from_array(np.array([1], np.int8), "one"),
            numpy_helper.from_array(np.array([N], np.int64), "n"),
            numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
        ]
    nodes += [
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Add", ["s", "x"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_only",
        [helper.make_tensor_value_info("x", T.INT64, [1])],
        [helper.make_tensor_value_info("z", T.INT64, [1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


_ORT_PEAK = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnxruntime as ort
    s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    s.run(None, {"x": np.array([1], np.int64)})
    with open("/proc/self/status") as f:
        print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak RSS read from /proc")
@pytest.mark.parametrize("kind", ["random", "dequantize"])
def test_onnxruntime_never_allocates_the_value(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(kind), path)
    result = subprocess.run(
        [sys.executable, "-c", _ORT_PEAK, str(path)], capture_output=True, text=True, timeout=300, check=True
    )
    assert int(result.stdout.split()[-1]) * 1024 < N * 4


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
@pytest.mark.parametrize("kind", ["random", "dequantize"])
def test_not_refused_and_onnxruntimes_values(monkeypatch: pytest.MonkeyPatch, kind: str, engine: str) -> None:
    import dmlshim

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    model = _model(kind).SerializeToString()
    feeds = {"x": np.array([1], np.int64)}
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
    assert got.tolist() == want.tolist() == [N + 1]


def test_one_answer_for_both_readers() -> None:
    """The size check's constants are the attribution's folded values plus the constants they start from."""
    from dmlshim.execute.weights.folded_reads import folded_values
    from dmlshim.validate.directml_nodes import _folded

    graph = _model("dequantize").graph
    assert _folded(graph) == folded_values(graph) == {"q"}  # the Expand is folded, the DequantizeLinear not
    assert folded_values(graph, with_sources=True) == {"q", "one", "n", "scale"}
