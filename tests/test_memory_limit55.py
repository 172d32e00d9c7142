"""Issue 35 item 3 (round 55): sizes resting on a fed value, read by a gather, refused before anything runs.

Three gaps, each measured under ``DMLSHIM_MEMORY_LIMIT=100000000`` before the fix (peak RSS of a child):

- ``Gather(table, Expand(7, [n]))`` with ``n`` fed 10^7: the indices fit (80 MB), the gather needs 2.56 GB.
  onnx cannot infer the indices' shape (it rests on a value), so nothing sized the gather before onnxruntime
  allocated it: 2735 MB peak (cpu engine), 5326 MB (custom-op engine); the partitioned engine refused it at
  its own step, after its whole-model check had allocated 2740 MB.
- A ``Loop`` run ``n`` times (fed) scanning 16 int64s per iteration into a Gather: 2001 MB peak (cpu),
  3677 MB (custom-op), 2002 MB before the partitioned engine's refusal, for ``n`` = 400000.
- The same with strings (a Gather of a 4-string table by ``Mod(Range(0, n, 1), 4)``, a GatherND by a Loop's
  scan): 502 MB and 2417 MB peak before the partitioned engine's refusal, under a 50 MB limit.

Now each is refused before any engine runs (``dmlshim.execute.plan.valued_shapes``), naming the node, op,
value and size, at 84 to 93 MB peak; a run that fits gives onnxruntime CPU's values, and what cannot be
known before running (a Loop that may stop early, a shape a body output only declares) is never refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import TooLargeError

from .computed_sizes_child import run_case
from .memory_limit55_models import BIG, CASES, REFUSED, feeds, model
from .oracle import ort_session
from .safety_helpers import run_child

LIMIT = "100000000"
PEAK_MB = 300  # an idle child: 84 to 93 MB; every refused value would need 128 MB to 2.56 GB
MODELS = "memory_limit55_models"
V = helper.make_tensor_value_info


def _refused(case: str, engine: str, tmp_path: Path) -> str:
    stdout = run_case(MODELS, case, engine, BIG[case], tmp_path / "out.npy", LIMIT)
    node, op = REFUSED[case]
    assert f"REFUSED TooLargeError {node} {op} |" in stdout, stdout
    assert "memory limit" in stdout and "DMLSHIM_MEMORY_LIMIT" in stdout, stdout
    assert "refusing before allocating" in stdout, stdout
    peak = int(stdout.split("PEAK_MB")[-1].split()[0])
    assert peak < PEAK_MB, stdout
    return stdout


@pytest.mark.parametrize("case", CASES)
def test_a_size_resting_on_a_fed_value_is_refused_before_running(tmp_path: Path, case: str) -> None:
    """The default (partitioned) engine; the refused value and its shape are named."""
    stdout = _refused(case, "partitioned", tmp_path)
    n = BIG[case]
    shapes = {
        "expand_gather": f"'y' of shape [{n}, 64] and type float32",
        "range_gather": f"'y' of shape [{n}, 64] and type float32",
        "constant_gather": f"'y' of shape [{n}, 16] and type float64",
        "loop_gather": f"'y' of shape [{n}, 16, 64] and type float32",
        "loop_scan": f"'rows' of shape [{n}, 1024] and type float ",  # (ONNX's name)
        "string_range_gather": f"'y' of shape [{n}] and type string",
        "string_loop_gathernd": f"'y' of shape [{n}] and type string",
        "string_scatter": f"'y' of shape [{n}] and type string",
        "float_scatter": f"'y' of shape [{n}] and type float32",
    }
    assert shapes[case] in stdout, stdout


@pytest.mark.parametrize("engine", ["cpu", "customop", "dropin"])
@pytest.mark.parametrize("case", ["expand_gather", "loop_gather", "string_range_gather", "string_scatter"])
def test_every_engine_refuses_before_onnxruntime_allocates(tmp_path: Path, engine: str, case: str) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    _refused(case, engine, tmp_path)


@pytest.mark.parametrize("engine", ["partitioned", "cpu", "customop"])
@pytest.mark.parametrize("case", CASES)
def test_under_a_generous_limit_the_values_are_onnxruntimes(
    monkeypatch: pytest.MonkeyPatch, engine: str, case: str
) -> None:
    if engine == "customop":
        pytest.importorskip("onnxruntime_extensions")
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "2000000000")
    session = dmlshim.InferenceSession(model(case), engine=engine)
    reference = ort_session(model(case))
    for n in (400, 3, 1000) if case.endswith("_scatter") else (400, 3, 0, 1000):  # (no scatter into [0])
        want = reference.run(None, feeds(case, n))[0]
        got = session.run(None, feeds(case, n))[0]
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype == object:
            assert got.tolist() == want.tolist()
        else:
            np.testing.assert_array_equal(got, want)


def test_the_steady_lane_sizes_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs repeating an accepted run's feed shapes skip the shape checks: a fed scalar changes the size
    without changing a shape, so the valued sizes are checked there as well."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    session = dmlshim.InferenceSession(model("expand_gather"))
    reference = ort_session(model("expand_gather"))
    for _ in range(10):
        got = session.run(None, feeds("expand_gather", 400))[0]
    np.testing.assert_array_equal(got, reference.run(None, feeds("expand_gather", 400))[0])
    with pytest.raises(TooLargeError, match=r"'y' of shape \[10000000, 64\]") as caught:
        session.run(None, feeds("expand_gather", 10_000_000))
    assert caught.value.node == "gather" and caught.value.op_type == "Gather"


def _loop_model(cond_op: str | None, declared: list[int] | None = None, fed_cond: bool = False) -> bytes:
    """``z = ReduceSum(Loop(n, c).rows)`` scanning 16 floats per iteration; the body's condition is its
    input passed through (``cond_op`` None) or ``Less(i, 3)`` (the loop stops after 4 iterations);
    ``declared``: a slice shape the body output declares; ``fed_cond``: the first condition ``c`` fed."""
    cond = (
        [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
        if cond_op is None
        else [helper.make_node(cond_op, ["i", "three"], ["cond_out"])]
    )
    body = helper.make_graph(
        [*cond, helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["f", "row16"], ["row"])],
        "body",
        [V("i", TensorProto.INT64, []), V("cond_in", TensorProto.BOOL, [])],
        [V("cond_out", TensorProto.BOOL, []), V("row", TensorProto.FLOAT, declared)],
    )  # fmt: skip
    inputs = [V("n", TensorProto.INT64, [])] + ([V("c", TensorProto.BOOL, [])] if fed_cond else [])
    graph = helper.make_graph(
        [
            helper.make_node("Loop", ["n", "c" if fed_cond else ""], ["rows"], body=body, name="loop"),
            helper.make_node("ReduceSum", ["rows"], ["z"], keepdims=0),
        ],
        "loops",
        inputs,
        [V("z", TensorProto.FLOAT, [])],
        [
            numpy_helper.from_array(np.arange(16, dtype=np.float32), "row16"),
            numpy_helper.from_array(np.array(3, np.int64), "three"),
        ],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    built.ir_version = 10
    return built.SerializeToString()


@pytest.mark.parametrize(
    ("case", "kwargs", "extra"),
    [
        ("stops early", {"cond_op": "Less"}, {}),
        ("declares a larger slice", {"cond_op": None, "declared": [10_000_000]}, {}),
        ("first condition false", {"cond_op": None, "fed_cond": True}, {"c": np.array(False)}),
    ],
)
def test_a_loop_scan_not_known_before_running_is_not_refused(
    monkeypatch: pytest.MonkeyPatch, case: str, kwargs: dict, extra: dict
) -> None:
    """A trip count of 10^9 (64 GB if every iteration ran) that never runs that often, or a slice shape only
    a declaration gives: onnxruntime's value, nothing refused."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    built = _loop_model(**kwargs)
    n = 1_000_000_000 if case != "declares a larger slice" else 1000
    run_feeds = {"n": np.array(n, np.int64), **extra}
    want = ort_session(built).run(None, run_feeds)[0]
    got = dmlshim.InferenceSession(built).run(None, run_feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_a_fed_true_first_condition_is_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same loop, its first condition fed true: it runs the whole trip count, so it is sized."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    built = _loop_model(None, fed_cond=True)
    session = dmlshim.InferenceSession(built)
    with pytest.raises(TooLargeError, match=r"'rows' of shape \[10000000, 16\] and type float ") as caught:
        session.run(None, {"n": np.array(10_000_000, np.int64), "c": np.array(True)})
    assert caught.value.node == "loop" and caught.value.op_type == "Loop"


def test_models_are_valid_onnx() -> None:
    """Every model here is one onnx's checker accepts (the refusals are dmlshim's)."""
    for case in CASES:
        onnx.checker.check_model(onnx.load_from_string(model(case)))
    for kwargs in (
        {"cond_op": "Less"},
        {"cond_op": None, "declared": [10]},
        {"cond_op": None, "fed_cond": True},
    ):
        onnx.checker.check_model(onnx.load_from_string(_loop_model(**kwargs)))


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is Linux's")
@pytest.mark.parametrize("command", ["validate", "export"])
def test_the_cli_refuses_before_running(tmp_path: Path, command: str) -> None:
    """``validate`` and ``export`` with ``--inputs`` refuse the model too, naming the node, with no traceback
    and nothing written (``export`` sized only the feeds' shapes: it ran the model at 14.4 GB peak under
    the 100 MB limit and wrote a 2.5 GB folder before)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(model("expand_gather"))
    np.savez(tmp_path / "in.npz", **feeds("expand_gather", BIG["expand_gather"]))
    out = tmp_path / "exported"
    argv = [command, "-q", str(path), "--inputs", str(tmp_path / "in.npz")]
    argv += ["-o", str(out)] if command == "export" else []
    done = run_child(argv, {"DMLSHIM_MEMORY_LIMIT": LIMIT})
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "node 'gather', op Gather" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "'y' of shape [10000000, 64]" in done.stderr and "DMLSHIM_MEMORY_LIMIT" in done.stderr
    assert done.peak_rss < PEAK_MB * 1024 * 1024, done.peak_rss
    assert not out.exists()
