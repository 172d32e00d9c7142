"""Issue 35 (round 52): sizes computed from the feeds through the ops round 51 left out, under the limit.

A size made through ``Where`` and the comparisons, ``ReduceProd`` of a shape, ``Mod``/``Max``/``Min``,
``Abs``/``Neg``, a reduction over a fed tensor of more than 64 elements, or inside the taken branch of an
``If``: fed so that the sized node makes ``[20000, 20000]`` (1.6 GB float32; an int64 ``Range`` of 4 * 10^8,
3.2 GB), every engine and the drop-in let onnxruntime allocate it under ``DMLSHIM_MEMORY_LIMIT=100000000``
(peaks 1672 MB, 6442 MB for the Range, measured before this round). Now refused before any engine runs,
naming the node (peak under 400 MB in a child process); small feeds give onnxruntime CPU's values; the
computed values themselves are onnxruntime's, and what cannot be computed exactly leaves the model unrefused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import TooLargeError
from dmlshim.execute.plan.computed_values import ComputedValues
from dmlshim.execute.plan.fed_sizes import FedSizes

from .computed_sizes52_models import CASES, feeds, model
from .computed_sizes_child import gives_onnxruntimes_values, run_case
from .oracle import ort_session
from .safety_helpers import run_child

ROOT = Path(__file__).resolve().parents[1]
LIMIT = "100000000"
ENGINES = ("partitioned", "customop", "cpu", "dropin")
PEAK_MB = 400
I64, I32, B, F = TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT
vi = helper.make_tensor_value_info
node = helper.make_node


def _child(case: str, engine: str, n: int, out: Path) -> str:
    return run_case("computed_sizes52_models", case, engine, n, out, LIMIT)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_computed_size_over_the_limit_refused_before_allocating(
    tmp_path: Path, engine: str, case: str
) -> None:
    stdout = _child(case, engine, 20000, tmp_path / "out.npy")
    paths = {
        "if_branch": "branch/then_branch/big",
        "loop_body": "loop/body/big",
        "scan_body": "scan/body/big",
    }
    name = paths.get(case, "big")
    op = "Range" if case == "abs_neg" else "ConstantOfShape"
    assert f"REFUSED TooLargeError {name} {op} |" in stdout, stdout
    assert "memory limit" in stdout and "DMLSHIM_MEMORY_LIMIT" in stdout, stdout
    assert ("[400000000]" if case == "abs_neg" else "[20000, 20000]") in stdout, stdout
    peak = int(stdout.split("PEAK_MB")[-1].split()[0])
    assert peak < PEAK_MB, stdout  # before: 1672 MB (6442 MB for the Range)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_computed_size_under_the_limit_gives_onnxruntimes_values(
    tmp_path: Path, engine: str, case: str
) -> None:
    gives_onnxruntimes_values("computed_sizes52_models", case, engine, tmp_path / "out.npy", LIMIT)


def _ops_model(opset: int) -> tuple[onnx.ModelProto, list[str]]:
    """Every op :mod:`computed_ops` follows, with its every intermediate an output (onnxruntime computes
    the oracle)."""
    c = {
        "z": np.array(0, np.int64),
        "neg": np.array([-7, 7, -8, 9], np.int64),
        "d": np.array([3, -3, 5, -4], np.int64),
        "d32": np.array([3, -3, 5, -4, 2], np.int32),
        "k32": np.array([[2], [-3]], np.int32),
        "axes": np.array([1], np.int64),
        "no": np.array([], np.int64),
        "t": np.array([True, False, True, False]),
        "fk": np.array([0.1, 3.0, 7.0], np.float32),
        "fd": np.array([3.0, -0.7, 2.0], np.float32),
    }
    inits = [numpy_helper.from_array(v, k) for k, v in c.items()]
    as_input = {"ReduceSum": opset >= 13, "other": opset >= 18}

    def reduce(op: str, out: str, data: str, axes: list[int] | None, **kw: int) -> onnx.NodeProto:
        key = "ReduceSum" if op == "ReduceSum" else "other"
        if axes is None:
            return node(op, [data], [out], **kw)
        if as_input[key]:
            return node(op, [data, "axes" if axes == [1] else "no"], [out], **kw)
        return node(op, [data], [out], axes=axes, **kw)

    nodes = [
        node("Shape", ["x"], ["sx"]),
        node("Size", ["x"], ["size"]),
        node("Mul", ["neg", "n"], ["nn"]),
        node("Equal", ["nn", "neg"], ["eq"]),
        node("Greater", ["nn", "neg"], ["gt"]),
        node("Less", ["nn", "z"], ["lt"]),
        node("GreaterOrEqual", ["nn", "z"], ["ge"]),
        node("LessOrEqual", ["nn", "neg"], ["le"]),
        node("Not", ["eq"], ["ne"]),
        node("And", ["ne", "t"], ["and"]),
        node("Or", ["lt", "t"], ["or"]),
        node("Xor", ["gt", "t"], ["xor"]),
        node("Where", ["and", "nn", "neg"], ["where"]),
        node("Where", ["b", "sx", "z"], ["where_b"]),  # a fed bool condition, broadcast
        node("Mod", ["nn", "d"], ["mod"]),
        node("Mod", ["nn", "d"], ["fmod"], fmod=1),
        node("Mod", ["v", "d32"], ["mod32"]),
        node("Max", ["nn", "neg", "z"], ["max"]),
        node("Min", ["v", "k32"], ["min"]),  # broadcast [5] with [2, 1]
        node("Abs", ["nn"], ["abs"]),
        node("Neg", ["mod"], ["negd"]),
        node("Sign", ["nn"], ["sign"]),
        node("Cast", ["ge"], ["ge64"], to=I64),
        node("Cast", ["nn"], ["nz"], to=B),
        reduce("ReduceProd", "prod", "sx", None),
        reduce("ReduceProd", "prod0", "min", None, keepdims=0),
        reduce("ReduceSum", "sum", "min", [1]),
        reduce("ReduceSum", "sum0", "nn", None, keepdims=0),
        reduce("ReduceMax", "rmax", "min", [1], keepdims=0),
        reduce("ReduceMin", "rmin", "min", [1]),
        reduce("ReduceMax", "rmax_all", "v", None),
        reduce("ReduceMin", "rmin_neg", "min", [-1], keepdims=0) if opset < 18 else None,
        reduce("ReduceSum", "noop", "v", [], noop_with_empty_axes=1) if opset >= 13 else None,
        node(
            "If", ["b"], ["if"], then_branch=_scalar_branch("t1", "n"), else_branch=_scalar_branch("e1", "z")
        ),
        node("Cast", ["sx"], ["sf"], to=F),
        node("Mul", ["sf", "fk"], ["fm"]),
        node("Div", ["fm", "fd"], ["fdv"]),
        node("Add", ["fdv", "f"], ["fa"]),
        node("Sub", ["fa", "fk"], ["fs"]),
        node("Floor", ["fs"], ["floor"]),
        node("Ceil", ["fs"], ["ceil"]),
        node("Round", ["f"], ["round"]),
        node("Cast", ["fs"], ["trunc"], to=I64),
        node("Cast", ["f"], ["ftrunc"], to=I32),
        node("Mod", ["fs", "fd"], ["fmodf"], fmod=1),
        node("Max", ["fs", "f"], ["fmax"]),
        node("Min", ["fs", "f"], ["fmin"]),
        node("Less", ["fs", "f"], ["flt"]),
        node("Where", ["flt", "fs", "f"], ["fwhere"]),
        node("Abs", ["fs"], ["fabs"]),
        node("Neg", ["fs"], ["fneg"]),
        node("Cast", ["f"], ["fbool"], to=B),
        node("Cast", ["f"], ["f64"], to=TensorProto.DOUBLE),
        node("Cast", ["f64"], ["f32"], to=F),
        node("Constant", [], ["fc"], value_floats=[0.25, -0.75, 1.5]),
        node("Mul", ["f", "fc"], ["fcm"]),
        reduce("ReduceMax", "frmax", "fs", None),
    ]
    nodes = [n for n in nodes if n is not None]
    outs = [o for n in nodes for o in n.output if o != "fc"]
    types = {"eq": B, "gt": B, "lt": B, "ge": B, "le": B, "ne": B, "and": B, "or": B, "xor": B, "nz": B}
    types |= {"mod32": I32, "min": I32, "prod0": I32, "sum": I32, "rmax": I32, "rmin": I32}
    types |= {"rmax_all": I32, "rmin_neg": I32, "noop": I32, "ftrunc": I32, "flt": B, "fbool": B}
    floats = ("sf", "fm", "fdv", "fa", "fs", "floor", "ceil", "round", "fmodf", "fmax", "fmin", "fwhere")
    types |= dict.fromkeys((*floats, "fabs", "fneg", "f32", "fcm", "frmax"), F) | {"f64": TensorProto.DOUBLE}
    graph = helper.make_graph(
        nodes,
        "ops",
        [
            vi("x", F, [None, None, None]),
            vi("n", I64, []),
            vi("v", I32, [5]),
            vi("b", B, []),
            vi("f", F, [3]),
        ],
        [vi(o, types.get(o, I64), None) for o in outs],
        inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)]), outs


def _scalar_branch(name: str, source: str) -> onnx.GraphProto:
    return helper.make_graph(
        [node("Identity", [source], [name + "_o"])], name, [], [vi(name + "_o", I64, None)]
    )


@pytest.mark.parametrize("opset", [12, 13, 17, 18, 21])
@pytest.mark.parametrize("b", [True, False])
def test_computed_values_are_onnxruntimes(opset: int, b: bool) -> None:
    proto, outs = _ops_model(opset)
    run = {
        "x": np.zeros((3, 5, 2), np.float32),
        "n": np.array(-3, np.int64),
        "v": np.array([7, -7, 0, 12, -1], np.int32),
        "b": np.array(b),
        "f": np.array([2.5, -3.5, 0.5], np.float32),  # halves round to even
    }
    want = dict(zip(outs, ort_session(proto).run(outs, run), strict=True))
    got = ComputedValues.of(proto.graph, set(run), set(outs), opset).values(run)
    for name in outs:
        assert name in got, name
        assert got[name].dtype == want[name].dtype, name
        assert got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _sized(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], inits: list[onnx.TensorProto]
) -> FedSizes:
    graph = helper.make_graph(nodes, "unk", inputs, [vi("e", F, None)], inits)
    proto = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    return FedSizes.of(proto)


def _c(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


@pytest.mark.parametrize(
    ("op", "divisor", "fmod"),
    [("Mod", 0, 0), ("Mod", -1, 0), ("Mod", 0, 1), ("Mod", 2**60 + 1, 1)],
)
def test_inexact_mod_stays_unsized(monkeypatch: pytest.MonkeyPatch, op: str, divisor: int, fmod: int) -> None:
    """A zero divisor, ``INT_MIN % -1`` and a ``fmod`` past 2**53 (onnxruntime's goes through a double)
    are no sizes numpy can give exactly: the node is left where it runs; an exact one is refused."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _sized(
        [
            node(op, ["n", "d"], ["m"], fmod=fmod),
            node("Concat", ["m", "m"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ],
        [vi("n", I64, [1]), vi("d", I64, [1])],
        [],
    )
    n = np.array([2**60 + 300], np.int64)
    sizes.check({"n": n, "d": np.array([divisor], np.int64)})
    with pytest.raises(TooLargeError) as caught:
        sizes.check({"n": np.array([300], np.int64), "d": np.array([1000], np.int64)})
    assert caught.value.node == "big" and "[300, 300]" in str(caught.value)


def test_empty_reduce_max_stays_unsized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _sized(
        [
            node("ReduceMax", ["v"], ["r"], keepdims=1),
            node("Concat", ["r", "r"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ],
        [vi("v", I64, [None])],
        [],
    )
    sizes.check({"v": np.zeros(0, np.int64)})  # onnxruntime's own answer
    with pytest.raises(TooLargeError):
        sizes.check({"v": np.array([3, 300], np.int64)})


def _if_sizes(
    cond_nodes: list[onnx.NodeProto], then_inits: list[onnx.TensorProto], extra: list[onnx.ValueInfoProto]
) -> FedSizes:
    then = helper.make_graph(
        [
            node("Concat", ["n", "n"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["et"], name="big"),
        ],
        "then",
        [],
        [vi("et", F, None)],
        then_inits,
    )
    other = helper.make_graph(
        [node("ConstantOfShape", ["two"], ["ee"], name="small")], "else", [], [vi("ee", F, None)]
    )
    return _sized(
        [*cond_nodes, node("If", ["pos"], ["e"], name="branch", then_branch=then, else_branch=other)],
        [vi("n", I64, [1]), *extra],
        [_c("zero", 0), _c("two", [2, 2])],
    )


def test_a_branch_not_taken_is_not_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the branch the condition takes runs: the other's size never refuses the run."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _if_sizes([node("Greater", ["n", "zero"], ["pos1"]), node("Squeeze", ["pos1"], ["pos"])], [], [])
    sizes.check({"n": np.array([-300], np.int64)})  # the else branch: 2 x 2
    with pytest.raises(TooLargeError) as caught:
        sizes.check({"n": np.array([300], np.int64)})
    assert caught.value.node == "branch/then_branch/big" and caught.value.op_type == "ConstantOfShape"


def test_an_unknown_condition_is_not_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    """A condition from a float comparison is not computed: neither branch is sized."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _if_sizes([node("Greater", ["f", "fz"], ["pos"])], [], [vi("f", F, []), vi("fz", F, [])])
    sizes.check({"n": np.array([300], np.int64), "f": np.float32(1), "fz": np.float32(0)})


def test_a_branch_initializer_shadowing_a_feed_is_the_branchs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch's own initializer named as an outer feed is what the branch reads: the feed's value does
    not size it (onnxruntime runs ``[2, 2]``)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _if_sizes(
        [node("Greater", ["n", "zero"], ["pos1"]), node("Squeeze", ["pos1"], ["pos"])], [_c("n", [2])], []
    )
    sizes.check({"n": np.array([300], np.int64)})


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is Linux's")
@pytest.mark.parametrize("op", ["Add", "Where", "Max", "Gather", "Concat"])
def test_the_check_itself_stays_small(op: str) -> None:
    """Values of up to 4096 elements are followed: a broadcast of ``[4096, 1]`` with ``[1, 4096]`` (or a
    Gather of 4096 rows of 4096, a Concat of 4096 values of 4096) would make 16.7 million int64 (134 MB)
    inside the check itself: such a step is left unknown, never computed."""
    code = f"""
import numpy as np
from onnx import TensorProto, helper
from dmlshim.execute.plan.computed_values import ComputedValues
I64 = TensorProto.INT64
op = {op!r}
a, b = np.arange(4096, dtype=np.int64).reshape(4096, 1), np.arange(4096, dtype=np.int64).reshape(1, 4096)
feeds = {{"a": a, "b": b, "c": np.array(True)}}
if op == "Where":
    node = helper.make_node("Where", ["c", "a", "b"], ["o"])
elif op == "Gather":
    feeds["a"] = a.reshape(1, 4096)
    feeds["b"] = np.zeros(4096, np.int64)
    node = helper.make_node("Gather", ["a", "b"], ["o"], axis=0)
elif op == "Concat":
    node = helper.make_node("Concat", ["a"] * 4096, ["o"], axis=0)
else:
    node = helper.make_node(op, ["a", "b"], ["o"])
graph = helper.make_graph([node], "g", [], [])
values = ComputedValues.of(graph, set(feeds), {{"o"}}, 18).values(feeds)
assert "o" not in values
with open("/proc/self/status") as status:
    print(int(next(l.split()[1] for l in status if l.startswith("VmHWM:"))) // 1024)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "provider")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) < 120, done.stdout  # python, numpy and onnx alone: about 60 MB


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e30, -3e19])
def test_an_undefined_float_cast_stays_unsized(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    """A float made an integer past its range (or NaN, infinite) is C++'s undefined conversion: no size
    is read from it (onnxruntime's own answer stands); a float in range is truncated and sized."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _sized(
        [
            node("Mul", ["f", "k"], ["m"]),
            node("Cast", ["m"], ["s"], to=I64),
            node("ConstantOfShape", ["s"], ["e"], name="big"),
        ],
        [vi("f", F, [2])],
        [numpy_helper.from_array(np.array([1.0, 1.0], np.float32), "k")],
    )
    sizes.check({"f": np.array([300.5, value], np.float32)})
    with pytest.raises(TooLargeError) as caught:
        sizes.check({"f": np.array([300.9, -0.0], np.float32) + np.array([0, 300.7], np.float32)})
    assert "[300, 300]" in str(caught.value)


def _loop_sizes(count: str, cond: str, shape_from: str) -> FedSizes:
    """A Loop (trip count ``count``, first condition ``cond``, either may be "") whose body makes
    ``ConstantOfShape(Concat(u, u))`` of ``shape_from``: the outer fed ``n``, or the body's counter."""
    body = helper.make_graph(
        [
            node("Unsqueeze", [shape_from, "ax"], ["u"]),
            node("Concat", ["u", "u"], ["s"], axis=0),
            node("ConstantOfShape", ["s"], ["b"], name="big"),
            node("Identity", ["c"], ["c2"]),
            node("ReduceSum", ["b"], ["r"], keepdims=0),
        ],
        "body",
        [vi("it", I64, []), vi("c", B, [])],
        [vi("c2", B, []), vi("r", F, None)],
    )
    graph_inputs = [vi("n", I64, []), vi("m", I64, []), vi("go", B, [])]
    loop = node("Loop", [count, cond], ["e"], name="loop", body=body)
    return _sized([loop], graph_inputs, [_c("ax", [0])])


@pytest.mark.parametrize(
    ("count", "cond", "runs"),
    [
        ("m", "", True),
        ("", "go", True),
        ("m", "go", True),
        ("m", "", False),
        ("", "go", False),
        ("m", "go", False),
    ],
)
def test_a_loop_body_is_sized_when_it_runs(
    monkeypatch: pytest.MonkeyPatch, count: str, cond: str, runs: bool
) -> None:
    """A Loop body runs when its trip count is positive and its first condition holds: its sized node of
    outer values is refused then (named by its path), and left alone when the body never runs."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = _loop_sizes(count, cond, "n")
    feeds = {"n": np.array(300, np.int64), "m": np.array(2 if runs else 0, np.int64), "go": np.array(runs)}
    if count and cond and not runs:
        feeds["m"] = np.array(3, np.int64)  # a positive count, a false condition: no iteration
    if not runs:
        sizes.check(feeds)
        return
    with pytest.raises(TooLargeError) as caught:
        sizes.check(feeds)
    assert caught.value.node == "loop/body/big" and "[300, 300]" in str(caught.value)


def test_a_size_from_the_iteration_stays_unsized(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shape resting on the body's counter changes every iteration: not read (sound or absent)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    _loop_sizes("m", "", "it").check({"n": np.array(300, np.int64), "m": np.array(2000, np.int64)})


def test_names_with_a_nul_leave_subgraphs_unfollowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch's names are kept apart from the outer ones with NUL separators: a model naming a value
    ``"e\\x00then_branch\\x00s"`` could make two of them one, so its subgraphs are not followed."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    cond = [
        node("Greater", ["n", "zero"], ["p"]),
        node("Squeeze", ["p"], ["pos\x00"]),
        node("Identity", ["pos\x00"], ["pos"]),
    ]
    sizes = _if_sizes(cond, [], [])
    sizes.check({"n": np.array([300], np.int64)})


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is Linux's")
@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("case", ["where_compare", "if_branch", "float_scale"])
def test_the_cli_stays_under_the_limit(tmp_path: Path, command: str, case: str) -> None:
    """``run`` and ``validate`` refuse the model too, naming the node, with no traceback."""
    path = tmp_path / "m.onnx"
    onnx.save(onnx.load_from_string(model(case)), path)
    np.savez(tmp_path / "in.npz", **feeds(case, 20000))
    done = run_child(
        [command, "-q", str(path), "--inputs", str(tmp_path / "in.npz")], {"DMLSHIM_MEMORY_LIMIT": LIMIT}
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    name = "branch/then_branch/big" if case == "if_branch" else "big"
    assert f"node '{name}', op ConstantOfShape" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "DMLSHIM_MEMORY_LIMIT" in done.stderr, done.stderr
    assert done.peak_rss < PEAK_MB * 1024 * 1024, done.peak_rss


def test_a_scan_body_is_sized_when_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Scan body runs once per slice of its scan inputs: sized when the scan axis is not empty, never
    on an empty one (onnxruntime then runs no iteration)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    proto = onnx.load_from_string(model("scan_body"))
    sizes = FedSizes.of(proto)
    base = {"i": np.array([0, 1], np.int64), "n": np.array(300, np.int64)}
    sizes.check({**base, "x": np.zeros((0, 1), np.float32)})
    with pytest.raises(TooLargeError) as caught:
        sizes.check({**base, "x": np.zeros((3, 1), np.float32)})
    assert caught.value.node == "scan/body/big" and "[300, 300]" in str(caught.value)


def test_nested_branches_select_their_values() -> None:
    """Ifs nested 30 deep (about protobuf's own nesting bound): each output takes its taken branch's. (A
    branch's scope once repeated the outer scope twice: the names doubled per level, 19.9 GB at 30.)"""
    inner = helper.make_graph([node("Identity", ["n"], ["o0"])], "g0", [], [vi("o0", I64, None)])
    for k in range(1, 30):
        other = helper.make_graph([node("Neg", ["n"], [f"p{k}"])], f"e{k}", [], [vi(f"p{k}", I64, None)])
        inner = helper.make_graph(
            [node("If", ["c"], [f"o{k}"], then_branch=inner, else_branch=other)],
            f"g{k}",
            [],
            [vi(f"o{k}", I64, None)],
        )
    graph = helper.make_graph(
        list(inner.node), "top", [vi("c", B, []), vi("n", I64, [])], [vi("o29", I64, None)]
    )
    values = ComputedValues.of(graph, {"c", "n"}, {"o29"}, 18)
    n = np.array(3, np.int64)
    assert values.values({"c": np.array(True), "n": n})["o29"] == 3
    assert values.values({"c": np.array(False), "n": n})["o29"] == -3
