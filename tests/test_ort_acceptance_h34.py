"""Issue 34: what onnxruntime accepts, dmlshim accepts; what it refuses, dmlshim refuses with its class and
its message first. Every expected behaviour is asked of onnxruntime in the same test."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.errors import DmlShimError
from dmlshim.ort.__main__ import split_argv
from dmlshim.ort.standin import standin_module

REPO = Path(__file__).resolve().parents[1]
PREFIX = "[ONNXRuntimeError] : "


def _model(
    inputs: list[onnx.ValueInfoProto],
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto] | None = None,
    output: onnx.ValueInfoProto | None = None,
    opset: int = 21,
) -> onnx.ModelProto:
    out = output or helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "h34", inputs, [out], inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _reference(model: Any, so: Any = None) -> onnxruntime.InferenceSession:
    options = so or onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return onnxruntime.InferenceSession(payload, options, providers=["CPUExecutionProvider"])


def _ours(model: Any, so: Any = None) -> dmlshim.InferenceSession:
    payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return dmlshim.InferenceSession(payload, so)


def _raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as exc:  # the answer is whatever was raised
        return exc
    raise AssertionError("no error raised")


def _same_run(model: Any, feeds: dict[str, Any], so: Any = None) -> None:
    want = _reference(model, so).run(None, feeds)
    got = _ours(model, so).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# --- acceptance -----------------------------------------------------------------------------------------


def test_a_negative_declared_dimension_loads_and_runs_as_in_onnxruntime() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    x.type.tensor_type.shape.dim[1].dim_value = -1
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [1])
    model = _model([x, i], [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)])
    feeds = {"x": np.arange(10, dtype=np.float32).reshape(2, 5), "i": np.array([4], np.int64)}
    _same_run(model, feeds)
    assert _ours(model).get_inputs()[0].shape == _reference(model).get_inputs()[0].shape  # [2, None]


def test_a_rank_zero_declaration_takes_a_feed_of_any_rank_as_in_onnxruntime() -> None:
    model = _model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])], [helper.make_node("Neg", ["x"], ["y"])]
    )
    _same_run(model, {"x": np.arange(21, dtype=np.float32).reshape(3, 7)})


@pytest.mark.parametrize("kind", ["INT4", "UINT4", "FLOAT4E2M1"])
def test_narrow_initializers_run_with_any_session_options(kind: str) -> None:
    if not hasattr(TensorProto, kind):
        pytest.skip(f"onnx has no {kind}")
    elem = getattr(TensorProto, kind)
    values = [1.0, 2.0, 0.5, 3.0] if kind == "FLOAT4E2M1" else [1, 2, 3, 4]
    w = helper.make_tensor("w", elem, [4], values)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    nodes = [
        helper.make_node("Cast", ["w"], ["wc"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "wc"], ["y"]),
    ]
    if kind == "FLOAT4E2M1":  # onnxruntime's CPU provider has no kernel taking it: the model only holds it
        nodes = [helper.make_node("Neg", ["x"], ["y"])]
    model = _model([x], nodes, [w], opset=23 if kind == "FLOAT4E2M1" else 21)
    try:
        _reference(model)
    except Exception as exc:  # this onnxruntime lacks the type: nothing to hold dmlshim to
        pytest.skip(f"onnxruntime {onnxruntime.__version__} refuses {kind}: {exc}")
    _same_run(model, {"x": np.ones(4, np.float32)}, onnxruntime.SessionOptions())


def test_a_numpy_void_array_feeds_a_string_input_as_in_onnxruntime() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2, 2])
    out = helper.make_tensor_value_info("y", TensorProto.STRING, [2, 2])
    model = _model([x], [helper.make_node("Identity", ["x"], ["y"])], output=out)
    feed = np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2)
    want = _reference(model).run(None, {"x": feed})[0]
    got = _ours(model).run(None, {"x": feed})[0]
    assert got.tolist() == want.tolist() == [["must", "have"], ["same", "size"]]


def _hub_layout(root: Path, data_in_blobs: bool) -> Path:
    """The Hugging Face cache: snapshots/v/model.onnx and its data both symbolic links, the model's into
    blobs/, the data's into blobs/ too (or, refused by onnxruntime, into another folder)."""
    blobs, other, snap = root / "blobs", root / "other", root / "snapshots" / "v"
    for folder in (blobs, other, snap):
        folder.mkdir(parents=True)
    values = np.arange(10, dtype=np.float32)
    data_blob = (blobs if data_in_blobs else other) / "sha-data"
    data_blob.write_bytes(values.tobytes())
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [10], values.tolist())
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "model.onnx.data"), ("offset", "0"), ("length", "40")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Gather", ["s", "i"], ["y"])]
    model = _model([x, i], nodes, [tensor])
    (blobs / "sha-model").write_bytes(model.SerializeToString())
    os.symlink(os.path.relpath(blobs / "sha-model", snap), snap / "model.onnx")
    os.symlink(os.path.relpath(data_blob, snap), snap / "model.onnx.data")
    return snap / "model.onnx"


