"""dmlshim against onnxruntime on the calls where the two used to differ (measured with onnxruntime's own
Python API tests, see docs/coming-from.md): each test makes the same call on onnxruntime and on dmlshim and
expects onnxruntime's answer (its exception class, its values, its reported options) from dmlshim too."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi import _pybind_state as C
from onnxruntime.capi import onnxruntime_pybind11_state as state

import dmlshim
from dmlshim import BadInputError, DmlShimError


def _options() -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return so


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, tuple[int, list[Any]]],
    out: int = TensorProto.FLOAT,
    **kw: Any,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "parity",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", out, None)],
        kw.get("initializer", []),
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def _raised(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def _pair(model: bytes | str, so: Any = None, **kw: Any) -> tuple[Any, Any]:
    ours = dmlshim.InferenceSession(model, so or _options(), **kw)
    theirs = onnxruntime.InferenceSession(model, so or _options(), providers=["CPUExecutionProvider"])
    return ours, theirs


NEG = _model([helper.make_node("Neg", ["x"], ["y"])], {"x": (TensorProto.FLOAT, [2])}).SerializeToString()
THREE_NODES = _model(
    [
        helper.make_node("Add", ["x", "x"], ["a"], name="add_0"),
        helper.make_node("Mul", ["a", "x"], ["m"], name="mul_0"),
        helper.make_node("Add", ["m", "x"], ["y"], name="add_1"),
    ],
    {"x": (TensorProto.FLOAT, [2])},
).SerializeToString()


# --- feeds -----------------------------------------------------------------------------------------

FEEDS: dict[str, tuple[int, Any]] = {
    "python float": (TensorProto.FLOAT, 1.5),
    "numpy scalar": (TensorProto.FLOAT, np.float32(1.5)),
    "tuple": (TensorProto.FLOAT, (1.0, 2.0)),
    "bytes": (TensorProto.FLOAT, b"ab"),
    "str": (TensorProto.FLOAT, "ab"),
    "None": (TensorProto.FLOAT, None),
    "dict": (TensorProto.FLOAT, {"a": 1}),
    "ragged list": (TensorProto.FLOAT, [[1.0], [2.0, 3.0]]),
    "list of words": (TensorProto.FLOAT, ["a", "b"]),
    "list overflowing int32": (TensorProto.INT32, [1, 2**40]),
    "list of floats into int64": (TensorProto.INT64, [1.5, -2.5]),
    "list of ints into string": (TensorProto.STRING, [1, 2]),
    "list of bools into float": (TensorProto.FLOAT, [True, False]),
}


@pytest.mark.parametrize("case", sorted(FEEDS))
def test_feeds_mean_what_they_mean_to_onnxruntime(case: str) -> None:
    elem, value = FEEDS[case]
    model = _model([helper.make_node("Identity", ["x"], ["y"])], {"x": (elem, [2])}, elem).SerializeToString()
    ours, theirs = _pair(model)
    try:
        want = theirs.run(None, {"x": value})
    except Exception as exc:  # onnxruntime refuses: dmlshim refuses with its class, and its own
        got = _raised(lambda: ours.run(None, {"x": value}))
        assert isinstance(got, type(exc)), (case, type(got).__mro__, type(exc))
        assert isinstance(got, BadInputError) and "'x'" in str(got)
        return
    got_values = ours.run(None, {"x": value})
    assert got_values[0].dtype == want[0].dtype and got_values[0].tolist() == want[0].tolist(), case


def test_missing_feed_says_what_onnxruntime_says() -> None:
    model = _model(
        [helper.make_node("And", ["a", "b"], ["y"])],
        {"a": (TensorProto.BOOL, [2]), "b": (TensorProto.BOOL, [2])},
        TensorProto.BOOL,
    ).SerializeToString()
    ours, theirs = _pair(model)
    feeds = {"b": np.array([True, False])}
    want = _raised(lambda: theirs.run(None, feeds))
    got = _raised(lambda: ours.run(None, feeds))
    assert isinstance(want, ValueError) and isinstance(got, ValueError)
    sentence = str(want).rstrip(".")
    assert sentence.startswith("Required inputs") and sentence in str(got)


# --- errors of the gather/scatter nodes ------------------------------------------------------------


@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"])
def test_out_of_range_index_is_onnxruntimes_class(op: str) -> None:
    nd = op.endswith("ND")
    inputs: dict[str, tuple[int, list[Any]]] = {
        "data": (TensorProto.FLOAT, [2, 2]),
        "idx": (TensorProto.INT64, [1, 2] if nd else [2, 2]),
    }
    feeds: dict[str, Any] = {
        "data": np.ones((2, 2), np.float32),
        "idx": np.array([[0, 5]] if nd else [[0, 5], [1, 0]], np.int64),
    }
    names = ["data", "idx"]
    if op.startswith("Scatter"):
        inputs["upd"] = (TensorProto.FLOAT, [1] if nd else [2, 2])
        feeds["upd"] = np.ones((1,) if nd else (2, 2), np.float32)
        names.append("upd")
    model = _model([helper.make_node(op, names, ["y"], name="n")], inputs).SerializeToString()
    ours, theirs = _pair(model)
    want = _raised(lambda: theirs.run(None, feeds))
    got = _raised(lambda: ours.run(None, feeds))
    assert isinstance(got, type(want)), (op, type(got).__mro__, type(want))
    assert isinstance(got, dmlshim.IndexOutOfRangeError) and got.node == "n"


# --- providers and placement -----------------------------------------------------------------------


def test_set_providers_refuses_an_unknown_provider_type() -> None:
    ours, theirs = _pair(NEG)
    with pytest.warns(UserWarning):
        want = _raised(lambda: theirs.set_providers(["CPUExecutionProvider", "NoSuchProvider"]))
    with pytest.warns(UserWarning):
        got = _raised(lambda: ours.set_providers(["CPUExecutionProvider", "NoSuchProvider"]))
    assert type(want) is RuntimeError and isinstance(got, RuntimeError) and isinstance(got, DmlShimError)
    assert "Unknown Provider Type: NoSuchProvider" in str(
        want
    ) and "Unknown Provider Type: NoSuchProvider" in str(got)
    x = np.array([1.0, -2.0], np.float32)
    assert ours.run(None, {"x": x})[0].tolist() == [-1.0, 2.0]  # dmlshim's session stays usable


def test_graph_assignment_matches_onnxruntime() -> None:
    so = _options()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    ours, theirs = _pair(THREE_NODES, so, providers=["CPUExecutionProvider"])

    def listed(session: Any) -> list[tuple[str, list[tuple[str, str, str]]]]:
        return [
            (s.ep_name, [(n.domain, n.op_type, n.name) for n in s.get_nodes()])
            for s in session.get_provider_graph_assignment_info()
        ]

    assert listed(ours) == listed(theirs)
    plain_ours, plain_theirs = _pair(THREE_NODES)
    want = _raised(plain_theirs.get_provider_graph_assignment_info)
    got = _raised(plain_ours.get_provider_graph_assignment_info)
    assert (
        type(want) is state.Fail
        and isinstance(got, state.Fail)
        and not isinstance(got, state.InvalidArgument)
    )
    assert "Session configuration entry 'session.record_ep_graph_assignment_info'" in str(got)


def test_sess_run_with_ort_values_returns_an_ortvaluevector() -> None:
    ours, theirs = _pair(NEG)
    x = onnxruntime.OrtValue.ortvalue_from_numpy(np.array([3.0, -4.0], np.float32))
    results = [
        s._sess.run_with_ort_values({"x": x._get_c_value()}, ["y"], C.RunOptions()) for s in (ours, theirs)
    ]
    assert all(isinstance(r, C.OrtValueVector) for r in results)
    assert results[0][0].numpy().tolist() == results[1][0].numpy().tolist() == [-3.0, 4.0]


# --- session options -------------------------------------------------------------------------------


def _external_model(folder: Path) -> Path:
    """x + c, with c in an external file named c.bin (which is then removed)."""
    c = numpy_helper.from_array(np.array([10.0, 20.0], np.float32), "c")
    model = _model(
        [helper.make_node("Add", ["x", "c"], ["y"])], {"x": (TensorProto.FLOAT, [2])}, initializer=[c]
    )
    path = folder / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="c.bin", size_threshold=0)
    return path


def test_external_data_from_files_in_memory(tmp_path: Path) -> None:
    path = _external_model(tmp_path)
    (tmp_path / "c.bin").unlink()  # the values now come from memory only (1.5, 2.5; the file had 10, 20)
    so = _options()
    content = np.array([1.5, 2.5], np.float32).tobytes()  # onnxruntime keeps a pointer: keep it alive
    so.add_external_initializers_from_files_in_memory(["c.bin"], [content], [len(content)])
    ours, theirs = _pair(str(path), so)
    x = {"x": np.array([1.0, 1.0], np.float32)}
    assert ours.run(None, x)[0].tolist() == theirs.run(None, x)[0].tolist() == [2.5, 3.5]
    no_file = _raised(lambda: onnxruntime.InferenceSession(str(path), _options()))
    assert isinstance(_raised(lambda: dmlshim.InferenceSession(str(path), _options())), type(no_file))


def _config_model(config: dict[str, Any]) -> bytes:
    model = onnx.load_from_string(NEG)
    helper.set_model_props(model, {"ort_config": json.dumps({"session_options": config})})
    return model.SerializeToString()


FIELDS = ("inter_op_num_threads", "intra_op_num_threads", "execution_mode", "graph_optimization_level")


def test_session_options_from_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _config_model(
        {"inter_op_num_threads": 3, "intra_op_num_threads": 2, "graph_optimization_level": 1}
    )
    ours, theirs = _pair(model)  # without the switch: the caller's options
    assert [getattr(ours.get_session_options(), f) for f in FIELDS] == [
        getattr(theirs.get_session_options(), f) for f in FIELDS
    ]
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    ours, theirs = _pair(model)
    got = [getattr(ours.get_session_options(), f) for f in FIELDS]
    assert got == [getattr(theirs.get_session_options(), f) for f in FIELDS]
    assert got[:2] == [3, 2]
    x = {"x": np.array([1.0, 2.0], np.float32)}
    assert ours.run(None, x)[0].tolist() == [-1.0, -2.0]
    bad = _config_model({"enable_profiling": True})  # onnxruntime wants an integer there
    want = _raised(lambda: onnxruntime.InferenceSession(bad, _options(), providers=["CPUExecutionProvider"]))
    got_error = _raised(lambda: dmlshim.InferenceSession(bad, _options()))
    assert isinstance(got_error, type(want)) and isinstance(got_error, DmlShimError)
    assert "enable_profiling" in str(got_error)


def test_read_config_from_model_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _config_model({"intra_op_num_threads": 2})
    for env in ("0", "1"):
        monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", env)
        ours = dmlshim.InferenceSession(model, _options(), read_config_from_model=1)
        theirs = onnxruntime.InferenceSession(
            model, _options(), providers=["CPUExecutionProvider"], read_config_from_model=1
        )
        want = theirs.get_session_options().intra_op_num_threads
        assert ours.get_session_options().intra_op_num_threads == want == (2 if env == "1" else 1), env


def test_a_map_feed_onnxruntime_cannot_read_keeps_its_class() -> None:
    values = helper.make_tensor_type_proto(TensorProto.FLOAT, [])
    map_type = helper.make_map_type_proto(TensorProto.INT64, values)
    graph = helper.make_graph(
        [helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", int64_vocabulary=[0, 1])],
        "map_feed",
        [helper.make_value_info("m", map_type)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()
    ours, theirs = _pair(model)
    good = {"m": {0: 1.5, 1: 2.5}}
    assert ours.run(None, good)[0].tolist() == theirs.run(None, good)[0].tolist()
    bad = {"m": {0: 1.5, "a": 2.5}}  # a string key in a map of int64 keys
    want = _raised(lambda: theirs.run(None, bad))
    got = _raised(lambda: ours.run(None, bad))
    assert type(want) is RuntimeError and isinstance(got, RuntimeError) and isinstance(got, DmlShimError)
    assert "int64" in str(got)
