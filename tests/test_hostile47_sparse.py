"""hostile47: sparse tensors (a ``Constant`` with ``sparse_value``, a graph's ``sparse_initializer``, one in
an If branch) declare their dense size by their dims alone, so a 221-byte file may stand for a 2 GB
constant: onnxruntime makes it dense when it loads the model (3.9 GB peak RSS for 2 GB). With
``DMLSHIM_MEMORY_LIMIT=100000000``, ``inspect`` peaked at 4 GB and exited 0, ``validate`` at 6 GB before
refusing it "before allocating"; every command and ``InferenceSession`` now refuse it before any session is
built. Under the limit, sparse constants give onnxruntime's values in every engine (duplicate indices: the
last wins; unsorted indices; the 2-D COO form)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError
from tests.oracle import IR_VERSION
from tests.safety_helpers import run_child

LIMIT = {"DMLSHIM_MEMORY_LIMIT": "100000000"}
BIG = 250_000_000  # int64 elements: 2,000,000,000 bytes dense
X = np.arange(40, dtype=np.float32).reshape(10, 4)


def _sparse(values: list[int], indices: object, dims: list[int]) -> onnx.SparseTensorProto:
    vals = numpy_helper.from_array(np.array(values, np.int64), "c")
    idx = numpy_helper.from_array(np.array(indices, np.int64), "")
    return helper.make_sparse_tensor(vals, idx, dims)


def _model(sparse: onnx.SparseTensorProto, where: str) -> onnx.ModelProto:
    """x[N, 4] -> Gather(x, c[:k]) where ``c`` is the sparse tensor, held as ``where`` says."""
    nodes = [
        helper.make_node("Slice", ["c", "s0", "s1"], ["cs"], name="slice"),
        helper.make_node("Gather", ["x", "cs"], ["y"], axis=0, name="gather"),
    ]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "s0")]
    inits.append(numpy_helper.from_array(np.array([4], np.int64), "s1"))
    graph = helper.make_graph(
        nodes, "h47", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])], [], inits
    )
    graph.output.add().name = "y"
    if where == "constant":
        graph.node.insert(0, helper.make_node("Constant", [], ["c"], name="const", sparse_value=sparse))
    elif where == "initializer":
        graph.sparse_initializer.append(sparse)
    else:  # a Constant inside an If branch
        branch = helper.make_graph(
            [helper.make_node("Constant", [], ["c_in"], name="const", sparse_value=sparse)], "then", [], []
        )
        branch.output.add().name = "c_in"
        other = helper.make_graph(
            [
                helper.make_node(
                    "Constant", [], ["c_out"], value=numpy_helper.from_array(np.zeros(4, np.int64))
                )
            ],
            "else",
            [],
            [],
        )
        other.output.add().name = "c_out"
        inits.append(numpy_helper.from_array(np.array(True), "cond"))
        graph.initializer.append(inits[-1])
        graph.node.insert(
            0, helper.make_node("If", ["cond"], ["c"], name="if", then_branch=branch, else_branch=other)
        )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


WHERE = ["constant", "initializer", "if_branch"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("command", ["inspect", "validate", "run"])
def test_a_huge_sparse_tensor_is_refused_within_the_memory_limit(
    tmp_path: Path, where: str, command: str
) -> None:
    path = tmp_path / "sparse.onnx"
    onnx.save(_model(_sparse([3], [5], [BIG]), where), path)
    assert path.stat().st_size < 1000
    result = run_child([command, str(path)], env=LIMIT, timeout=120)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "sparse tensor" in result.stderr and "memory limit" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert result.peak_rss < 400 * 2**20, result.peak_rss  # before: 4 GB (inspect, exit 0), 6 GB (validate)


@pytest.mark.parametrize("where", WHERE)
def test_inference_session_refuses_a_huge_sparse_tensor(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT["DMLSHIM_MEMORY_LIMIT"])
    path = tmp_path / "sparse.onnx"
    onnx.save(_model(_sparse([3], [5], [BIG]), where), path)
    with pytest.raises(TooLargeError, match="dense form of 1 sparse tensor"):
        dmlshim.InferenceSession(str(path))
    with pytest.raises(TooLargeError):
        dmlshim.InferenceSession(path.read_bytes())


def test_many_small_sparse_tensors_count_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each under the limit, together over it (onnxruntime makes every one dense)."""
    model = _model(_sparse([3], [5], [8]), "constant")
    for k in range(4):
        model.graph.sparse_initializer.append(_sparse([1], [0], [4_000_000]))
        model.graph.sparse_initializer[-1].values.name = f"extra{k}"
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "100000000")  # each 32 MB, together 128 MB
    with pytest.raises(TooLargeError, match="5 sparse tensor"):
        dmlshim.InferenceSession(model.SerializeToString())


SMALL = {
    "one": ([3], [1], [8]),
    "duplicate_indices": ([3, 5], [1, 1], [8]),
    "unsorted": ([3, 5], [2, 1], [8]),
    "coo_2d": ([3], [[0]], [8]),
}


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_sparse_tensors_give_onnxruntimes_values(case: str, where: str, engine: str) -> None:
    """onnxruntime's checker refuses duplicate or unsorted indices in a branch's Constant (not at the top
    level): dmlshim then refuses too."""
    model = _model(_sparse(*SMALL[case]), where).SerializeToString()
    try:
        want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": X})
    except Exception as refused:
        assert where == "if_branch" and "sorted order" in str(refused)
        with pytest.raises(dmlshim.BadModelError, match="sorted order"):
            dmlshim.InferenceSession(model, engine=engine)
        return
    session = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(5):
        got = session.run(None, {"x": X})
        assert got[0].shape == want[0].shape and got[0].tobytes() == want[0].tobytes()


