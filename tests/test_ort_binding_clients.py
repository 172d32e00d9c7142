"""What onnxruntime users' programs read and catch, compared call by call with onnxruntime on the same
model and options: each expectation is what onnxruntime itself answers in the same test."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim


def _model(outputs_declared: bool = True) -> bytes:
    out_shape = ["K", 4] if outputs_declared else None
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["o"], axis=0, name="g"),
            helper.make_node("Relu", ["o"], ["r"], name="relu"),
        ],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["K"]),
        ],
        [
            helper.make_tensor_value_info("o", TensorProto.FLOAT, out_shape),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
        ],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)]
    ).SerializeToString()


def _options(**overrides: int) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    for name, value in overrides.items():
        so.add_free_dimension_override_by_name(name, value)
    return so


@pytest.mark.parametrize("overrides", [{}, {"K": 3}, {"N": 5, "K": 2}])
@pytest.mark.parametrize("declared", [True, False])
def test_free_dimension_overrides_fix_the_reported_output_shapes(
    overrides: dict[str, int], declared: bool
) -> None:
    model = _model(declared)
    theirs = onnxruntime.InferenceSession(model, _options(**overrides), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(model, _options(**overrides))
    assert [a.shape for a in ours.get_inputs()] == [a.shape for a in theirs.get_inputs()]
    assert [a.shape for a in ours.get_outputs()] == [a.shape for a in theirs.get_outputs()]
    if overrides.get("K") == 3:
        assert [a.shape for a in theirs.get_outputs()] == [[3, 4], [3, 4]]  # the case that was ["K", 4]
    # the model's own declared shapes are left as they were for the next session
    plain = dmlshim.InferenceSession(model, _options())
    assert [a.shape for a in plain.get_outputs()] == [["K", 4], ["K", 4]]


@pytest.mark.parametrize("writes", ["profile", "optimized model"])
def test_free_dimension_overrides_hold_when_the_options_write_files(writes: str, tmp_path: Path) -> None:
    model = _model(True)
    sessions = []
    for side, make in (("theirs", onnxruntime.InferenceSession), ("ours", dmlshim.InferenceSession)):
        so = _options(N=5, K=2)
        if writes == "profile":
            so.enable_profiling = True
            so.profile_file_prefix = str(tmp_path / side)
        else:
            so.optimized_model_filepath = str(tmp_path / f"{side}.onnx")
        sessions.append(make(model, so, providers=["CPUExecutionProvider"]))
    theirs, ours = sessions
    assert [a.shape for a in theirs.get_inputs()] == [[5, 4], [2]]
    assert [a.shape for a in ours.get_inputs()] == [a.shape for a in theirs.get_inputs()]
    assert [a.shape for a in ours.get_outputs()] == [a.shape for a in theirs.get_outputs()]
    d = np.arange(20, dtype=np.float32).reshape(5, 4)
    good = {"d": d, "i": np.array([4, 1], np.int64)}
    np.testing.assert_array_equal(ours.run(None, good)[1], theirs.run(None, good)[1])
    bad = {"d": np.zeros((6, 4), np.float32), "i": np.array([4, 1], np.int64)}
    for session in (theirs, ours):  # the override makes a 6-row feed one onnxruntime refuses
        with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument):
            session.run(None, bad)
    if writes == "profile":
        assert Path(ours.end_profiling()).is_file() and Path(theirs.end_profiling()).is_file()
    else:
        assert (tmp_path / "ours.onnx").is_file() and (tmp_path / "theirs.onnx").is_file()


def _gather_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["o"], axis=0, name="g")],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, ["K"]),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, ["K", 4])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


D = np.arange(20, dtype=np.float32).reshape(5, 4)
I = np.array([4, 0], dtype=np.int64)  # noqa: E741
ASYNC_CASES = {
    "ok": (None, {"d": D, "i": I}),
    "unknown output": (["nope"], {"d": D, "i": I}),
    "wrong dtype": (None, {"d": D.astype(np.float64), "i": I}),
    "wrong rank": (None, {"d": D[None], "i": I}),
    "unknown input": (None, {"d": D, "i": I, "nope": I}),
    "index out of range": (None, {"d": D, "i": np.array([9], np.int64)}),
    "missing input": (None, {"d": D}),
}


def _run_async(session: Any, outputs: list[str] | None, feeds: dict[str, Any]) -> tuple[str, Any]:
    """("sync", exception class) when run_async raises, else ("callback", (outputs, user data, error?))."""
    done = threading.Event()
    got: list[Any] = []

    def callback(results: list[Any], user_data: Any, error: str) -> None:
        got.append(([np.asarray(r) for r in results], user_data, bool(error)))
        done.set()

    try:
        session.run_async(outputs, feeds, callback, "data")
    except Exception as exc:  # the class is what is compared
        return "sync", exc
    assert done.wait(60), "the callback was never called"
    return "callback", got[0]


@pytest.mark.parametrize("case", sorted(ASYNC_CASES))
@pytest.mark.parametrize("threads", [2, 1])
def test_run_async_reports_errors_where_onnxruntime_does(case: str, threads: int) -> None:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    model = _gather_model()
    outputs, feeds = ASYNC_CASES[case]
    theirs = _run_async(
        onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"]), outputs, feeds
    )
    ours = _run_async(dmlshim.InferenceSession(model, so), outputs, feeds)
    assert ours[0] == theirs[0]
    if theirs[0] == "sync":
        assert isinstance(ours[1], type(theirs[1]))
    else:
        (their_out, their_data, their_err), (our_out, our_data, our_err) = theirs[1], ours[1]
        assert (our_data, our_err) == (their_data, their_err)
        assert len(our_out) == len(their_out)
        for a, b in zip(our_out, their_out, strict=True):
            np.testing.assert_array_equal(a, b)


def _bfloat16_model() -> bytes:
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["d"], ["db"], to=TensorProto.BFLOAT16),
            helper.make_node("Gather", ["db", "i"], ["o"], axis=0, name="g"),
            helper.make_node("Cast", ["o"], ["of"], to=TensorProto.FLOAT),
        ],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("of", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("o", TensorProto.BFLOAT16, [2, 4]),
        ],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def _raised(call: Any) -> BaseException:
    try:
        call()
    except Exception as exc:  # the class is what is compared
        return exc
    raise AssertionError("no exception")


def test_a_bfloat16_output_run_cannot_return_is_onnxruntimes_runtime_error() -> None:
    model = _bfloat16_model()
    theirs = onnxruntime.InferenceSession(model, _options(), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(model, _options())
    feeds = {"d": D, "i": I}
    np.testing.assert_array_equal(ours.run(["of"], feeds)[0], theirs.run(["of"], feeds)[0])
    their_error = _raised(lambda: theirs.run(None, feeds))
    our_error = _raised(lambda: ours.run(None, feeds))
    assert type(their_error) is RuntimeError  # onnxruntime's Python layer, no status class
    assert isinstance(our_error, RuntimeError) and isinstance(our_error, dmlshim.DmlShimError)
    assert "bfloat16" in str(our_error)


def test_optional_and_sequence_values_report_onnxruntimes_shapes() -> None:
    tensor = helper.make_tensor_type_proto(TensorProto.FLOAT, ["n", 4])
    types = {
        "opt": helper.make_optional_type_proto(tensor),
        "seq": helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 4])),
        "optseq": helper.make_optional_type_proto(helper.make_sequence_type_proto(tensor)),
    }
    graph = helper.make_graph(
        [helper.make_node("Identity", [f"{n}_in"], [n]) for n in types],
        "g",
        [helper.make_value_info(f"{n}_in", t) for n, t in types.items()],
        [helper.make_value_info(n, t) for n, t in types.items()],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    data = model.SerializeToString()
    theirs = onnxruntime.InferenceSession(data, _options(), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(data, _options())
    for mine, their in ((ours.get_inputs(), theirs.get_inputs()), (ours.get_outputs(), theirs.get_outputs())):
        assert [(a.name, a.type, a.shape) for a in mine] == [(a.name, a.type, a.shape) for a in their]
    assert theirs.get_outputs()[0].shape == ["n", 4]  # the optional tensor's own shape


def _bits(value: Any) -> np.ndarray:
    """The raw 16-bit words of a CPU bfloat16 OrtValue (numpy cannot hold it; its memory can be read)."""
    count = int(np.prod(value.shape()))
    buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    return np.frombuffer(buffer, dtype=np.uint16, count=count).copy().reshape(value.shape())


def _bfloat16_gather_scatter_model() -> bytes:
    bf16 = TensorProto.BFLOAT16
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["o"], axis=0, name="gather_bf16"),
            helper.make_node("ScatterND", ["d", "si", "u"], ["p"], name="scatter_bf16"),
            helper.make_node("Cast", ["o"], ["of"], to=TensorProto.FLOAT),
        ],
        "bf16",
        [
            helper.make_tensor_value_info("d", bf16, [4, 2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [3]),
            helper.make_tensor_value_info("si", TensorProto.INT64, [1, 1]),
            helper.make_tensor_value_info("u", bf16, [1, 2]),
        ],
        [
            helper.make_tensor_value_info("o", bf16, [3, 2]),
            helper.make_tensor_value_info("p", bf16, [4, 2]),
            helper.make_tensor_value_info("of", TensorProto.FLOAT, [3, 2]),
        ],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def test_bfloat16_ortvalue_feeds_and_outputs_as_onnxruntime() -> None:
    # bfloat16 words of 1.5, -2, 3.25, 4, 0.5, 6, 7, -1 and of 9, 10
    words = np.array([0x3FC0, 0xC000, 0x4050, 0x4080, 0x3F00, 0x40C0, 0x40E0, 0xBF80], np.uint16).reshape(
        4, 2
    )
    update = np.array([[0x4110, 0x4120]], np.uint16)

    def feeds() -> dict[str, Any]:
        make = onnxruntime.OrtValue
        return {
            "d": make.ortvalue_from_numpy_with_onnx_type(words, TensorProto.BFLOAT16),
            "i": make.ortvalue_from_numpy(np.array([3, 0, -1], np.int64)),
            "si": make.ortvalue_from_numpy(np.array([[2]], np.int64)),
            "u": make.ortvalue_from_numpy_with_onnx_type(update, TensorProto.BFLOAT16),
        }

    model = _bfloat16_gather_scatter_model()
    theirs = onnxruntime.InferenceSession(model, _options(), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(model, _options())
    want = theirs.run_with_ort_values(None, feeds())
    got = ours.run_with_ort_values(None, feeds())
    assert [v.data_type() for v in got] == [v.data_type() for v in want]
    for g, w in zip(got[:2], want[:2], strict=True):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    np.testing.assert_array_equal(got[2].numpy(), want[2].numpy())
    np.testing.assert_array_equal(ours.run(["of"], feeds())[0], theirs.run(["of"], feeds())[0])
    # run() cannot return a bfloat16 output, nor take a numpy bfloat16 array: RuntimeErrors in both
    assert type(_raised(lambda: theirs.run(None, feeds()))) is RuntimeError
    assert isinstance(_raised(lambda: ours.run(None, feeds())), RuntimeError)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    raw = {**{k: v.numpy() for k, v in feeds().items() if k in ("i", "si")}}
    raw.update(d=words.view(ml_dtypes.bfloat16), u=update.view(ml_dtypes.bfloat16))
    assert type(_raised(lambda: theirs.run(["of"], raw))) is RuntimeError
    error = _raised(lambda: ours.run(["of"], raw))
    assert isinstance(error, RuntimeError) and "ortvalue_from_numpy_with_onnx_type" in str(error)


def test_the_exit_summary_counts_runs_that_raised() -> None:
    from dmlshim.ort import standin_module, tracking

    model = _gather_model()
    bad = {"d": D, "i": np.array([9], np.int64)}
    theirs = onnxruntime.InferenceSession(model, _options(), providers=["CPUExecutionProvider"])
    their_error = _raised(lambda: theirs.run(None, bad))
    session = standin_module().InferenceSession(model, _options())
    session.run(None, {"d": D, "i": I})
    our_error = _raised(lambda: session.run(None, bad))
    assert isinstance(our_error, type(their_error))  # onnxruntime's InvalidArgument
    tally = session._tally
    assert (tally.runs, tally.failed_runs) == (1, 1)
    assert tally.first_error.startswith("IndexOutOfRangeError: node 'g', op Gather")
    summary = tracking.merge([tracking.TRACKER.to_json()])
    mine = [s for s in summary["sessions"] if s["model"] == "<in-memory model g>" and s["failed_runs"]]
    assert mine and summary["totals"]["failed_runs"] >= 1
    text = tracking.render(summary, "dmlshim")
    assert "more raised" in text and "run(s) raised (first: IndexOutOfRangeError" in text


FEED_KINDS: dict[str, Any] = {
    "python int": 2,
    "numpy scalar": np.int64(2),
    "tuple": (2, 0),
    "memoryview": memoryview(np.array([2, 0], np.int64)),
    "bytes": b"ab",
    "list": [2, 0],
    "nested list": [[2], [0]],
    "0-d array": np.array(2),
    "array": np.array([2, 0], np.int64),
}


@pytest.mark.parametrize("kind", sorted(FEED_KINDS))
def test_tensor_feeds_onnxruntime_refuses_are_refused_with_its_class(kind: str) -> None:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["o"], axis=0, name="g")],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    data = model.SerializeToString()
    feeds = {"d": D, "i": FEED_KINDS[kind]}
    theirs = onnxruntime.InferenceSession(data, _options(), providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(data, _options())
    try:
        want = theirs.run(None, feeds)[0]
    except RuntimeError as their_error:
        our_error = _raised(lambda: ours.run(None, feeds))
        assert isinstance(our_error, type(their_error)) and isinstance(our_error, dmlshim.BadInputError)
        assert "numpy.asarray" in str(our_error)
    else:
        np.testing.assert_array_equal(ours.run(None, feeds)[0], want)


def test_keyword_arguments_onnxruntime_ignores_run_with_a_warning_at_the_callers_line() -> None:
    model = _gather_model()
    feeds = {"d": D, "i": I}
    want = onnxruntime.InferenceSession(model, _options(), providers=["CPUExecutionProvider"], bogus=1).run(
        None, feeds
    )
    with pytest.warns(UserWarning, match="ignores the keyword argument") as seen:
        ours = dmlshim.InferenceSession(model, _options(), bogus=1)
    np.testing.assert_array_equal(ours.run(None, feeds)[0], want[0])
    with pytest.warns(UserWarning, match="not available to onnxruntime") as seen_provider:
        dmlshim.InferenceSession(model, _options(), providers=["NoSuchExecutionProvider"])
    for warning in (*seen, *seen_provider):
        assert warning.filename == __file__  # the program's line, not dmlshim's
    with pytest.raises(dmlshim.BadInputError, match="unknown keyword argument"):
        dmlshim.InferenceSession(model, _options(), index_mdoe="clamp")  # dmlshim's own, misspelt


def test_a_run_terminated_by_its_run_options_is_onnxruntimes_fail_not_a_bad_input() -> None:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    from dmlshim.execute.plan.sessions import ort_run_error

    model = _gather_model()
    feeds = {"d": D, "i": I}
    stop = onnxruntime.RunOptions()
    stop.terminate = True
    theirs = onnxruntime.InferenceSession(model, _options(), providers=["CPUExecutionProvider"])
    their_error = _raised(lambda: theirs.run(None, feeds, stop))
    assert type(their_error) is state.Fail
    # what a CPU partition's onnxruntime call raises when terminate is set while the run is under way
    wrapped = ort_run_error(their_error, "onnxruntime failed in CPU partition 0")
    assert not isinstance(wrapped, dmlshim.BadInputError) and "RunOptions.terminate" in str(wrapped)
    ours = dmlshim.InferenceSession(model, _options())
    assert isinstance(_raised(lambda: ours.run(None, feeds, stop)), state.Fail)
    stop.terminate = False
    np.testing.assert_array_equal(ours.run(None, feeds, stop)[0], theirs.run(None, feeds, stop)[0])


@pytest.mark.parametrize("model", [None, 42, 3.5])
def test_a_model_of_the_wrong_type_is_onnxruntimes_type_error(model: Any) -> None:
    their_error = _raised(lambda: onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]))
    assert type(their_error) is TypeError
    our_error = _raised(lambda: dmlshim.InferenceSession(model))
    assert isinstance(our_error, TypeError) and isinstance(our_error, dmlshim.BadModelError)


def test_the_command_gives_the_script_an_absolute_file_as_python_does(tmp_path: Path) -> None:
    script = tmp_path / "where.py"
    script.write_text(
        "import os, sys\nos.chdir('/')\nprint(os.path.isfile(__file__), os.path.isabs(__file__))\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(Path(dmlshim.__file__).resolve().parent.parent)
    env["DMLSHIM_ORT_SUMMARY"] = "off"
    runs = [
        subprocess.run(
            [sys.executable, *args, "where.py"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        for args in ([], ["-m", "dmlshim.ort"])
    ]
    assert [r.stdout for r in runs] == ["True True\n", "True True\n"], runs[1].stderr


FORK_SCRIPT = """
import json, multiprocessing, sys
import numpy as np
import onnxruntime as ort

