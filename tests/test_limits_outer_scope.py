"""Issue 35 leftover: a size-making node in a subgraph (If branch, Loop body, an If inside a Loop) whose
shape input is an *outer-scope* constant (a main-graph initializer, a main-graph ``Constant``, a Loop
body's ``Constant``) counts against the memory limit in every engine. onnx's inference does not read an
enclosing graph's values, so before this such a node had no static shape and was never checked, while
onnxruntime resolves the outer value: its peak RSS below shows it allocates the output when a run takes
the branch, and its values under the limit show it read the outer constant."""

from __future__ import annotations

import os
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
from tests.safety_helpers import REPO, run_child

LIMIT = "100000000"
BIG = 250_000_000  # int64 elements: 2 GB, 20 times the limit
OPS = ["ConstantOfShape", "Expand", "Tile", "Range"]
ENGINES = ["partitioned", "cpu", "customop"]


def _ints(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _making(op: str, length: int) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """The node making int64 ``big`` of ``length`` elements, and the constants it reads."""
    if op == "ConstantOfShape":
        value = numpy_helper.from_array(np.array([1], np.int64))
        node = helper.make_node("ConstantOfShape", ["shp"], ["big"], name="make", value=value)
        return node, [_ints("shp", [length])]
    if op == "Range":
        node = helper.make_node("Range", ["z", "lim", "step"], ["big"], name="make")
        return node, [_ints("z", 0), _ints("lim", length), _ints("step", 1)]
    node = helper.make_node(op, ["one1", "shp"], ["big"], name="make")
    return node, [_ints("one1", [1]), _ints("shp", [length])]


def _as_constants(tensors: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    return [helper.make_node("Constant", [], [t.name], name=f"k_{t.name}", value=t) for t in tensors]


def _branch(op: str, length: int, outer: str) -> tuple[onnx.GraphProto, list, list]:
    """The then-branch ``big[:2]``; the main graph's initializers and nodes holding its constants."""
    node, values = _making(op, length)
    then = helper.make_graph(
        [node, helper.make_node("Slice", ["big", "s0", "s1"], ["t_out"], name="slice")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", T.INT64, None)],
    )
    bounds = [_ints("s0", [0]), _ints("s1", [2])]
    if outer == "initializer":
        return then, values + bounds, []
    return then, bounds, _as_constants(values)


def _if_node(then: onnx.GraphProto, out: str = "r") -> onnx.NodeProto:
    zeros = numpy_helper.from_array(np.array([0, 0], np.int64))
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e_out"], value=zeros)],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", T.INT64, None)],
    )
    return helper.make_node("If", ["c"], [out], name="if", then_branch=then, else_branch=other)


