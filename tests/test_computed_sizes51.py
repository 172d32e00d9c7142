"""Issue 35 leftover (round 51): sizes *computed* from fed values inside the graph, under the memory limit.

``ConstantOfShape(Concat(Shape(x), c))``, ``Expand(y, Mul(Shape(x), k))``, a fed scalar through
``Unsqueeze``/``Concat``, ``Shape``/``Slice``/``Cast``/``Mul``/``Div``/``Sub``/``Add``/``Reshape`` into a
Tile, and ``Gather``/``Squeeze``/``Mul`` of a shape into a Range, each feeding a Gather dmlshim emulates:
fed so that the sized node makes ``[20000, 20000]`` (1.6 GB float32, 3.2 GB int64), every engine and the
drop-in let onnxruntime allocate it under ``DMLSHIM_MEMORY_LIMIT=100000000`` (peaks 1.66 to 6.4 GB, see
docs/safety.md). The shape arithmetic is now followed on the feeds (``execute/plan/computed_values.py``)
and the node refused before any engine runs, naming it (in a child process, peak under 400 MB); small
feeds give onnxruntime CPU's values; the computed values themselves are onnxruntime's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.errors import TooLargeError
from dmlshim.execute.plan.computed_values import ComputedValues
from dmlshim.execute.plan.fed_sizes import FedSizes

from .computed_sizes51_models import CASES, feeds, model
from .computed_sizes_child import gives_onnxruntimes_values, run_case
from .oracle import ort_session
from .safety_helpers import run_child

ROOT = Path(__file__).resolve().parents[1]
LIMIT = "100000000"
ENGINES = ("partitioned", "customop", "cpu", "dropin")
OPS = {
    "shape_concat": "ConstantOfShape",
    "shape_mul": "Expand",
    "scalar_unsqueeze": "ConstantOfShape",
    "slice_arith": "Tile",
    "gather_squeeze": "Range",
}
PEAK_MB = 400


def _child(case: str, engine: str, n: int, out: Path) -> str:
    return run_case("computed_sizes51_models", case, engine, n, out, LIMIT)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_computed_size_over_the_limit_refused_before_allocating(
    tmp_path: Path, engine: str, case: str
) -> None:
    stdout = _child(case, engine, 20000, tmp_path / "out.npy")
    assert f"REFUSED TooLargeError big {OPS[case]} |" in stdout, stdout
    assert "memory limit" in stdout and "DMLSHIM_MEMORY_LIMIT" in stdout, stdout
    size = "[400000000]" if case == "gather_squeeze" else "[20000, 20000]"
    assert size in stdout, stdout
    peak = int(stdout.split("PEAK_MB")[-1].split()[0])
    assert peak < PEAK_MB, stdout  # onnxruntime alone: 1656 MB (3.2 GB for the Range)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("engine", ENGINES)
def test_computed_size_under_the_limit_gives_onnxruntimes_values(
    tmp_path: Path, engine: str, case: str
) -> None:
    gives_onnxruntimes_values("computed_sizes51_models", case, engine, tmp_path / "out.npy", LIMIT)


def _arith_model(opset: int) -> tuple[onnx.ModelProto, list[str]]:
    """Shape arithmetic with its every intermediate an output (onnxruntime computes the oracle)."""
    I64 = TensorProto.INT64
    c = {
        "z": [0],
        "e": [-1],
        "m1": [-1],
        "big": [2**62],
        "neg": [-7, 7],
        "d": [2, -2],
        "ax": [0],
        "ix": [-1, 0],
        "sh": [2, -1],
    }
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in c.items()]
    unsq = (
        [helper.make_node("Unsqueeze", ["n"], ["nu"], axes=[0])]
        if opset < 13
        else [helper.make_node("Unsqueeze", ["n", "ax"], ["nu"])]
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Shape", ["x"], ["sx1"], start=1, end=-1) if opset >= 15 else None,
        helper.make_node("Slice", ["sx", "e", "big", "z", "m1"], ["rev"]),  # negative step
        helper.make_node("Slice", ["sx", "m1", "big"], ["tail"]),
        helper.make_node("Gather", ["sx", "ix"], ["gx"], axis=0),
        *unsq,
        helper.make_node("Concat", ["nu", "gx", "tail"], ["cat"], axis=0),
        helper.make_node("Cast", ["cat"], ["c32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["c32"], ["c64"], to=I64),
        helper.make_node("Mul", ["neg", "gx"], ["mul"]),
        helper.make_node("Div", ["mul", "d"], ["div"]),  # truncation toward zero
        helper.make_node("Sub", ["div", "gx"], ["sub"]),
        helper.make_node("Add", ["sub", "neg"], ["add"]),
        helper.make_node("Reshape", ["c64", "sh"], ["resh"]),
        helper.make_node("Squeeze", ["nu"], ["sq"])
        if opset < 13
        else helper.make_node("Squeeze", ["nu", "ax"], ["sq"]),
        helper.make_node("Identity", ["sq"], ["ident"]),
        helper.make_node("Constant", [], ["k"], value_ints=[3, 4]),
        helper.make_node("Mul", ["k", "gx"], ["kmul"]),
    ]
    nodes = [n for n in nodes if n is not None]
    outs = [o for n in nodes for o in n.output if o != "k"]
    graph = helper.make_graph(
        nodes,
        "arith",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, None]),
            helper.make_tensor_value_info("n", I64, []),
        ],
        [helper.make_tensor_value_info(o, I64 if o != "c32" else TensorProto.INT32, None) for o in outs],
        inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)]), outs


@pytest.mark.parametrize("opset", [12, 17, 18])
def test_computed_values_are_onnxruntimes(opset: int) -> None:
    proto, outs = _arith_model(opset)
    run = {"x": np.zeros((3, 5, 2), np.float32), "n": np.array(9, np.int64)}
    want = dict(zip(outs, ort_session(proto).run(outs, run), strict=True))
    fed = {"x", "n"}
    got = ComputedValues.of(proto.graph, fed, set(outs), opset).values(run)
    for name in outs:
        assert name in got, name
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_unknown_arithmetic_stays_unsized(monkeypatch: pytest.MonkeyPatch) -> None:
    """A division by zero is no size (onnxruntime's own answer stands): the check leaves it where it runs;
    the same model with a non-zero divisor is refused, naming the node."""
    I64 = TensorProto.INT64
    divisor = helper.make_tensor_value_info("d", I64, [2])
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Div", ["sx", "d"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["e"], name="big"),
    ]
    graph = helper.make_graph(
        nodes,
        "unk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None]), divisor],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000")
    sizes = FedSizes.of(proto)
    assert [v.name for v in sizes.valued] == ["big"]
    x = np.zeros((300, 400), np.float32)
    sizes.check({"x": x, "d": np.array([0, 1], np.int64)})  # 300 / 0: unknown, not refused
    sizes.check({"x": x, "d": np.array([-1, 1], np.int64)})  # a negative dimension: onnxruntime's error
    with pytest.raises(TooLargeError) as caught:
        sizes.check({"x": x, "d": np.array([3, 1], np.int64)})
    assert caught.value.node == "big" and caught.value.op_type == "ConstantOfShape"
    assert "[100, 400]" in str(caught.value)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is Linux's")
@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("case", ["scalar_unsqueeze", "gather_squeeze"])
def test_the_cli_stays_under_the_limit(tmp_path: Path, command: str, case: str) -> None:
    """``validate`` ran onnxruntime's reference on a fed scalar's ``[20000, 20000]``: 1.7 GB peak."""
    path = tmp_path / "m.onnx"
    onnx.save(onnx.load_from_string(model(case)), path)
    np.savez(tmp_path / "in.npz", **feeds(case, 20000))
    done = run_child(
        [command, "-q", str(path), "--inputs", str(tmp_path / "in.npz")], {"DMLSHIM_MEMORY_LIMIT": LIMIT}
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"node 'big', op {OPS[case]}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "DMLSHIM_MEMORY_LIMIT" in done.stderr, done.stderr
    assert done.peak_rss < PEAK_MB * 1024 * 1024, done.peak_rss