def _function_model(n: int) -> onnx.ModelProto:
    """x[N, 4] -> a local function whose body gathers x's rows by a sparse Constant of ``n`` elements."""
    body = [
        helper.make_node("Constant", [], ["s0"], value_ints=[0]),
        helper.make_node("Constant", [], ["s1"], value_ints=[3]),
        helper.make_node("Constant", [], ["c"], sparse_value=_sparse([1, 1], [1, 2], [n])),
        helper.make_node("Slice", ["c", "s0", "s1"], ["cs"]),
        helper.make_node("Gather", ["X", "cs"], ["Y"], axis=0),
    ]
    function = helper.make_function("local", "Rows", ["X"], ["Y"], body, [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("Rows", ["x"], ["y"], domain="local", name="rows")],
        "h47f",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[function])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize("command", ["inspect", "validate", "run"])
def test_a_sparse_constant_in_a_local_function_does_not_kill_the_cli(tmp_path: Path, command: str) -> None:
    """onnxruntime's session of such a model, built with optimizations off on a worker thread (the
    acceptance check's), died with SIGSEGV (exit 139) in every command; it is handed the dense form."""
    path = tmp_path / "function.onnx"
    onnx.save(_function_model(100_000), path)
    result = run_child([command, str(path)], timeout=300)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
def test_a_sparse_constant_in_a_local_function_gives_onnxruntimes_values(engine: str) -> None:
    """Every engine, also with the program's options turning optimizations off, on another thread."""
    import threading

    model = _function_model(100_000).SerializeToString()
    # ONNX: c[:3] == [0, 1, 1] (onnxruntime's own session of this sparse form crashes now and then, on
    # any thread: not built in the test process, which it would take down)
    want = X[[0, 1, 1]]
    np.testing.assert_array_equal(want[:, 0], [0.0, 4.0, 4.0])
    got: list[object] = []

    def work() -> None:
        try:
            options = dmlshim.SessionOptions()
            options.graph_optimization_level = dmlshim.GraphOptimizationLevel.ORT_DISABLE_ALL
            session = dmlshim.InferenceSession(model, options, engine=engine)
            got.extend(session.run(None, {"x": X}) for _ in range(4))
        except Exception as exc:
            got.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    for outputs in got:
        assert not isinstance(outputs, Exception), outputs
        assert outputs[0].tobytes() == want.tobytes()  # type: ignore[index]


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_a_huge_sparse_constant_in_a_local_function_is_refused_within_the_limit(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "function.onnx"
    onnx.save(_function_model(BIG), path)
    result = run_child([command, str(path)], env=LIMIT, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "function local.Rows" in result.stderr and "memory limit" in result.stderr, result.stderr
    assert result.peak_rss < 400 * 2**20, result.peak_rss


@pytest.mark.parametrize("form", ["bytes", "path"])
def test_onnxruntime_is_handed_function_constants_dense_from_bytes_and_from_a_path(
    tmp_path: Path, form: str
) -> None:
    """The crash is intermittent (it hit input generation's session, built from the model's path on the
    main thread, in one `run` of 4 under load), so what onnxruntime is handed is checked directly: the
    model from a path is handed as bytes too, its function's Constant dense, and it gives the values the
    sparse form defines (c = [0, 1, 1, 0, ...]: rows 0, 1, 1)."""
    from dmlshim.runtime.sparse_functions import dense_function_constants

    model = _function_model(100_000)
    path = tmp_path / "function.onnx"
    onnx.save(model, path)
    source, folder = dense_function_constants(model.SerializeToString() if form == "bytes" else str(path))
    assert isinstance(source, bytes) and folder is None
    dense = onnx.load_from_string(source)
    constant = next(n for n in dense.functions[0].node if n.output[0] == "c")
    assert [a.name for a in constant.attribute] == ["value"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got, x[[0, 1, 1]])
    # a model without such a Constant is handed over as given, unparsed
    plain = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], []), ir_version=IR_VERSION), plain)
    assert dense_function_constants(str(plain)) == (str(plain), None)


def test_the_functions_field_is_found_by_the_top_level_walk_and_hostile_bytes_never_raise(
    tmp_path: Path,
) -> None:
    """The walk that lets a model without local functions skip the scan for sparse Constants: onnx's own
    serialization of a model with functions holds field 25 and one without does not; broken bytes (a
    truncated varint, a length past any file, garbage) answer True ("look further"), never an exception."""
    import io

    from dmlshim.fileio.protobuf_wire import MODEL_FUNCTIONS, has_model_field
    from dmlshim.runtime.sparse_functions import dense_function_constants

    with_functions = _function_model(10).SerializeToString()
    plain = onnx.load_from_string(with_functions)
    del plain.functions[:]
    assert has_model_field(io.BytesIO(with_functions), MODEL_FUNCTIONS)
    assert not has_model_field(io.BytesIO(plain.SerializeToString()), MODEL_FUNCTIONS)
    hostile = [
        b"\x3a",  # a length-delimited field with no length
        b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # a length past any file
        b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # a varint too long
        b"\x00\x00\x00",  # field 0
        bytes(range(256)),
    ]
    for data in hostile:
        path = tmp_path / "hostile.onnx"
        path.write_bytes(data)
        assert has_model_field(io.BytesIO(data), MODEL_FUNCTIONS)
        with open(path, "rb") as f:
            assert has_model_field(f, MODEL_FUNCTIONS)
        # nothing to densify: handed to onnxruntime as given, which reports what it cannot parse
        assert dense_function_constants(data) == (data, None)
        assert dense_function_constants(str(path)) == (str(path), None)
