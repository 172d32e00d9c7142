"""A caller's ``SessionOptions`` and a model read without its weights (issue 22): the engine's onnxruntime
sessions get a copy of the options that reads the weights from the model's files, the caller's object is
left exactly as it was, every setting means what it means to onnxruntime, and outputs are onnxruntime's
(run from the same file with the same options)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.errors import BadInputError, BadModelError
from dmlshim.execute.weights import file_slices as weight_file
from dmlshim.ort.free_dims import overrides_by_name
from dmlshim.ort.session_options import (
    COPIED_ATTRIBUTES,
    COPIED_CONFIG_KEYS,
    EXTERNAL_FILE_KEY,
    config_entry,
    sharable_options,
)
from dmlshim.runtime.options_copy import FOLDER_KEY
from tests.oracle import IR_VERSION
from tests.oracle import assert_same_bits as _same
from tests.test_weightless_load import LARGE, _model, _save

BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


@pytest.fixture(autouse=True)
def walk_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walk graphs of any size (only graphs of several MB are walked otherwise)."""
    monkeypatch.setattr(weight_file, "WALK_MIN_GRAPH_BYTES", 0)


ENGINE_MODELS: list[onnx.ModelProto] = []


@pytest.fixture(autouse=True)
def engine_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the model each session hands its engine (the latest last)."""
    from dmlshim.ort import session as session_module

    real = session_module.get_engine_factory

    def factory(name: str) -> Any:
        make = real(name)

        def build(model: onnx.ModelProto, config: Any) -> Any:
            ENGINE_MODELS.append(model)
            return make(model, config)

        return build

    ENGINE_MODELS.clear()
    monkeypatch.setattr(session_module, "get_engine_factory", factory)


def _options(**settings: Any) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # reference sessions single-threaded (a ScatterND runs in them)
    for name, value in settings.items():
        setattr(so, name, value)
    return so


def _snapshot(so: ort.SessionOptions) -> dict[str, Any]:
    """Everything onnxruntime gives back of ``so``: every property and the config entries dmlshim knows
    (and the one it adds to its own copies)."""
    props = {n: getattr(so, n) for n in dir(so) if not n.startswith("_") and not callable(getattr(so, n))}
    keys = (*COPIED_CONFIG_KEYS, FOLDER_KEY, EXTERNAL_FILE_KEY, "session.save_model_format")
    return {"properties": props, "entries": {k: config_entry(so, k) for k in keys}}


def _reference(path: Path, so: ort.SessionOptions, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs for the model file with the caller's options (profiling and optimized-model
    output off: the reference must write nothing)."""
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return list(ref.run(None, dict(feeds)))


def _engine_options(session: dmlshim.InferenceSession) -> list[ort.SessionOptions]:
    return [s.get_session_options() for _, s in session.engine.ort_sessions()]


def _large_held() -> set[str]:
    """The large initializers whose bytes the latest engine's model holds (the others it refers to in
    the model's files)."""
    return {t.name for t in ENGINE_MODELS[-1].graph.initializer if t.HasField("raw_data")} & set(LARGE)


@pytest.mark.parametrize("external", [False, True])
def test_caller_options_keep_the_weights_in_the_file(tmp_path: Path, external: bool) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external)
    so = _options(
        graph_optimization_level=BASIC,
        enable_mem_pattern=False,
        enable_cpu_mem_arena=False,
        use_deterministic_compute=True,
        log_severity_level=3,
        logid="caller",
    )
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    before = _snapshot(so)
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so)
    assert session._loaded.weightless and session._loaded.proto.ByteSize() < 4096
    assert not _large_held()  # the engine's model refers to the weights in the file
    for _ in range(8):  # through the path trial: the whole-model check and the partitioned steps
        _same(session.run(None, feeds), expected)
    assert _snapshot(so) == before  # the caller's object is as it was
    assert session._sess_options_initial is so  # get_session_options(): a copy
    assert session.get_session_options().logid == "caller"
    used = _engine_options(session)
    assert used and all(u is not so for u in used)
    for opts in used:  # a copy that means what the caller's options mean, told where the weights are
        for name in COPIED_ATTRIBUTES:
            assert getattr(opts, name) == getattr(so, name), name
        assert config_entry(opts, "session.set_denormal_as_zero") == "1"
        assert config_entry(opts, "session.intra_op.allow_spinning") == "0"
        # the model's folder for external data; the session's own copy of inline weights otherwise
        folder = str(tmp_path) if external else session._loaded.snapshot.folder
        assert config_entry(opts, FOLDER_KEY) == folder