def test_the_hugging_face_cache_layout_loads_as_in_onnxruntime(tmp_path: Path) -> None:
    path = str(_hub_layout(tmp_path, data_in_blobs=True))
    feeds = {"x": np.ones(10, np.float32), "i": np.array([9, 0, 4], np.int64)}
    want = _reference(path).run(None, feeds)[0]
    got = _ours(path).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_data_outside_the_real_model_folder_is_refused_as_onnxruntime_refuses_it(tmp_path: Path) -> None:
    path = str(_hub_layout(tmp_path, data_in_blobs=False))
    want = _raised(lambda: _reference(path))
    got = _raised(lambda: _ours(path))
    assert isinstance(got, type(want)) and isinstance(got, DmlShimError)
    # the words after "Error:" are onnxruntime's own and change between releases (1.24: "External data path:
    # ... and real model directory", 1.32: "External data path escapes ...")
    head = "External data path validation failed for initializer: w. Error: External data path"
    assert head in str(want)
    assert str(got).startswith(str(want)[: str(want).index(head)] + head)


def test_a_duplicate_node_name_is_refused_with_onnxruntimes_class_and_message_first() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Neg", ["x"], ["t"], name="n"), helper.make_node("Neg", ["t"], ["y"], name="n")]
    model = _model([x], nodes)
    want = _raised(lambda: _reference(model))
    got = _raised(lambda: _ours(model))
    assert type(want) in type(got).__mro__ and str(got).startswith(str(want).strip())


def test_the_global_thread_pool_is_used_as_in_onnxruntime(tmp_path: Path) -> None:
    model = _model(
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_node("Gather", ["x", "i"], ["y"])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    script = textwrap.dedent(
        f"""
        import numpy as np, onnxruntime as ort, dmlshim
        ort.set_global_thread_pool_sizes(2, 2)
        feeds = {{"x": np.array([1, 2, 3], np.float32), "i": np.array([2, 0], np.int64)}}
        out = []
        for make in (lambda so: ort.InferenceSession({str(path)!r}, so, providers=["CPUExecutionProvider"]),
                     lambda so: dmlshim.InferenceSession({str(path)!r}, so)):
            so = ort.SessionOptions()
            so.use_per_session_threads = False
            out.append(make(so).run(None, feeds)[0].tolist())
            so = ort.SessionOptions()  # threads of its own: onnxruntime refuses it, so does dmlshim
            try:
                make(so)
                out.append("loaded")
            except RuntimeError as exc:
                out.append("RuntimeError")
        print(out)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ref_run, ref_own, our_run, our_own = eval(done.stdout.strip().splitlines()[-1])
    assert (our_run, our_own) == (ref_run, ref_own) and ref_own == "RuntimeError"


@pytest.mark.skipif(
    tuple(int(p) for p in onnxruntime.__version__.split(".")[:2]) < (1, 25),
    reason="onnxruntime 1.24 itself dies (SIGSEGV) binding a string tensor at a pointer: no reference to "
    "hold dmlshim to",
)
def test_binding_a_string_tensor_at_a_pointer_is_refused_as_onnxruntime_refuses_it() -> None:
    model = _model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_node("Neg", ["x"], ["y"])]
    )
    scratch = np.zeros(4, np.uint8)
    for element in (int(TensorProto.STRING), np.dtype("U1"), np.dtype("S1"), np.dtype(object)):
        theirs = _reference(model).io_binding()
        ours = _ours(model).io_binding()
        args = ("x", "cpu", 0, element, [1], scratch.ctypes.data)
        want = _raised(lambda b=theirs, a=args: b.bind_input(*a))
        got = _raised(lambda b=ours, a=args: b.bind_input(*a))
        assert isinstance(got, type(want)) and str(got).startswith(str(want))


# --- the error surface ----------------------------------------------------------------------------------


def test_errors_are_onnxruntimes_classes_and_nothing_more() -> None:
    model = _model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_node("Neg", ["x"], ["y"])],
    )
    for feed in (np.ones((2, 3), np.float64), np.ones((2, 4), np.float32), np.ones(6, np.float32)):
        want = _raised(lambda f=feed: _reference(model).run(None, {"x": f}))
        got = _raised(lambda f=feed: _ours(model).run(None, {"x": f}))
        assert isinstance(got, type(want)) and isinstance(got, DmlShimError)
        # a client's "except ValueError" around run catches what it caught under onnxruntime, no more
        assert isinstance(got, ValueError) == isinstance(want, ValueError)
        first_line = str(want).splitlines()[0]
        assert str(got).startswith(first_line), (str(got), str(want))
        assert str(got).startswith(PREFIX)
    missing_want = _raised(lambda: _reference(model).run(None, {}))
    missing_got = _raised(lambda: _ours(model).run(None, {}))
    assert isinstance(missing_got, type(missing_want)) and str(missing_got).startswith(
        str(missing_want).rstrip(".")
    )


def test_every_onnxruntime_exception_class_derives_from_exception_alone() -> None:
    # What dmlshim's combined classes may add beside dmlshim's own: onnxruntime's classes, nothing else.
    state = onnxruntime.capi.onnxruntime_pybind11_state
    for name in ("Fail", "InvalidArgument", "NoSuchFile", "InvalidGraph", "NotImplemented"):
        assert getattr(state, name).__bases__ == (Exception,)
    assert not issubclass(dmlshim.BadInputError, ValueError)


def test_a_stand_in_session_pickles_and_copies_as_onnxruntimes() -> None:
    model = _model(
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_node("Neg", ["x"], ["y"])]
    ).SerializeToString()
    theirs = _reference(model)
    ours = standin_module().InferenceSession(model)
    for call in (pickle.dumps, copy.deepcopy):
        want, got = _raised(lambda c=call: c(theirs)), _raised(lambda c=call: c(ours))
        assert type(got) is type(want) is TypeError and str(got) == str(want)
    shallow = copy.copy(ours)
    assert shallow.run(None, {"x": np.ones(1, np.float32)})[0].tolist() == [-1.0]


# --- the drop-in runner ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "own", "module", "rest"),
    [
        (["-m", "pytest", "-q", "tests/"], [], "pytest", ["-q", "tests/"]),
        (["--summary", "off", "-m", "pytest", "--version"], ["--summary", "off"], "pytest", ["--version"]),
        (
            ["--engine=customop", "-mpytest", "--summary", "x"],
            ["--engine=customop"],
            "pytest",
            ["--summary", "x"],
        ),
        (
            ["--emulate", "all", "s.py", "-m", "x", "--engine", "y"],
            ["--emulate", "all"],
            None,
            ["s.py", "-m", "x", "--engine", "y"],
        ),
    ],
)
def test_arguments_after_the_module_or_script_pass_through(
    argv: list[str], own: list[str], module: str | None, rest: list[str]
) -> None:
    assert split_argv(argv) == (own, module, rest)


def _runner(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DMLSHIM_ORT_SUMMARY": "off"}
    return subprocess.run(
        [sys.executable, "-m", "dmlshim.ort", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def test_python_m_pytest_version_runs_under_the_runner() -> None:
    want = subprocess.run(
        [sys.executable, "-m", "pytest", "--version"], capture_output=True, text=True, timeout=120
    )
    got = _runner("-m", "pytest", "--version")
    assert got.returncode == want.returncode == 0
    assert (got.stdout + got.stderr).strip() == (want.stdout + want.stderr).strip()


def test_the_engine_option_chooses_the_engine_of_emulated_sessions(tmp_path: Path) -> None:
    script = tmp_path / "which.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import onnxruntime
            from onnx import TensorProto, helper
            g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"])], "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                 helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
            s = onnxruntime.InferenceSession(m.SerializeToString(), providers=["DmlExecutionProvider"])
            print(s._engine.name, sys.argv[1:])
            """
        )
    )
    got = _runner("--engine", "cpu", str(script), "--engine", "x")
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split()[0] == "cpu" and "'--engine', 'x'" in got.stdout  # its own arguments untouched
    default = _runner(str(script))
    assert default.stdout.split()[0] != "cpu"
    bad = _runner("--engine", "nope", str(script))
    assert bad.returncode == 2 and "unknown engine 'nope'" in bad.stderr


