"""``engine="customop"`` on a model read without its weights (issue 22): the lowered model keeps the large
initializers as references into the model's files, its one onnxruntime session reads them there through
options dmlshim owns, the caller's options object is left as it was, and the outputs are onnxruntime CPU's
bit for bit (run from the same file with the same options)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

pytest.importorskip("onnxruntime_extensions")

import dmlshim
from dmlshim.errors import BadModelError
from dmlshim.execute.engines.custom_op import CustomOpEngine
from dmlshim.execute.lowering.emitter import ALIAS_DOC
from dmlshim.execute.weights import file_slices as weight_file
from dmlshim.execute.weights.shared import SHARE_MIN_BYTES
from dmlshim.ort.session_options import COPIED_CONFIG_KEYS, config_entry
from dmlshim.runtime.options_copy import FOLDER_KEY
from tests.oracle import assert_same_bits, ort_run
from tests.test_weightless_load import LARGE, _model, _save


@pytest.fixture(autouse=True)
def walk_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walk graphs of any size (only graphs of several MB are walked otherwise)."""
    monkeypatch.setattr(weight_file, "WALK_MIN_GRAPH_BYTES", 0)


def _options(**settings: Any) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # a ScatterND runs in the reference
    for name, value in settings.items():
        setattr(so, name, value)
    return so


def _snapshot(so: ort.SessionOptions) -> dict[str, Any]:
    """Every property onnxruntime gives back of ``so`` and the config entries dmlshim knows or sets."""
    props = {n: getattr(so, n) for n in dir(so) if not n.startswith("_") and not callable(getattr(so, n))}
    keys = (*COPIED_CONFIG_KEYS, FOLDER_KEY)
    return {"properties": props, "entries": {k: config_entry(so, k) for k in keys}}


def _reference(path: Path, so: ort.SessionOptions, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return list(ref.run(None, dict(feeds)))


def _lowered_initializers(session: dmlshim.InferenceSession) -> dict[str, onnx.TensorProto]:
    engine = session.engine
    assert isinstance(engine, CustomOpEngine)
    held = {t.name: t for t in engine.lowered.model.graph.initializer}
    # An initializer the lowering reshapes is held as an alias of the same bytes ('cols' as
    # 'pick_IndicesTensor_reshaped'), under the source's name here: a Reshape node would be folded into
    # a copy at session creation, and the file's edits would not show (onnxruntime's session shows them).
    for t in list(held.values()):
        if t.doc_string.startswith(ALIAS_DOC):
            held.setdefault(t.doc_string[len(ALIAS_DOC) :], t)
    return held


def _ort_options(session: dmlshim.InferenceSession) -> ort.SessionOptions:
    [(_, inner)] = session.engine.ort_sessions()  # type: ignore[attr-defined]
    options: ort.SessionOptions = inner.get_session_options()
    return options


@pytest.mark.parametrize("external", [False, True])
def test_weights_stay_in_the_files(tmp_path: Path, external: bool) -> None:
    """Large weights inline in the .onnx file, or in its external-data file: the lowered model refers to
    them, onnxruntime's session is told the model's folder, the outputs are onnxruntime's."""
    model, feeds = _model()
    path = _save(model, tmp_path, external)
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(str(path), engine="customop")
    assert session.engine.name == "customop" and session._loaded.weightless
    held = _lowered_initializers(session)
    for name in LARGE:
        tensor = held[name]
        assert tensor.data_location == TensorProto.EXTERNAL and not tensor.HasField("raw_data"), name
    assert held["scale"].HasField("raw_data")  # small ones stay in the model
    # what Python holds of the lowered model: no weight (they are several hundred KB)
    assert session.engine.lowered.model.ByteSize() < 16 * 1024  # type: ignore[attr-defined]
    # the model's folder for external data; the session's own copy of the inline weights otherwise
    folder = str(tmp_path) if external else session._loaded.snapshot.folder  # type: ignore[union-attr]
    assert config_entry(_ort_options(session), FOLDER_KEY) == folder
    for _ in range(3):
        assert_same_bits(session.run(None, feeds), expected)
    record = session.last_run_record
    assert record is not None and record.engine == "customop"
    emulated = {n.name for n in record.nodes if n.placement == "dml"}
    assert {"embed", "pick", "write", "embed16"} <= emulated  # the kernels read the weights from onnxruntime


@pytest.mark.parametrize("external", [False, True])
def test_callers_options_are_left_as_they_were(tmp_path: Path, external: bool) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external)
    so = _options(
        graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        enable_mem_pattern=False,
        log_severity_level=3,
        logid="caller",
    )
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    before = _snapshot(so)
    assert before["entries"][FOLDER_KEY] is None
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so, engine="customop")
    held = _lowered_initializers(session)
    assert all(held[n].data_location == TensorProto.EXTERNAL for n in LARGE)
    assert_same_bits(session.run(None, feeds), expected)
    assert _snapshot(so) == before
    assert session._sess_options_initial is so  # get_session_options(): a copy
    assert session.get_session_options().logid == "caller"
    used = _ort_options(session)
    folder = str(tmp_path) if external else session._loaded.snapshot.folder  # type: ignore[union-attr]
    assert config_entry(used, FOLDER_KEY) == folder
    assert used.graph_optimization_level == so.graph_optimization_level and used.logid == "caller"