def _finish(nodes: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(
        [*nodes, helper.make_node("Gather", ["x", "r"], ["y"], axis=0, name="gather")],
        "outer",
        [
            helper.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("c", T.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def if_model(op: str, length: int, outer: str = "initializer") -> onnx.ModelProto:
    """x[N, 4], c -> Gather(x, If(c, op(...outer constants...)[:2], [0, 0]))."""
    then, inits, nodes = _branch(op, length, outer)
    return _finish([*nodes, _if_node(then)], inits)


def loop_model(op: str, length: int, nested: str | None = None) -> onnx.ModelProto:
    """A one-trip Loop whose body makes ``big`` from main-graph initializers; ``nested``: inside an If of
    the body instead, its constants the main graph's (``"main"``) or the body's own ``Constant`` nodes
    (``"body"``). The Loop's output is its carried [2] value: ``big[:2]`` (or [0, 0] when c is false)."""
    node, values = _making(op, length)
    bounds = [_ints("s0", [0]), _ints("s1", [2])]
    cond = helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond")
    if nested is None:
        inner = [node, helper.make_node("Slice", ["big", "s0", "s1"], ["b_out"], name="slice")]
        inner.append(helper.make_node("Where", ["c", "b_out", "carried"], ["next"], name="pick"))
        body_nodes, inits = inner, values + bounds
    else:
        then, _, _ = _branch(op, length, "initializer")
        body_nodes = [_if_node(then, "next")]
        if nested == "body":
            body_nodes = _as_constants(values) + body_nodes
            inits = bounds
        else:
            inits = values + bounds
    body = helper.make_graph(
        [*body_nodes, cond],
        "body",
        [
            helper.make_tensor_value_info("iter", T.INT64, []),
            helper.make_tensor_value_info("cond_in", T.BOOL, []),
            helper.make_tensor_value_info("carried", T.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", T.BOOL, []),
            helper.make_tensor_value_info("next", T.INT64, [2]),
        ],
    )
    loop = helper.make_node("Loop", ["trips", "", "start"], ["r"], name="loop", body=body)
    return _finish([loop], [*inits, _ints("trips", 1), _ints("start", [0, 0])])


MODELS = {
    **{f"if-{op}-initializer": (lambda n, op=op: if_model(op, n)) for op in OPS},
    **{f"if-{op}-constant": (lambda n, op=op: if_model(op, n, "constant")) for op in OPS},
    **{f"loop-{op}": (lambda n, op=op: loop_model(op, n)) for op in OPS},
    "if-in-loop-main": lambda n: loop_model("ConstantOfShape", n, "main"),
    "if-in-loop-body": lambda n: loop_model("Expand", n, "body"),
}
WHERE = {"if": "if/then_branch/make", "loop": "loop/body/make", "if-in-loop": "loop/body/if/then_branch/make"}


def _where(case: str) -> str:
    return WHERE["if-in-loop" if case.startswith("if-in-loop") else case.split("-")[0]]


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(MODELS))
def test_refused_when_the_session_is_built(limited: None, engine: str, case: str) -> None:
    import dmlshim
    from dmlshim.errors import TooLargeError

    model = MODELS[case](BIG).SerializeToString()
    with pytest.raises(TooLargeError) as caught:
        dmlshim.InferenceSession(model, engine=engine)
    exc = caught.value
    assert (exc.node, exc.tensor, exc.value) == (_where(case), "big", BIG * 8)
    assert exc.op_type in OPS and "memory limit" in str(exc) and "[250000000]" in str(exc)
    assert "before allocating" in str(exc)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(MODELS))
def test_under_the_limit_the_values_are_onnxruntimes(limited: None, engine: str, case: str) -> None:
    """onnxruntime reads the outer constant (its ``big[:2]`` is [1, 1] or [0, 1]); dmlshim agrees."""
    import dmlshim

    model = MODELS[case](1000).SerializeToString()
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model, engine=engine)
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        assert session.run(None, feeds)[0].tobytes() == oracle.run(None, feeds)[0].tobytes()


def test_the_directml_engine_checks_first(limited: None) -> None:
    """The directml engine refuses before its device (or Wine host) is started."""
    import dmlshim
    from dmlshim.directml.engine import dml_available, linux_stack_available
    from dmlshim.errors import TooLargeError

    if not (dml_available() or linux_stack_available()):
        pytest.skip("no DirectML: neither DmlExecutionProvider nor the Linux Wine stack")
    with pytest.raises(TooLargeError) as caught:
        dmlshim.InferenceSession(if_model("Range", BIG, "constant").SerializeToString(), engine="directml")
    assert caught.value.node == "if/then_branch/make"


_PEAK = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnxruntime as ort
    s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    s.run(None, {"x": np.zeros((3, 4), np.float32), "c": np.array(True)})
    with open("/proc/self/status") as f:
        print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak RSS read from /proc")
def test_onnxruntime_allocates_what_is_refused(tmp_path: Path) -> None:
    """The refusal is not of a value onnxruntime never makes: its session, run taking the branch, peaks
    above the 200 MB ``big`` a 25,000,000-element ConstantOfShape of a main-graph initializer needs."""
    length = 25_000_000
    path = tmp_path / "m.onnx"
    onnx.save(if_model("ConstantOfShape", length), path)
    result = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300, check=True
    )
    assert int(result.stdout.split()[-1]) * 1024 > length * 8
    env = {**os.environ, "DMLSHIM_MEMORY_LIMIT": LIMIT}
    result = run_child(["run", str(path), "--engine", "cpu"], env=env, timeout=300)
    assert result.returncode == 2 and "if/then_branch/make" in result.stderr, result.stderr[-2000:]
    assert result.peak_rss < length * 8


@pytest.mark.parametrize("command", ["validate", "run"])
def test_input_generation_refuses_before_any_trial_run(tmp_path: Path, command: str) -> None:
    path = tmp_path / "big.onnx"
    onnx.save(loop_model("Tile", BIG, "main"), path)
    result = run_child([command, str(path)], env={"DMLSHIM_MEMORY_LIMIT": LIMIT}, timeout=300)
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    assert "loop/body/if/then_branch/make" in result.stderr and "memory limit" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.peak_rss < 700 * 2**20, result.peak_rss


_DROP_IN = textwrap.dedent(
    """
    import sys
    import dmlshim
    dmlshim.install(engine=sys.argv[2], emulate="all", summary="off", children=False)
    import onnxruntime
    try:
        onnxruntime.InferenceSession(sys.argv[1])
    except Exception as exc:
        print(type(exc).__name__, exc, file=sys.stderr)
        sys.exit(2)
    """
)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_drop_in_refuses(tmp_path: Path, engine: str) -> None:
    """``dmlshim.install()`` then onnxruntime's own ``InferenceSession`` call."""
    path = tmp_path / "branch.onnx"
    onnx.save(if_model("Expand", BIG, "constant"), path)
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), "DMLSHIM_MEMORY_LIMIT": LIMIT}
    result = subprocess.run(
        [sys.executable, "-c", _DROP_IN, str(path), engine],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "TooLargeError" in result.stderr and "if/then_branch/make" in result.stderr


def test_a_large_outer_weight_is_not_copied_into_a_branch() -> None:
    """Only small constants (shapes, counts, bounds) are made visible to a branch's inference."""
    from dmlshim.model.outer_constants import MAX_ELEMENTS, with_outer_constants

    model = if_model("Expand", 1000)
    model.graph.initializer.append(_ints("wide", np.zeros(MAX_ELEMENTS + 1)))
    then = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
    then.node[0].input[0] = "wide"
    copy = with_outer_constants(model)
    assert copy is not None
    branch = next(a.g for a in copy.graph.node[0].attribute if a.name == "then_branch")
    assert [t.name for t in branch.initializer] == ["s0", "s1", "shp"]  # never "wide"
    assert with_outer_constants(_finish([], [])) is None  # no subgraph: nothing to copy
