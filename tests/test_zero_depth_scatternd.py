"""ScatterND with empty index tuples (indices' last dimension 0) never kills the process.

onnxruntime 1.24 dies of SIGFPE on this node (at run time, or at session creation when constant folding
computes it); 1.32 computes ONNX's answer. Every case runs in a child process (a crash must fail the
test, not end the run): all of the module's cases in one child (``tests/crash_isolated.py``: a case that
kills it fails alone, and a new child takes up the rest). Each case's values are compared with ONNX's
reference implementation (``onnx.reference``, its ScatterND as the specification writes it), and, where
onnxruntime runs the node, with onnxruntime's CPU provider too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from . import zero_depth_models
from .crash_isolated import Outcome, run_isolated
from .oracle import IR_VERSION, onnx_reference_run, ort_crashes_on_zero_depth_scatternd

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


ENGINES = ["partitioned", "customop", "cpu", ""]


def _case_id(case: tuple) -> str:
    return f"{case[0]}-{case[1]}-{case[2]}-{'const' if case[4] else 'cidx' if case[3] else 'fed'}"


def _dynamic_model(reduction: str, indices_shape: list[Any] | None) -> onnx.ModelProto:
    """ScatterND -> Neg with indices of shape ``indices_shape`` (None: no shape, so no rank either)."""
    nodes = [
        helper.make_node("ScatterND", ["x", "i", "u"], ["s"], reduction=reduction),
        helper.make_node("Neg", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, indices_shape),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])


DYNAMIC_FEEDS = [
    {
        "x": np.array([1, -2], np.float32),
        "i": np.zeros((3, 0), np.int64),
        "u": np.arange(6, dtype=np.float32).reshape(3, 2),
    },
    {"x": np.array([1, -2], np.float32), "i": np.array([[1]], np.int64), "u": np.array([9], np.float32)},
]


def _save(
    tmp: Path, name: str, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
) -> tuple[str, list[str]]:
    onnx.save(model, str(tmp / f"{name}.onnx"))
    paths = []
    for k, f in enumerate(feeds):
        np.savez(tmp / f"{name}.{k}.npz", **f)
        paths.append(str(tmp / f"{name}.{k}.npz"))
    return str(tmp / f"{name}.onnx"), paths


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every case of this module, run in one child process (more only where a case kills it)."""
    tmp = tmp_path_factory.mktemp("zero_depth")
    jobs: list[dict[str, Any]] = []
    for case in CASES:
        model, feeds = _case(*case)
        path, feed_paths = _save(tmp, _case_id(case), model, [feeds])
        for engine in ENGINES:
            jobs.append(
                {
                    "id": f"session/{_case_id(case)}/{engine}",
                    "kind": "session",
                    "model": path,
                    "feeds": feed_paths,
                    "engine": engine,
                }
            )
    for reduction in ("none", "add"):
        path, feed_paths = _save(
            tmp, f"dynamic-{reduction}", _dynamic_model(reduction, ["a", "k"]), DYNAMIC_FEEDS
        )
        for engine in ENGINES:
            jobs.append(
                {
                    "id": f"dynamic/{reduction}/{engine}",
                    "kind": "session",
                    "model": path,
                    "feeds": feed_paths,
                    "engine": engine,
                }
            )
    for name, (model, feed_sets) in _leftovers().items():
        path, feed_paths = _save(tmp, name, model, feed_sets)
        for engine in ENGINES:
            jobs.append(
                {
                    "id": f"{name}/{engine}",
                    "kind": "session",
                    "model": path,
                    "feeds": feed_paths,
                    "engine": engine,
                }
            )
        if name.startswith(
            "unknown_rank"
        ):  # onnxruntime's own session of the whole model, as dmlshim builds it
            jobs.append({"id": f"{name}/ort", "kind": "ort", "model": path, "feeds": feed_paths})
    model, _ = zero_depth_models.unknown_rank("none")
    rank0 = {"x": np.array([1, -2], np.float32), "i": np.array(0, np.int64), "u": np.array(5, np.float32)}
    path, feed_paths = _save(tmp, "unknown_rank-rank0", model, [rank0])
    jobs.append({"id": "rank0/cpu", "kind": "session", "model": path, "feeds": feed_paths, "engine": "cpu"})
    jobs.append({"id": "rank0/ort", "kind": "ort", "model": path, "feeds": feed_paths})
    (tmp / "external").mkdir()
    path, _, feed_sets = zero_depth_models.external_weights(tmp / "external")
    _, feed_paths = _save(tmp, "external-feeds", onnx.ModelProto(), feed_sets)
    for options in ("none", "own", "callers"):
        jobs.append(
            {
                "id": f"external/ort/{options}",
                "kind": "ort",
                "model": path,
                "feeds": feed_paths,
                "by_path": True,
                "options": None if options == "none" else options,
            }
        )
    jobs.append(
        {
            "id": "external/session/optimized",
            "kind": "session",
            "model": path,
            "feeds": feed_paths,
            "by_path": True,
            "options": "optimized",
            "optimized": str(tmp / "optimized.onnx"),
        }
    )
    model, feeds = _case([3, 2], [2, 0], "none", True, False)
    path, (inputs,) = _save(tmp, "cli", model, [feeds])
    jobs.append({"id": "cli/validate", "kind": "cli", "argv": ["validate", path]})
    jobs.append({"id": "cli/inspect", "kind": "cli", "argv": ["inspect", path, "--inputs", inputs]})
    return run_isolated(jobs, tmp)