SESSION = ort.InferenceSession(sys.argv[1], providers=["DmlExecutionProvider", "CPUExecutionProvider"])


def work(i):
    return np.asarray(SESSION.run(None, {"d": np.arange(20, dtype=np.float32).reshape(5, 4),
                                         "i": np.array([i % 5], np.int64)})[0]).tolist()


if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(work, range(4))
    print(json.dumps(results))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_forked_workers_runs_of_the_parents_session_are_counted(tmp_path: Path) -> None:
    model = tmp_path / "gather.onnx"
    model.write_bytes(_gather_model())
    script = tmp_path / "fork_script.py"
    script.write_text(FORK_SCRIPT, encoding="utf-8")
    summary_file = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(Path(dmlshim.__file__).resolve().parent.parent)
    command = ["-m", "dmlshim.ort", "--summary", "off", "--summary-file", str(summary_file)]
    # Bounded: once in many CI runs a pool worker has outlived the pool's SIGTERM (stop 46's closing
    # note); a hang here must fail this test, not stop the suite.
    proc = subprocess.run(
        [sys.executable, *command, str(script), str(model)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = [theirs.run(None, {"d": D, "i": np.array([i % 5], np.int64)})[0].tolist() for i in range(4)]
    assert json.loads(proc.stdout) == want
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    # one session (made in the parent) whose runs all happened in the forked workers
    assert summary["totals"]["sessions"] == 1 and summary["totals"]["runs"] == 4
    (node,) = summary["sessions"][0]["nodes"]
    assert node["runs"] == {"dml": 4}


def test_install_after_the_program_imported_onnxruntime_says_so(tmp_path: Path) -> None:
    late = "import onnxruntime\nimport dmlshim\ndmlshim.install()\n"
    early = "import dmlshim\ndmlshim.install()\nimport onnxruntime\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DMLSHIM_ORT_")}
    env["PYTHONPATH"] = str(Path(dmlshim.__file__).resolve().parent.parent)
    env["DMLSHIM_ORT_SUMMARY"] = "off"
    runs = {
        name: subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        for name, code in (("late", late), ("early", early))
    }
    assert "dmlshim.install() came after __main__ imported onnxruntime" in runs["late"].stderr
    assert "UserWarning" not in runs["early"].stderr, runs["early"].stderr


