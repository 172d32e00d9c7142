"""hostile47, every engine: a value whose shape follows from the model alone counts against the memory
limit in the cpu and custom-op engines as in the partitioned one. Before, ``engine="cpu"`` or
``engine="customop"`` built the session of a model whose If branch makes a 2 GB ``ConstantOfShape`` under a
100 MB limit, and a run taking the branch allocated it; a top-level one reached onnxruntime unchecked when
the inputs were given (no input generation ran). Each engine now refuses it when it is built, naming the
node, its op, the value and its size, before onnxruntime loads the model. The limit is read from the
environment; the children's peak RSS shows nothing was allocated."""

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
from tests.test_hostile47_limits import LIMIT, OPS, _if_model, _ints, _model

ENGINES = ["cpu", "customop"]
BIG = 250_000_000  # int64 elements: 2 GB, 20 times the 100 MB limit
PEAK = {"partitioned": 400 * 2**20, "cpu": 400 * 2**20, "customop": 700 * 2**20}
"""Peak RSS of a refusal: onnxruntime-extensions alone takes the custom-op engine's child to 420 MB."""


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT["DMLSHIM_MEMORY_LIMIT"])


def _loop_model(length: int) -> onnx.ModelProto:
    """x[N, 4] -> Gather(x, last scan output of Loop(1 trip) whose body makes ConstantOfShape([length]))."""
    one = numpy_helper.from_array(np.array([1], np.int64))
    body = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shp"], ["big"], name="make", value=one),
            helper.make_node("Slice", ["big", "s0", "s1"], ["b_out"], name="slice"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", T.INT64, []),
            helper.make_tensor_value_info("cond_in", T.BOOL, []),
            helper.make_tensor_value_info("carried", T.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", T.BOOL, []),
            helper.make_tensor_value_info("b_out", T.INT64, None),
        ],
        [_ints("shp", [length]), _ints("s0", [0]), _ints("s1", [2])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["trips", "", "start"], ["r"], name="loop", body=body),
            helper.make_node("Gather", ["x", "r"], ["y"], axis=0, name="gather"),
        ],
        "h47loop",
        [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [_ints("trips", 1), _ints("start", [0, 0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize("engine", ENGINES)
def test_an_if_branch_value_over_the_limit_is_refused_when_the_engine_is_built(
    limited: None, engine: str
) -> None:
    """Refused at construction, before any run: a run never taking the branch is refused too, as in the
    partitioned engine (docs/safety.md)."""
    import dmlshim
    from dmlshim.errors import TooLargeError

    with pytest.raises(TooLargeError, match="if/then_branch") as caught:
        dmlshim.InferenceSession(_if_model(BIG).SerializeToString(), engine=engine)
    assert caught.value.tensor == "big"
    text = str(caught.value)
    assert "ConstantOfShape" in text and "[250000000]" in text and "memory limit" in text


@pytest.mark.parametrize("engine", ENGINES)
def test_a_loop_body_value_over_the_limit_is_refused_when_the_engine_is_built(
    limited: None, engine: str
) -> None:
    import dmlshim
    from dmlshim.errors import TooLargeError

    model = _loop_model(BIG)
    with pytest.raises(TooLargeError, match="loop/body") as caught:
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    assert caught.value.tensor == "big"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("op", OPS)
def test_a_top_level_static_value_over_the_limit_is_refused_when_the_engine_is_built(
    limited: None, engine: str, op: str
) -> None:
    """With the inputs given no input generation runs: the engine's own check refuses it."""
    import dmlshim
    from dmlshim.errors import TooLargeError

    with pytest.raises(TooLargeError, match="output 'r' of shape \\[250000000\\]") as caught:
        dmlshim.InferenceSession(_model(op, BIG).SerializeToString(), engine=engine)
    assert caught.value.tensor == "r"


def test_the_cpu_provider_alone_refuses_too(limited: None) -> None:
    """``providers=["CPUExecutionProvider"]`` (the drop-in's way to the cpu engine)."""
    import dmlshim
    from dmlshim.errors import TooLargeError

    with pytest.raises(TooLargeError, match="if/then_branch"):
        dmlshim.InferenceSession(_if_model(BIG).SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("declared", [None, 10_000_000_000])
def test_an_if_branch_under_the_limit_runs_as_onnxruntime_in_every_engine(
    limited: None, engine: str, declared: int | None
) -> None:
    """Also when the branch's value_info declares 10^10 elements it never has (the model's word)."""
    import dmlshim

    model = _if_model(1000, declared).SerializeToString()
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(model, engine=engine)
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    for c in (False, True, True, False):
        feeds = {"x": x, "c": np.array(c)}
        assert session.run(None, feeds)[0].tobytes() == oracle.run(None, feeds)[0].tobytes()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("command", ["run", "validate"])
def test_the_cli_refuses_a_branch_value_over_the_limit_in_every_engine(
    tmp_path: Path, engine: str, command: str
) -> None:
    """Given inputs taking the branch: before, the run allocated the 2 GB value."""
    path = tmp_path / "branch.onnx"
    onnx.save(_if_model(BIG), path)
    feeds = tmp_path / "in.npz"
    np.savez(feeds, x=np.arange(12, dtype=np.float32).reshape(3, 4), c=np.array(True))
    argv = [command, str(path), "--engine", engine, "--inputs", str(feeds)]
    result = run_child(argv, env=LIMIT, timeout=300)
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    assert "if/then_branch" in result.stderr and "memory limit" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.peak_rss < PEAK[engine], result.peak_rss


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_input_generation_refuses_before_any_trial_run_in_every_engine(
    tmp_path: Path, engine: str, command: str
) -> None:
    """No inputs given: the generation's check (the same function) refuses before onnxruntime runs a
    candidate, whichever engine was asked for."""
    path = tmp_path / "big.onnx"
    onnx.save(_model("ConstantOfShape", BIG), path)
    result = run_child([command, str(path), "--engine", engine], env=LIMIT, timeout=300)
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    assert "output 'r' of shape [250000000]" in result.stderr and "memory limit" in result.stderr
    assert result.peak_rss < PEAK[engine], result.peak_rss


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
        code = 2
    else:
        code = 0
    with open("/proc/self/status") as f:
        print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
    sys.exit(code)
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak RSS read from /proc")
@pytest.mark.parametrize("engine", ["partitioned", *ENGINES])
def test_the_drop_in_refuses_a_branch_value_over_the_limit(tmp_path: Path, engine: str) -> None:
    """``dmlshim.install()`` then onnxruntime's own ``InferenceSession`` call."""
    path = tmp_path / "branch.onnx"
    onnx.save(_if_model(BIG), path)
    env = {**os.environ, "PYTHONPATH": str(REPO / "provider"), **LIMIT}
    result = subprocess.run(
        [sys.executable, "-c", _DROP_IN, str(path), engine],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "if/then_branch" in result.stderr and "memory limit" in result.stderr
    assert int(result.stdout.split()[-1]) * 1024 < PEAK[engine]
