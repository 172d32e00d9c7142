"""hostile47: a value whose size follows from the model alone (a Range, ConstantOfShape or Expand of
constants, 2 GB) in a model with a symbolic input. ``validate`` and ``run`` generate the inputs by trying
candidates on onnxruntime, and each trial run allocated the 2 GB value: with
``DMLSHIM_MEMORY_LIMIT=100000000`` both peaked at 2.1 GB before refusing it "before allocating". The static
sizes are now checked before the first trial run; under the limit, the model still runs as onnxruntime
runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from tests.oracle import IR_VERSION
from tests.safety_helpers import run_child

LIMIT = {"DMLSHIM_MEMORY_LIMIT": "100000000"}


def _ints(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _model(op: str, length: int) -> onnx.ModelProto:
    """x[N, 4] -> Gather(x, r[:2]) where ``r`` is an int64 vector of ``length`` made by ``op``."""
    if op == "Range":
        source = helper.make_node("Range", ["z", "lim", "one"], ["r"], name="make")
        inits = [_ints("z", 0), _ints("lim", length), _ints("one", 1)]
    elif op == "ConstantOfShape":
        value = numpy_helper.from_array(np.array([1], np.int64))
        source = helper.make_node("ConstantOfShape", ["shp"], ["r"], name="make", value=value)
        inits = [_ints("shp", [length])]
    else:
        source = helper.make_node("Expand", ["one1", "shp"], ["r"], name="make")
        inits = [_ints("one1", [1]), _ints("shp", [length])]
    nodes = [
        source,
        helper.make_node("Slice", ["r", "s0", "s1"], ["rs"], name="slice"),
        helper.make_node("Gather", ["x", "rs"], ["y"], axis=0, name="gather"),
    ]
    inits += [_ints("s0", [0]), _ints("s1", [2])]
    graph = helper.make_graph(
        nodes,
        "h47",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


OPS = ["Range", "ConstantOfShape", "Expand"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_static_value_over_the_limit_is_refused_before_any_trial_run(
    tmp_path: Path, op: str, command: str
) -> None:
    path = tmp_path / "big.onnx"
    onnx.save(_model(op, 250_000_000), path)
    result = run_child([command, str(path)], env=LIMIT, timeout=300)
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    assert "output 'r' of shape [250000000]" in result.stderr and "memory limit" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.peak_rss < 400 * 2**20, result.peak_rss  # before: 2.1 GB


@pytest.mark.parametrize("op", OPS)
def test_under_the_limit_the_model_runs_as_onnxruntime_runs_it(tmp_path: Path, op: str) -> None:
    path = tmp_path / "small.onnx"
    onnx.save(_model(op, 1000), path)
    result = run_child(["validate", str(path)], env=LIMIT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "verdict: MATCH" in result.stdout
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "in.npz", x=x)
    out = tmp_path / "out.npz"
    result = run_child(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(out)], env=LIMIT)
    assert result.returncode == 0, result.stderr[-2000:]
    with np.load(out) as got:
        assert got["y"].tobytes() == want.tobytes()


def _declared_model(where: str, rows: int) -> onnx.ModelProto:
    """Gather(x, i) -> Neg, whose graph output (or the gather's ``value_info``) declares ``rows`` rows: the
    model's word, which onnxruntime does not take (it runs the model and warns)."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="gather"),
        helper.make_node("Neg", ["g"], ["y"], name="neg"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
        helper.make_tensor_value_info("i", T.INT64, ["K"]),
    ]
    out_rows: int | str = rows if where == "output" else "K"
    graph = helper.make_graph(
        nodes, "h47", inputs, [helper.make_tensor_value_info("y", T.FLOAT, [out_rows, 4])]
    )
    if where == "value_info":
        graph.value_info.append(helper.make_tensor_value_info("g", T.FLOAT, [rows, 4]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu"])
@pytest.mark.parametrize("where", ["output", "value_info"])
def test_a_declared_shape_that_lies_is_not_refused(where: str, engine: str) -> None:
    """16 GB declared for a [2, 4] value: the partitioned engine refused it on every machine below that."""
    import dmlshim

    model = _declared_model(where, 10_000_000_000).SerializeToString()
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    feeds = {"x": x, "i": np.array([1, 2])}
    (want,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    session = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(4):
        (got,) = session.run(None, feeds)
        assert got.shape == (2, 4) and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_declared_shape_that_lies_passes_the_cli_under_the_limit(tmp_path: Path, command: str) -> None:
    path = tmp_path / "declared.onnx"
    onnx.save(_declared_model("value_info", 1_000_000_000), path)
    result = run_child([command, str(path)], env=LIMIT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_declared_shape_that_inference_confirms_is_still_refused(tmp_path: Path) -> None:
    """The Range's output is the graph output, declared with the size inference finds too."""
    model = _model("Range", 250_000_000)
    model.graph.output.append(helper.make_tensor_value_info("r", T.INT64, [250_000_000]))
    path = tmp_path / "declared_range.onnx"
    onnx.save(model, path)
    result = run_child(["validate", str(path)], env=LIMIT, timeout=300)
    assert result.returncode == 2 and "output 'r' of shape [250000000]" in result.stderr, result.stderr[
        -2000:
    ]
    assert result.peak_rss < 400 * 2**20, result.peak_rss


def _if_model(length: int, declared: int | None = None) -> onnx.ModelProto:
    """x[N, 4] -> Gather(x, If(c, ConstantOfShape([length])[:2], [0, 0])); ``declared``: a value_info in
    the then-branch declaring ``big`` of that many elements (the model's word only)."""
    one = numpy_helper.from_array(np.array([1], np.int64))
    then = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shp"], ["big"], name="make", value=one),
            helper.make_node("Slice", ["big", "s0", "s1"], ["t_out"], name="slice"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", T.INT64, None)],
        [_ints("shp", [length]), _ints("s0", [0]), _ints("s1", [2])],
    )
    if declared is not None:
        then.value_info.append(helper.make_tensor_value_info("big", T.INT64, [declared]))
    zeros = numpy_helper.from_array(np.array([0, 0], np.int64))
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e_out"], value=zeros)],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", T.INT64, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("If", ["c"], ["r"], name="if", then_branch=then, else_branch=other),
            helper.make_node("Gather", ["x", "r"], ["y"], axis=0, name="gather"),
        ],
        "h47",
        [
            helper.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("c", T.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def test_a_static_value_over_the_limit_inside_an_if_branch_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The branch's 2 GB ConstantOfShape was allocated by onnxruntime on a run taking the branch (2.1 GB
    peak RSS under a 100 MB limit); refused when the session is built, naming the branch's node."""
    import dmlshim
    from dmlshim.errors import TooLargeError

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT["DMLSHIM_MEMORY_LIMIT"])
    with pytest.raises(TooLargeError, match="if/then_branch") as caught:
        dmlshim.InferenceSession(_if_model(250_000_000).SerializeToString())
    assert caught.value.tensor == "big"


@pytest.mark.parametrize("declared", [None, 10_000_000_000])
def test_an_if_branch_under_the_limit_runs_as_onnxruntime(declared: int | None) -> None:
    """Also when the branch's value_info declares 10^10 elements it never has."""
    import dmlshim

    model = _if_model(1000, declared).SerializeToString()
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model)
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    for c in (False, True, True, False):
        feeds = {"x": x, "c": np.array(c)}
        assert session.run(None, feeds)[0].tobytes() == oracle.run(None, feeds)[0].tobytes()