def _matmul_add_model() -> bytes:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["g"], axis=0, name="g"),
            helper.make_node("MatMul", ["g", "w"], ["m"], name="mm"),
            helper.make_node("Add", ["m", "b"], ["y"], name="add"),
        ],
        "mm",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [5, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        weights,
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


@pytest.mark.parametrize("disabled", [[], ["MatMulAddFusion"]])
def test_disabled_optimizers_reach_onnxruntime_as_in_its_own_session(
    tmp_path: Path, disabled: list[str]
) -> None:
    # onnxruntime.transformers.optimizer passes disabled_optimizers= and reads the optimized model back
    model = _matmul_add_model()
    written = {}
    for name, make in (("theirs", onnxruntime.InferenceSession), ("ours", dmlshim.InferenceSession)):
        so = _options()
        so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
        # onnxruntime on its CPU; dmlshim with the Gather emulated (its partitions built as onnxruntime's)
        providers = ["CPUExecutionProvider"] if name == "theirs" else None
        session = make(model, so, providers=providers, disabled_optimizers=disabled)
        written[name] = sorted(n.op_type for n in onnx.load(str(tmp_path / f"{name}.onnx")).graph.node)
        written[name + "_run"] = session.run(None, {"d": D, "i": I})[0]
    assert written["ours"] == written["theirs"]
    assert ("Gemm" in written["theirs"]) == (not disabled)  # the fusion the option turns off
    np.testing.assert_array_equal(written["ours_run"], written["theirs_run"])