def _leftovers() -> dict[str, tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]]:
    return {
        "if_branches": zero_depth_models.if_branches(),
        "loop_with_nested_if": zero_depth_models.loop_with_nested_if(),
        "scan_body": zero_depth_models.scan_body(),
        "unknown_rank-none": zero_depth_models.unknown_rank("none"),
        "unknown_rank-add": zero_depth_models.unknown_rank("add"),
        "opset_13_empty_data": zero_depth_models.opset_13_empty_data(),
    }


def _output(run: list[dict[str, Any]], k: int = 0) -> np.ndarray:
    return np.array(run[k]["y"], dtype=run[k]["dtype"]).reshape(run[k]["shape"])


def _expected(model: onnx.ModelProto, feed_sets: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """ONNX's reference for each feed set; where onnxruntime runs the node, onnxruntime agrees."""
    want = [onnx_reference_run(model, feeds) for feeds in feed_sets]
    if not ort_crashes_on_zero_depth_scatternd():
        from .oracle import ort_run

        for feeds, expected in zip(feed_sets, want, strict=True):
            theirs = ort_run(model, feeds)
            assert all(np.array_equal(t, w) for t, w in zip(theirs, expected, strict=True)), (
                theirs,
                expected,
            )
    return want


def _assert_runs(got: dict[str, Any], want: list[list[np.ndarray]]) -> None:
    assert len(got["runs"]) == len(want)
    for run, expected in zip(got["runs"], want, strict=True):
        values = [_output(run, k) for k in range(len(run))]
        assert len(values) == len(expected)
        for value, w in zip(values, expected, strict=True):
            assert value.shape == w.shape and np.array_equal(value, w), (value, w)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_a_session_computes_onnx_answer_and_the_process_lives(
    outcomes: dict[str, Outcome], case: tuple, engine: str
) -> None:
    got = outcomes[f"session/{_case_id(case)}/{engine}"].ok()
    model, feeds = _case(*case)
    (want,) = onnx_reference_run(model, feeds)
    y = _output(got["runs"][0])
    assert y.shape == want.shape and np.array_equal(y, want), (y, want)
    if not ort_crashes_on_zero_depth_scatternd():
        from .oracle import ort_run

        (theirs,) = ort_run(model, feeds)
        assert np.array_equal(theirs, want)  # onnxruntime that runs it agrees with ONNX's reference


def test_validate_and_inspect_with_inputs_live(outcomes: dict[str, Outcome]) -> None:
    validate = outcomes["cli/validate"].ok()
    assert validate["code"] == 0, validate["stderr"]
    assert "verdict: MATCH" in validate["stdout"]
    # the verdict says where the reference for the node came from when onnxruntime would have crashed
    assert ("ONNX-semantics computation" in validate["stdout"]) == ort_crashes_on_zero_depth_scatternd()
    inspect = outcomes["cli/inspect"].ok()
    # exit 1: not every node translates to DirectML (this one falls back), never a signal
    assert inspect["code"] == 1, inspect["stderr"]
    assert "INDEX_TUPLE_EMPTY" in inspect["stdout"] and "Verdict:" in inspect["stdout"]


def test_the_crash_is_named_in_the_record_where_onnxruntime_crashes(outcomes: dict[str, Outcome]) -> None:
    got = outcomes[f"session/{_case_id(CASES[0])}/partitioned"].ok()
    assert CASES[0][1][-1] == 0 and not CASES[0][3]  # fed indices: the run-time fallback names the reason
    assert ("SIGFPE" in json.dumps(got["reasons"])) == ort_crashes_on_zero_depth_scatternd()


@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_last_dimension_0_only_at_run_time(
    outcomes: dict[str, Outcome], engine: str, reduction: str
) -> None:
    """Indices declared ``["a", "k"]``: 0 in one run, 1 in the next; each run is ONNX's answer."""
    got = outcomes[f"dynamic/{reduction}/{engine}"].ok()
    model = _dynamic_model(reduction, None)
    want = [onnx_reference_run(model, feeds)[0] for feeds in DYNAMIC_FEEDS]
    assert [_output(run).tolist() for run in got["runs"]] == [w.tolist() for w in want]


LEFTOVERS = ["if_branches", "loop_with_nested_if", "scan_body"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", LEFTOVERS)
def test_inside_control_flow_bodies(outcomes: dict[str, Outcome], name: str, engine: str) -> None:
    """The node in an If branch (fed indices [2, 0]), in an If nested in a Loop body (indices of unknown
    rank from the outer graph: 0 in one run, 1 in the next), in a Scan body (a constant [1, 0])."""
    got = outcomes[f"{name}/{engine}"].ok()
    _assert_runs(got, _expected(*_leftovers()[name]))


@pytest.mark.parametrize("engine", [*ENGINES, "ort"])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_indices_of_unknown_rank(outcomes: dict[str, Outcome], reduction: str, engine: str) -> None:
    """Indices declared with no shape at all: rank 3 with last dimension 0, rank 2 with 0, then [1, 1];
    every engine and onnxruntime's own session of the whole model (``ort``: dmlshim's
    ``OrtInferenceSession``) give ONNX's answer, and the process lives."""
    got = outcomes[f"unknown_rank-{reduction}/{engine}"].ok()
    _assert_runs(got, _expected(*_leftovers()[f"unknown_rank-{reduction}"]))


@pytest.mark.parametrize("engine", ENGINES)
def test_empty_data_before_opset_14(outcomes: dict[str, Outcome], engine: str) -> None:
    """Data [2, 0] at opset 13, where Reshape cannot take the data's shape (its 0 reads as "copy")."""
    got = outcomes[f"opset_13_empty_data/{engine}"].ok()
    _assert_runs(got, _expected(*_leftovers()["opset_13_empty_data"]))


@pytest.mark.parametrize("how", ["cpu", "ort"])
def test_indices_of_unknown_rank_fed_a_scalar_are_refused_as_onnxruntime_refuses(
    outcomes: dict[str, Outcome], how: str
) -> None:
    """Indices of rank 0 at run time: onnxruntime's own refusal of the node (the guard takes the node
    itself), in the whole-model session and onnxruntime's own."""
    got = outcomes[f"rank0/{how}"]
    assert got.crashed is None and got.error is not None, got
    assert "rank larger than 0" in got.error and "ScatterND" in got.error, got.error


@pytest.fixture(scope="module")
def external_expected(tmp_path_factory: pytest.TempPathFactory) -> list[list[np.ndarray]]:
    _, model, feed_sets = zero_depth_models.external_weights(tmp_path_factory.mktemp("external_reference"))
    return _expected(model, feed_sets)


@pytest.mark.parametrize("how", ["ort/none", "ort/own", "session/optimized"])
def test_a_model_file_with_external_weights(
    outcomes: dict[str, Outcome], external_expected: list[list[np.ndarray]], how: str
) -> None:
    """A model file whose weight is in a file beside it, handed to onnxruntime by path (as dmlshim does for
    ``optimized_model_filepath``, the ``ort`` cases directly): the rewritten bytes keep the external
    reference and onnxruntime reads the weight from the model's folder."""
    _assert_runs(outcomes[f"external/{how}"].ok(), external_expected)


def test_external_weights_with_a_programs_own_options(
    outcomes: dict[str, Outcome], external_expected: list[list[np.ndarray]]
) -> None:
    """A program's own SessionOptions are never changed, so where onnxruntime would crash and the folder
    cannot be given, the refusal names the node, the op and the rule (never a crash)."""
    got = outcomes["external/ort/callers"]
    if not ort_crashes_on_zero_depth_scatternd():
        _assert_runs(got.ok(), external_expected)
        return
    assert got.crashed is None and got.error_type == "NotSupportedError", got
    assert "'scatter' (ScatterND)" in str(got.error) and "SIGFPE" in str(got.error)