_LOOP_SCRIPT = """
import numpy as np, onnxruntime
from onnx import TensorProto as T, helper
body = helper.make_graph(
    [helper.make_node("Gather", ["x", "i"], ["g"]), helper.make_node("Identity", ["c"], ["co"])],
    "body",
    [helper.make_tensor_value_info("it", T.INT64, []), helper.make_tensor_value_info("c", T.BOOL, [])],
    [helper.make_tensor_value_info("co", T.BOOL, []), helper.make_tensor_value_info("g", T.FLOAT, None)],
)
inputs = (("x", T.FLOAT, [4]), ("i", T.INT64, [2]), ("n", T.INT64, []), ("cond", T.BOOL, []))
g = helper.make_graph(
    [helper.make_node("Loop", ["n", "cond"], ["out"], body=body)], "g",
    [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
    [helper.make_tensor_value_info("out", T.FLOAT, None)],
)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
s = onnxruntime.InferenceSession(m.SerializeToString(), providers=["DmlExecutionProvider"])
feeds = {"x": np.arange(4, dtype=np.float32), "i": np.array([3, 1]), "n": np.array(2), "cond": np.array(True)}
out = s.run(None, feeds)[0].tolist()
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as Real  # onnxruntime's own
want = Real(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0].tolist()
print(out == want, [(r.name, r.placement) for r in s.last_run_record.nodes])
"""


def test_the_engine_option_emulates_the_gathers_inside_a_loop_body(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime_extensions")  # the custom-op engine's
    script = tmp_path / "loop.py"
    script.write_text(_LOOP_SCRIPT)
    got = _runner("--engine", "customop", str(script))
    assert got.returncode == 0, got.stderr[-2000:]
    same, nodes = got.stdout.strip().splitlines()[-1].split(" ", 1)
    assert same == "True"  # the values onnxruntime's CPU provider gives
    assert nodes == "[('Loop_0/body/Gather_0', 'dml')]"
    default = _runner(str(script))
    assert "('Loop_0/body/Gather_0', 'onnxruntime-cpu')" in default.stdout  # the default engine does not