def test_free_dimension_overrides_reach_the_copy(tmp_path: Path) -> None:
    """A batch dimension fixed by name: the session reports it fixed, the engine's copy fixes it too, and
    a feed of another batch is refused as onnxruntime refuses it."""
    rng = np.random.default_rng(5)
    table = rng.standard_normal((1024, 32)).astype(np.float32)
    weight = rng.standard_normal((32, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
            helper.make_node("MatMul", ["rows", "weight"], ["y"], name="proj"),
        ],
        "batched",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    path = tmp_path / "batched.onnx"
    onnx.save(model, str(path))
    so = _options()
    so.add_free_dimension_override_by_name("batch", 2)
    before = _snapshot(so)
    feeds = {"ids": np.array([[1, 2, 1023], [0, 5, 9]], dtype=np.int64)}
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    session = dmlshim.InferenceSession(str(path), so)
    assert session._copied_dims == {"batch": 2}
    assert session.get_inputs()[0].shape == ref.get_inputs()[0].shape == [2, 3]
    assert not _large_held() and session._loaded.weightless
    _same(session.run(None, feeds), list(ref.run(None, feeds)))
    assert _snapshot(so) == before
    bad = {"ids": np.zeros((3, 3), dtype=np.int64)}
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own class, checked below
        ref.run(None, bad)
    with pytest.raises(BadInputError):
        session.run(None, bad)


def test_an_override_by_denotation_gets_the_whole_model(tmp_path: Path) -> None:
    """An override a copy cannot repeat by name: the engine gets the caller's object and every weight."""
    model, feeds = _model()
    ids = model.graph.input[0]
    dim = ids.type.tensor_type.shape.dim[0]
    dim.Clear()
    dim.dim_param, dim.denotation = "n", "DATA_BATCH"
    path = _save(model, tmp_path, external=False)
    so = _options()
    so.add_free_dimension_override_by_denotation("DATA_BATCH", 4)
    before = _snapshot(so)
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so)
    assert session.get_inputs()[0].shape == [4]
    assert session._copied_dims is None
    assert _large_held() == set(LARGE)  # read into the engine's model
    assert session.engine.config.sess_options is so  # type: ignore[attr-defined]
    _same(session.run(None, feeds), expected)
    assert _snapshot(so) == before


def test_overrides_by_name_repeat_only_what_a_name_fixes() -> None:
    model, _ = _model()
    shape = model.graph.input[0].type.tensor_type.shape
    shape.dim[0].Clear()
    shape.dim[0].dim_param = "n"
    pos = model.graph.input[1].type.tensor_type.shape
    pos.dim[0].Clear()
    pos.dim[0].dim_param = "n"
    inputs = dmlshim.InferenceSession(model).get_inputs()  # nothing fixed
    assert overrides_by_name(model, inputs) == {}
    both = [dataclasses.replace(a, dims=(4, *a.dims[1:])) for a in inputs]
    assert overrides_by_name(model, both) == {"n": 4}
    one = [both[0], inputs[1]]  # "n" fixed in one input only: not an override by name
    assert overrides_by_name(model, one) is None
    pos.dim[0].denotation = "DATA_BATCH"
    assert overrides_by_name(model, both) is None


@pytest.mark.filterwarnings("ignore:Specified 'providers'")  # onnxruntime's, for the reference session
def test_what_a_copy_cannot_carry_keeps_the_callers_object(tmp_path: Path) -> None:
    """An operator only a custom-op library defines, or providers named in the options: the engine must
    build with the caller's object, so it gets the whole model."""
    model, _ = _model()
    custom = onnx.ModelProto()
    custom.CopyFrom(model)
    custom.graph.node.append(helper.make_node("Frobnicate", ["y"], ["z"], domain="example.custom"))
    custom.opset_import.append(helper.make_opsetid("example.custom", 1))
    assert sharable_options(_options(), custom, ()) is None
    assert sharable_options(_options(), model, ()) == {}
    assert sharable_options(None, model, ()) == {}
    feeds = _model()[1]
    path = _save(model, tmp_path, external=False)
    so = _options()
    so.add_provider("CPUExecutionProvider", {})
    before = _snapshot(so)
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so)
    assert session._copied_dims is None and _large_held() == set(LARGE)
    assert session.engine.config.sess_options is so  # type: ignore[attr-defined]
    _same(session.run(None, feeds), expected)
    assert _snapshot(so) == before


