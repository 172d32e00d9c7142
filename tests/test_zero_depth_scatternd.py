"""ScatterND with empty index tuples (indices' last dimension 0) never kills the process.

onnxruntime 1.24 dies of SIGFPE on this node (at run time, or at session creation when constant folding
computes it); 1.32 computes ONNX's answer. Every case runs in a child process (a crash must fail the
test, not end the run) and its values are compared with ONNX's reference implementation
(``onnx.reference``, its ScatterND as the specification writes it), and, where onnxruntime runs the
node, with onnxruntime's CPU provider too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .oracle import IR_VERSION, onnx_reference_run, ort_crashes_on_zero_depth_scatternd

PROVIDER = str(Path(__file__).resolve().parent.parent / "provider")

CASES = [
    # data shape, indices shape, reduction, constant indices, all inputs constant
    ([2], [2, 0], "none", False, False),
    ([2, 3], [0], "none", True, False),
    ([2], [2, 0], "add", True, False),
    ([2], [2, 0, 0], "mul", False, False),
    ([0], [2, 0], "max", False, False),
    ([5, 3], [2, 0], "min", True, False),
    ([4], [3, 0], "none", True, True),
]


def _case(
    data: list[int], idx: list[int], reduction: str, const_idx: bool, all_const: bool
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    upd = idx[:-1] + data
    x = np.arange(int(np.prod(data)), dtype=np.float32).reshape(data) * 3 - 4
    u = np.arange(int(np.prod(upd)), dtype=np.float32).reshape(upd) % 7 - 2
    i = np.zeros(idx, np.int64)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    values = {"x": x, "i": i, "u": u}
    constant = {"x", "i", "u"} if all_const else ({"i"} if const_idx else set())
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64 if n == "i" else TensorProto.FLOAT, list(a.shape))
        for n, a in values.items()
        if n not in constant
    ]
    inits = [numpy_helper.from_array(values[n], n) for n in sorted(constant)]
    nodes = [
        helper.make_node("ScatterND", ["x", "i", "u"], ["s"], name="scatter", **attrs),
        helper.make_node("Identity", ["s"], ["y"]),
    ]
    if all_const:  # a graph needs an input: y + 0 * z
        inputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])]
        nodes[1] = helper.make_node("Add", ["s", "z"], ["y"])
    graph = helper.make_graph(
        nodes, "zero_depth", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {n: a for n, a in values.items() if n not in constant}
    if all_const:
        feeds = {"z": np.zeros(1, np.float32)}
    return model, feeds


_CHILD = r"""
import json, sys, numpy as np, onnx
import dmlshim
model = onnx.load(sys.argv[1]); feeds = dict(np.load(sys.argv[2]))
engine = sys.argv[3] or None
session = dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
out = session.run(None, feeds)[0]
record = session._last_run_record
reasons = [r for n in record.nodes for r in n.reasons] if record is not None else []
print(json.dumps({"y": out.tolist(), "shape": list(out.shape), "reasons": reasons}))
"""


def _child(args: list[str], code: str = _CHILD) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PROVIDER + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu", ""])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{'const' if c[4] else 'cidx' if c[3] else 'fed'}"
)
def test_a_session_computes_onnx_answer_and_the_process_lives(
    tmp_path: Path, case: tuple, engine: str
) -> None:
    model, feeds = _case(*case)
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "f.npz", **feeds)
    done = _child([str(tmp_path / "m.onnx"), str(tmp_path / "f.npz"), engine])
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    (want,) = onnx_reference_run(model, feeds)
    assert got["shape"] == list(want.shape) and np.array_equal(
        np.array(got["y"], np.float32).reshape(want.shape), want
    )
    if not ort_crashes_on_zero_depth_scatternd():
        from .oracle import ort_run

        (theirs,) = ort_run(model, feeds)
        assert np.array_equal(theirs, want)  # onnxruntime that runs it agrees with ONNX's reference


def test_validate_and_inspect_with_inputs_live(tmp_path: Path) -> None:
    model, feeds = _case([3, 2], [2, 0], "none", True, False)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.savez(tmp_path / "in.npz", **feeds)
    code = (
        "import runpy, sys; sys.argv = ['dmlshim', *sys.argv[1:]]; "
        "runpy.run_module('dmlshim', run_name='__main__')"
    )
    validate = _child(["validate", str(path)], code)
    assert validate.returncode == 0, validate.stderr[-2000:]
    assert "verdict: MATCH" in validate.stdout
    # the verdict says where the reference for the node came from when onnxruntime would have crashed
    assert ("ONNX-semantics computation" in validate.stdout) == ort_crashes_on_zero_depth_scatternd()
    inspect = _child(["inspect", str(path), "--inputs", str(tmp_path / "in.npz")], code)
    # exit 1: not every node translates to DirectML (this one falls back), never a signal
    assert inspect.returncode == 1, inspect.stderr[-2000:]
    assert "INDEX_TUPLE_EMPTY" in inspect.stdout and "Verdict:" in inspect.stdout


def test_the_crash_is_named_in_the_record_where_onnxruntime_crashes(tmp_path: Path) -> None:
    model, feeds = _case([2], [2, 0], "none", False, False)
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "f.npz", **feeds)
    done = _child([str(tmp_path / "m.onnx"), str(tmp_path / "f.npz"), "partitioned"])
    assert done.returncode == 0, done.stderr[-2000:]
    text = json.dumps(json.loads(done.stdout.strip().splitlines()[-1])["reasons"])
    assert ("SIGFPE" in text) == ort_crashes_on_zero_depth_scatternd()


_DYNAMIC = r"""
import sys, numpy as np, dmlshim
from onnx import helper, TensorProto as T
nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["s"], reduction=sys.argv[2]),
         helper.make_node("Neg", ["s"], ["y"])]
graph = helper.make_graph(nodes, "g", [
    helper.make_tensor_value_info("x", T.FLOAT, [2]),
    helper.make_tensor_value_info("i", T.INT64, ["a", "k"]),
    helper.make_tensor_value_info("u", T.FLOAT, None)], [helper.make_tensor_value_info("y", T.FLOAT, None)])
model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
session = dmlshim.InferenceSession(model, engine=sys.argv[1] or None)
x = np.array([1, -2], np.float32)
for i, u in ((np.zeros((3, 0), np.int64), np.arange(6, dtype=np.float32).reshape(3, 2)),
             (np.array([[1]], np.int64), np.array([9], np.float32))):
    print(session.run(None, {"x": x, "i": i, "u": u})[0].tolist())
"""


@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu", ""])
def test_a_last_dimension_0_only_at_run_time(engine: str, reduction: str) -> None:
    """Indices declared ``["a", "k"]``: 0 in one run, 1 in the next; each run is ONNX's answer."""
    done = _child([engine, reduction], _DYNAMIC)
    assert done.returncode == 0, done.stderr[-2000:]
    got = [json.loads(line) for line in done.stdout.strip().splitlines()[-2:]]
    x = np.array([1, -2], np.float32)
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
            "g",
            [
                helper.make_tensor_value_info(n, t, None)
                for n, t in (("x", TensorProto.FLOAT), ("i", TensorProto.INT64), ("u", TensorProto.FLOAT))
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", 18)],
    )
    first = onnx_reference_run(
        model, {"x": x, "i": np.zeros((3, 0), np.int64), "u": np.arange(6, dtype=np.float32).reshape(3, 2)}
    )[0]
    second = onnx_reference_run(
        model, {"x": x, "i": np.array([[1]], np.int64), "u": np.array([9], np.float32)}
    )[0]
    assert got == [(-first).tolist(), (-second).tolist()]
