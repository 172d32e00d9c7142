"""Hostile round 11 (issue 35 item 6): the drop-in ``InferenceSession`` given session options onnxruntime
refuses.

``SessionOptions.log_severity_level`` outside onnxruntime's severities (0 verbose .. 4 fatal) makes
onnxruntime refuse the session ("Invalid session log severity level"). dmlshim built the partitioned
session anyway (a model whose only node is emulated builds no onnxruntime session with those options)
and, with initializers, blamed the refusal on ``add_initializer`` ("onnxruntime refuses an initializer
added through the session options") though none was added."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import DmlShimError

from .oracle import IR_VERSION


def _model(with_initializer: bool) -> bytes:
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, [2])]
    inits = []
    if with_initializer:
        inits = [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "d")]
    else:
        inputs.insert(0, helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3]))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        "h11",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def _options(level: int) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = level
    return so


@pytest.mark.parametrize("level", [5, 7, 1000])
@pytest.mark.parametrize("with_initializer", [False, True])
@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu", None])
def test_a_log_severity_onnxruntime_refuses_is_refused_as_onnxruntime_refuses_it(
    level: int, with_initializer: bool, engine: str | None
) -> None:
    model = _model(with_initializer)
    with pytest.raises(RuntimeError, match="Invalid session log severity level"):
        ort.InferenceSession(model, _options(level), providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError) as caught:
        dmlshim.InferenceSession(model, _options(level), engine=engine)
    assert isinstance(caught.value, DmlShimError)
    message = str(caught.value)
    assert "log severity level" in message and str(level) in message
    assert "initializer" not in message


@pytest.mark.parametrize("level", [-1, 0, 4])
def test_a_log_severity_onnxruntime_takes_still_runs(level: int) -> None:
    model = _model(True)
    feeds = {"i": np.array([3, 0], np.int64)}
    expected = ort.InferenceSession(model, _options(level), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    for engine in ("partitioned", "customop", None):
        got = dmlshim.InferenceSession(model, _options(level), engine=engine).run(None, feeds)
        np.testing.assert_array_equal(got[0], expected[0])


def test_an_empty_profile_prefix_names_the_profile_as_onnxruntime_does(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``profile_file_prefix = ""``: onnxruntime writes ``_<date>_<time>.json``; dmlshim wrote
    ``onnxruntime_profile__...`` (the default prefix), a name the caller never chose."""
    monkeypatch.chdir(tmp_path)
    model = _model(False)
    feeds = {"d": np.zeros((4, 3), np.float32), "i": np.array([0, 1], np.int64)}
    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, ""
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    theirs.run(None, feeds)
    their_name = theirs.end_profiling()
    assert their_name.startswith("_")
    for engine in ("partitioned", "customop", None):
        so = ort.SessionOptions()
        so.enable_profiling, so.profile_file_prefix = True, ""
        ours = dmlshim.InferenceSession(model, so, engine=engine)
        ours.run(None, feeds)
        name = ours.end_profiling()
        assert name.startswith("_") and (tmp_path / name).is_file(), name


def _float8_model() -> bytes:
    """A gather between quantization nodes whose float8e4m3fn quantized values are an output."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["y"], axis=0),
            helper.make_node("QuantizeLinear", ["y", "sc", "zp"], ["q"]),
        ],
        "h11_f8",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("q", TensorProto.FLOAT8E4M3FN, None),
        ],
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "sc"),
            helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0]),
        ],
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 21)])
    return model.SerializeToString()


@pytest.mark.parametrize("engine", ["partitioned", "customop", "cpu", None])
def test_a_float8e4m3fn_output_is_returned_as_onnxruntime_returns_it(engine: str | None) -> None:
    """onnxruntime's ``run`` returns a float8e4m3fn output (alone of the float8 types) as its bytes, a
    uint8 array; dmlshim refused it ("numpy cannot hold"), so a program running under onnxruntime failed."""
    model = _float8_model()
    feeds = {
        "d": np.linspace(-300, 300, 12, dtype=np.float32).reshape(4, 3),
        "i": np.array([3, -4], np.int64),
    }
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    reference = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    expected = reference.run(None, feeds)
    assert expected[1].dtype == np.uint8  # onnxruntime's own answer, not dmlshim's
    session = dmlshim.InferenceSession(model, engine=engine)
    for _ in range(5):  # past the proved runs
        got = session.run(None, feeds)
        for want, have in zip(expected, got, strict=True):
            assert have.dtype == want.dtype
            np.testing.assert_array_equal(have, want)
    only_q = session.run(["q"], feeds)
    np.testing.assert_array_equal(only_q[0], expected[1])
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("q")
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], expected[1])


def _shape_of_name(name: str) -> str:
    return re.sub(r"\d", "9", os.path.basename(name))


def test_the_profile_is_named_as_the_installed_onnxruntime_names_it(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """onnxruntime 1.32 ends a profile's name with milliseconds (``p_2026-11-29_17-55-28_815.json``),
    1.24 does not (``p_2026-11-29_17-55-28.json``); dmlshim always added them."""
    monkeypatch.chdir(tmp_path)
    model = _model(False)
    feeds = {"d": np.zeros((4, 3), np.float32), "i": np.array([0, 1], np.int64)}
    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, "p"
    theirs = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    theirs.run(None, feeds)
    expected = _shape_of_name(theirs.end_profiling())
    for engine in ("partitioned", "customop", None):
        so = ort.SessionOptions()
        so.enable_profiling, so.profile_file_prefix = True, "p"
        ours = dmlshim.InferenceSession(model, so, engine=engine)
        ours.run(None, feeds)
        assert _shape_of_name(ours.end_profiling()) == expected


@pytest.mark.parametrize("engine", ["partitioned", "customop"])
def test_an_added_initializer_updated_in_place_is_read_on_the_next_run(engine: str) -> None:
    """onnxruntime keeps using the OrtValue given to ``add_initializer`` (it must outlive the session):
    a caller who updates it in place between runs (swapping weights without a new session) gets the new
    values from the next run on; so does dmlshim's emulated Gather (it kept the values of the session's
    build before)."""
    model = _model(True)
    feeds = {"i": np.array([0, 3], np.int64)}

    def runs(make: Any) -> list[list[float]]:
        ov = ort.OrtValue.ortvalue_from_numpy(np.full((4, 3), 2, np.float32))
        so = ort.SessionOptions()
        so.add_initializer("d", ov)
        session = make(so)
        first = session.run(None, feeds)[0]
        ov.update_inplace(np.full((4, 3), 5, np.float32))
        return [first.ravel().tolist(), session.run(None, feeds)[0].ravel().tolist()]

    expected = runs(lambda so: ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]))
    assert expected[1] == [5.0] * 6  # onnxruntime's own answer
    assert runs(lambda so: dmlshim.InferenceSession(model, so, engine=engine)) == expected


@pytest.mark.parametrize("level", [None, 3.0, b"3_0", ["3_0"], object()])
def test_a_feature_level_of_another_type_is_a_clear_error(level: Any) -> None:
    """``feature_level=None`` (or a float, bytes, a list) ended in a bare ``AttributeError`` ('NoneType'
    object has no attribute 'strip') instead of dmlshim's error naming the argument and the known levels."""
    with pytest.raises(DmlShimError, match=r"unknown DirectML feature level .*known levels: .*5_0"):
        dmlshim.InferenceSession(_model(False), feature_level=level)