def test_add_initializer_on_a_weight_left_in_the_file(tmp_path: Path) -> None:
    """A value the caller adds for a large inline initializer replaces it, in onnxruntime's partitions and
    in the emulated Gather that reads it; the rest are still read from the file."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    so = _options(graph_optimization_level=BASIC)
    table = np.full((512, 64), 0.25, dtype=np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(table)
    so.add_initializer("table", value)
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so)
    assert session._loaded.weightless and session._copied_dims == {}
    # the added value is fed on every run from the caller's OrtValue (a graph input of the engine's model)
    assert _large_held() == set() and "table" in {v.name for v in ENGINE_MODELS[-1].graph.input}
    for _ in range(8):
        _same(session.run(None, feeds), expected)
    unchanged = _reference(path, _options(graph_optimization_level=BASIC), feeds)
    assert not np.array_equal(expected[0], unchanged[0])  # the added value does change the outputs


def test_add_external_initializers_names_only_what_the_file_keeps_outside(tmp_path: Path) -> None:
    model, feeds = _model()
    inline = _save(model, tmp_path, external=False)
    so = _options()
    weight = np.zeros((64, 512), dtype=np.float32)
    so.add_external_initializers(["weight"], [ort.OrtValue.ortvalue_from_numpy(weight)])
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail):  # onnxruntime refuses it too
        ort.InferenceSession(str(inline), so, providers=["CPUExecutionProvider"])
    with pytest.raises(BadInputError, match="holds inline"):
        dmlshim.InferenceSession(str(inline), so)
    ext = tmp_path / "ext"
    ext.mkdir()
    outside = _save(model, ext, external=True)
    expected = _reference(outside, so, feeds)
    session = dmlshim.InferenceSession(str(outside), so)
    assert session._loaded.weightless and session._loaded.supplied == {"weight"}
    _same(session.run(None, feeds), expected)


@pytest.mark.parametrize("added", [False, True])
def test_optimized_model_from_a_model_read_without_its_weights(tmp_path: Path, added: bool) -> None:
    """``optimized_model_filepath`` holds the whole optimized model, weights included, also when
    onnxruntime reads the model from dmlshim's weightless proto (a value added through the options)."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    target = tmp_path / "optimized.onnx"
    so = _options(optimized_model_filepath=str(target))
    plain = _options()
    if added:
        cols = ort.OrtValue.ortvalue_from_numpy(np.arange(16384, dtype=np.int64) % 64)
        so.add_initializer("cols", cols)
        plain.add_initializer("cols", cols)
    before = _snapshot(so)
    session = dmlshim.InferenceSession(str(path), so)
    assert session._loaded.weightless and _large_held() == set()  # an added value is fed on every run
    assert _snapshot(so) == before
    written = onnx.load(str(target), load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)
    got = session.run(None, feeds)
    _same(got, _reference(path, plain, feeds))
    _same(_reference(target, _options(), feeds), got)


def test_profiling_with_a_model_read_without_its_weights(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    so = _options(enable_profiling=True, profile_file_prefix=str(tmp_path / "prof"))
    before = _snapshot(so)
    session = dmlshim.InferenceSession(str(path), so)
    assert session._loaded.weightless and not _large_held()
    _same(session.run(None, feeds), _reference(path, _options(), feeds))
    profile = Path(session.end_profiling())
    assert profile.is_file() and profile.parent == tmp_path
    assert _snapshot(so) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == [profile.name]


def test_external_data_changed_before_the_engine_is_rebuilt_is_refused(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    so = _options()
    session = dmlshim.InferenceSession(str(path), so)
    _same(session.run(None, feeds), _reference(path, so, feeds))
    data = next(p for p in tmp_path.iterdir() if p.suffix != ".onnx")
    with open(data, "ab") as f:
        f.write(b"\0")
    os.utime(data, ns=(1, 1))
    with pytest.raises(BadModelError, match="changed since the session was created") as caught:
        session.set_providers(["DmlExecutionProvider"])  # the engine is built again
    assert caught.value.path == str(path)


def test_inline_weights_changed_before_the_engine_is_rebuilt_are_the_sessions_own(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    so = _options()
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so)
    _same(session.run(None, feeds), expected)
    path.write_bytes(b"\0" * path.stat().st_size)
    session.set_providers(["DmlExecutionProvider"])  # the engine is built again, from the session's copy
    _same(session.run(None, feeds), expected)


def test_a_file_in_memory_wins_over_the_one_on_disk(tmp_path: Path) -> None:
    """``add_external_initializers_from_files_in_memory`` naming a file the model's folder also has:
    onnxruntime reads the one in memory, for every node, so the emulated Gathers read it too."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    other = onnx.ModelProto()
    other.CopyFrom(model)
    for tensor in other.graph.initializer:  # the same layout, other external values (indices in range)
        value = numpy_helper.to_array(tensor)
        if value.dtype.kind == "f" and value.nbytes >= 1024:  # the small scale stays in the .onnx
            tensor.CopyFrom(numpy_helper.from_array((value * 3).astype(value.dtype), tensor.name))
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    _save(other, elsewhere, external=True)
    content = (elsewhere / "model.bin").read_bytes()  # kept alive: onnxruntime keeps a pointer to it
    so = _options()
    so.add_external_initializers_from_files_in_memory(["model.bin"], [content], [len(content)])
    expected = _reference(path, so, feeds)
    _same(expected, _reference(elsewhere / "model.onnx", _options(), feeds))  # onnxruntime took memory's
    session = dmlshim.InferenceSession(str(path), so)
    _same(session.run(None, feeds), expected)