def test_a_large_inline_initializer_from_bytes_or_a_proto(tmp_path: Path) -> None:
    """No file to read from: the large initializers are handed to onnxruntime as arrays."""
    model, feeds = _model()
    assert all(len(t.raw_data) >= SHARE_MIN_BYTES for t in model.graph.initializer if t.name in LARGE)
    expected = ort_run(model, feeds)
    for source in (model, model.SerializeToString()):
        session = dmlshim.InferenceSession(source, _options(), engine="customop")
        assert not session._loaded.weightless
        assert config_entry(_ort_options(session), FOLDER_KEY) is None
        assert_same_bits(session.run(None, feeds), expected)


def test_add_initializer_over_a_weight_left_in_the_file(tmp_path: Path) -> None:
    """A value the caller adds for an initializer the file holds inline replaces it (never read from the
    file at the same offset); the others are still read from the file."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    so = _options()
    table = np.full((512, 64), 0.25, dtype=np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(table)  # kept alive: the options hold a pointer to it
    so.add_initializer("table", value)
    before = _snapshot(so)
    expected = _reference(path, so, feeds)
    assert not np.array_equal(expected[0], _reference(path, _options(), feeds)[0])  # it does change y
    session = dmlshim.InferenceSession(str(path), so, engine="customop")
    held = _lowered_initializers(session)
    # read from the caller's OrtValue on every run (fed as a graph input), never from the file
    assert "table" not in held
    assert "table" in {v.name for v in session.engine.lowered.model.graph.input}  # type: ignore[attr-defined]
    assert held["weight"].data_location == TensorProto.EXTERNAL
    for _ in range(2):
        assert_same_bits(session.run(None, feeds), expected)
    assert _snapshot(so) == before


def test_add_external_initializers(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    so = _options()
    weight = np.linspace(-1, 1, 64 * 512, dtype=np.float32).reshape(64, 512)
    values = [ort.OrtValue.ortvalue_from_numpy(weight)]  # kept alive: the options hold a pointer to it
    so.add_external_initializers(["weight"], values)
    expected = _reference(path, so, feeds)
    session = dmlshim.InferenceSession(str(path), so, engine="customop")
    assert session._loaded.supplied == {"weight"}
    held = _lowered_initializers(session)
    assert held["weight"].data_location != TensorProto.EXTERNAL
    assert held["table"].data_location == TensorProto.EXTERNAL
    assert_same_bits(session.run(None, feeds), expected)


def test_optimized_model_and_profiling(tmp_path: Path) -> None:
    """``optimized_model_filepath`` gets the whole optimized model, weights included; a profile is one
    file; the caller's object stays as it was."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    target = tmp_path / "optimized.onnx"
    so = _options(optimized_model_filepath=str(target), enable_profiling=True)
    so.profile_file_prefix = str(tmp_path / "prof")
    before = _snapshot(so)
    session = dmlshim.InferenceSession(str(path), so, engine="customop")
    assert _snapshot(so) == before
    got = session.run(None, feeds)
    assert_same_bits(got, _reference(path, _options(), feeds))
    written = onnx.load(str(target), load_external_data=False)
    assert not any(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)
    assert_same_bits(_reference(target, _options(), feeds), got)
    profile = Path(session.end_profiling())
    assert profile.is_file() and profile.parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == [profile.name]


def test_a_file_changed_before_the_engine_is_built_again_is_refused(tmp_path: Path) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=True)
    session = dmlshim.InferenceSession(str(path), engine="customop")
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))
    with open(tmp_path / "model.bin", "ab") as f:
        f.write(b"\0")
    os.utime(tmp_path / "model.bin", ns=(1, 1))
    with pytest.raises(BadModelError, match="changed since the session was created"):
        session.set_providers(["DmlExecutionProvider", "CPUExecutionProvider"])


def test_external_data_without_a_model_file_is_refused() -> None:
    """The engine built directly on a model whose weights are external data, with no file to say where."""
    model, _ = _model()
    tensor = next(t for t in model.graph.initializer if t.name == "weight")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "model.bin"
    with pytest.raises(BadModelError, match="no model file"):
        CustomOpEngine(model, sess_options=_options())
