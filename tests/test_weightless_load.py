"""Sessions that never hold the model's weights in Python (issue 22): a model file read with its large
initializers left in the file (inline raw_data or external data), onnxruntime reading them there, the
emulated nodes' static inputs memory-mapped, and outputs bit-identical to onnxruntime's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.execute.weights import file_slices as weight_file
from dmlshim.execute.weights.file_slices import read_weightless
from dmlshim.execute.weights.model_source import load_model
from dmlshim.execute.weights.shared import SHARE_MIN_BYTES
from tests.oracle import IR_VERSION, assert_same_bits, ort_run

LARGE = ("table", "weight", "cols", "cache", "table16")


def _model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Every kind of large weight an emulated node or onnxruntime reads: a float32 embedding table and a
    float16 one gathered by the kernels, a MatMul weight only onnxruntime reads, int64 indices a Gather
    takes as constants, a cache a ScatterND writes into (its kernel copies it), and a small initializer
    that stays in the model."""
    rng = np.random.default_rng(22)
    table = rng.standard_normal((512, 64)).astype(np.float32)
    weight = (rng.standard_normal((64, 512)) * 0.1).astype(np.float32)
    cols = rng.integers(0, 512, size=16384, dtype=np.int64)  # 128 KiB of constant indices
    cache = rng.standard_normal((1024, 64)).astype(np.float32)
    table16 = rng.standard_normal((1024, 64)).astype(np.float16)
    scale = np.array([0.5], dtype=np.float32)  # small: stays inline
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
        helper.make_node("MatMul", ["rows", "weight"], ["m"], name="matmul"),
        helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
        helper.make_node("Gather", ["t", "cols"], ["picked"], name="pick", axis=1),
        helper.make_node("Mul", ["picked", "scale"], ["y"], name="mul"),
        helper.make_node("ScatterND", ["cache", "pos", "rows"], ["new_cache"], name="write"),
        helper.make_node("Gather", ["table16", "ids"], ["rows16"], name="embed16", axis=0),
        helper.make_node("Cast", ["rows16"], ["y16"], name="cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "weightless",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("pos", TensorProto.INT64, [4, 1]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("new_cache", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y16", TensorProto.FLOAT, None),
        ],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(weight, "weight"),
            numpy_helper.from_array(cols, "cols"),
            numpy_helper.from_array(cache, "cache"),
            numpy_helper.from_array(table16, "table16"),
            numpy_helper.from_array(scale, "scale"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    feeds = {
        "ids": np.array([5, 0, 511, 7], dtype=np.int64),
        "pos": np.array([[3], [1023], [0], [500]], dtype=np.int64),
    }
    return model, feeds


def _save(model: onnx.ModelProto, folder: Path, external: bool) -> Path:
    path = folder / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(
        copy,
        str(path),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location="model.bin",
        size_threshold=1024,
    )
    return path


@pytest.fixture
def walk_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walk graphs of any size (only graphs of several MB are walked otherwise)."""
    monkeypatch.setattr(weight_file, "WALK_MIN_GRAPH_BYTES", 0)


def test_read_weightless_points_at_the_bytes_onnx_wrote(tmp_path: Path, walk_every_graph: None) -> None:
    model, _ = _model()
    path = _save(model, tmp_path, external=False)
    found = read_weightless(path, SHARE_MIN_BYTES)
    assert found is not None
    proto, moved = found
    assert moved == frozenset(LARGE)
    original = {t.name: t for t in model.graph.initializer}
    data = path.read_bytes()
    for tensor in proto.graph.initializer:
        if tensor.name not in LARGE:
            assert tensor.raw_data == original[tensor.name].raw_data  # small ones stay as they were
            continue
        info = {e.key: e.value for e in tensor.external_data}
        assert tensor.data_location == TensorProto.EXTERNAL and not tensor.HasField("raw_data")
        assert info["location"] == "model.onnx"
        start, length = int(info["offset"]), int(info["length"])
        assert data[start : start + length] == original[tensor.name].raw_data
        assert list(tensor.dims) == list(original[tensor.name].dims)
    assert list(proto.graph.node) == list(model.graph.node)
    assert proto.ByteSize() < 4096 < path.stat().st_size // 100  # the weights are not in it


def test_read_weightless_declines_a_file_it_cannot_walk(tmp_path: Path, walk_every_graph: None) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x3a\x10\x0a\x02")  # a graph field longer than the file
    assert read_weightless(path, SHARE_MIN_BYTES) is None


@pytest.mark.parametrize("external", [False, True])
def test_session_holds_no_weight_and_matches_onnxruntime(
    tmp_path: Path, walk_every_graph: None, external: bool
) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external)
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(str(path))
    loaded = session._loaded
    assert loaded.weightless
    held = {t.name for t in loaded.proto.graph.initializer if t.HasField("raw_data")}
    assert held == {"scale"}
    assert loaded.proto.ByteSize() < 4096
    for _ in range(8):  # through the path trial: the whole-model check and the partitioned steps
        assert_same_bits(session.run(None, feeds), expected)
    static = session.engine._static_values  # the kernels' constant inputs, read from the file
    offsets = {
        t.name: int({e.key: e.value for e in t.external_data}["offset"])
        for t in loaded.proto.graph.initializer
        if t.name in LARGE
    }
    for name in ("table", "cols", "cache", "table16"):
        value = static[name]
        assert not value.flags.writeable and value.flags.aligned
        # mapped where the bytes are aligned for the element type, else read once into aligned memory
        assert isinstance(value.base, np.memmap) == (offsets[name] % value.itemsize == 0)


def test_other_engines_get_the_whole_model(tmp_path: Path, walk_every_graph: None) -> None:
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    expected = ort_run(model, feeds)
    session = dmlshim.InferenceSession(str(path))
    session.set_providers(["CPUExecutionProvider"])  # the cpu engine: the model as onnxruntime runs it
    assert session.engine.name == "cpu"
    assert_same_bits(session.run(None, feeds), expected)
    custom = dmlshim.InferenceSession(str(path), engine="customop")  # reads every weight
    assert custom.engine.name == "customop" and custom._loaded.weightless
    assert_same_bits(custom.run(None, feeds), expected)
    full = load_model(str(path), weightless=True).with_weights()
    for ours, theirs in zip(full.graph.initializer, model.graph.initializer, strict=True):
        assert ours.name == theirs.name
        assert np.array_equal(numpy_helper.to_array(ours), numpy_helper.to_array(theirs))


@pytest.mark.parametrize("caller_options", [False, True])
@pytest.mark.parametrize("external", [False, True])
def test_cpu_engine_reads_the_weights_from_the_files(
    tmp_path: Path,
    walk_every_graph: None,
    external: bool,
    caller_options: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """providers=["CPUExecutionProvider"] (the cpu engine), with default options or the caller's:
    onnxruntime's session reads the large weights from the model's files; the model is never read whole
    (so a model above 2 GiB loads)."""
    import onnxruntime as ort

    from dmlshim.execute.weights.model_source import LoadedModel

    model, feeds = _model()
    path = _save(model, tmp_path, external)
    expected = ort_run(model, feeds)

    def refuse(self: LoadedModel, *args: object) -> onnx.ModelProto:
        raise AssertionError("the cpu engine read every weight into the model")

    monkeypatch.setattr(LoadedModel, "with_weights", refuse)
    options = None
    if caller_options:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
    session = dmlshim.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert session.engine.name == "cpu" and session._loaded.weightless
    assert_same_bits(session.run(None, feeds), expected)
    session.set_providers(["DmlExecutionProvider"])
    assert_same_bits(session.run(None, feeds), expected)
    session.set_providers(["CPUExecutionProvider"])
    assert_same_bits(session.run(None, feeds), expected)


def test_caller_options_leave_the_weights_in_the_file(tmp_path: Path, walk_every_graph: None) -> None:
    """(tests/test_weightless_options.py: what the caller's options mean then.)"""
    import onnxruntime as ort

    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = dmlshim.InferenceSession(str(path), options)
    assert session._loaded.weightless and session._loaded.proto.ByteSize() < 4096
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_a_file_changed_under_the_session_changes_nothing(tmp_path: Path, walk_every_graph: None) -> None:
    """The weights the .onnx file held inline are the session's own (as onnxruntime's are): a session
    built again after the file changed (set_providers) still computes with them."""
    model, feeds = _model()
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    expected = ort_run(model, feeds)
    assert_same_bits(session.run(None, feeds), expected)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 4)
        f.write(b"\0" * (path.stat().st_size // 2))
    os.utime(path, ns=(1, 1))
    session.set_providers(["CPUExecutionProvider"])
    assert_same_bits(session.run(None, feeds), expected)


def test_a_model_linked_from_another_folder_is_read_weightless(
    tmp_path: Path, walk_every_graph: None
) -> None:
    model, feeds = _model()
    store = tmp_path / "blobs"
    store.mkdir()
    target = _save(model, store, external=False)
    (tmp_path / "snapshot").mkdir()
    link = tmp_path / "snapshot" / "model.onnx"
    link.symlink_to(target)
    session = dmlshim.InferenceSession(str(link))
    # its weights lie beside its real file, where onnxruntime accepts them (tests/test_linked_models53.py)
    assert session._loaded.weightless and session._loaded.snapshot is not None
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_read_weightless_keeps_everything_else_as_onnx_reads_it(
    tmp_path: Path, walk_every_graph: None
) -> None:
    model, _ = _model()
    model.doc_string = "a model"
    model.producer_name = "tests"
    helper.set_model_props(model, {"k": "v"})
    model.graph.doc_string = "its graph"
    model.graph.value_info.append(helper.make_tensor_value_info("rows", TensorProto.FLOAT, [4, 64]))
    model.graph.sparse_initializer.append(
        helper.make_sparse_tensor(
            numpy_helper.from_array(np.array([1.0, 2.0], dtype=np.float32), "unused_sparse"),
            numpy_helper.from_array(np.array([0, 5], dtype=np.int64), "unused_sparse_indices"),
            [8],
        )
    )
    path = _save(model, tmp_path, external=False)
    found = read_weightless(path, min_bytes=1 << 40)  # nothing large enough to leave in the file
    assert found is not None and found[1] == frozenset()
    assert found[0].SerializeToString() == onnx.load(str(path)).SerializeToString()
    light, _ = read_weightless(path, SHARE_MIN_BYTES) or (None, None)
    assert light is not None
    assert light.metadata_props == model.metadata_props and light.graph.doc_string == "its graph"
    assert light.graph.sparse_initializer == model.graph.sparse_initializer


def test_small_external_tensors_stay_mapped_as_onnxruntime_maps_them(tmp_path: Path) -> None:
    """onnxruntime (1.24 and 1.32) maps external data of every size (an edit to a 4-byte weight shows in
    its next run): dmlshim keeps every external tensor a reference to the file (h6; it read those under
    1 KiB into the model before)."""
    model, feeds = _model()
    path = tmp_path / "model.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(copy, str(path), save_as_external_data=True, location="model.bin", size_threshold=0)
    assert "scale" not in {
        t.name
        for t in onnx.load(str(path), load_external_data=False).graph.initializer
        if t.data_location != TensorProto.EXTERNAL
    }  # even the 4-byte one is external
    session = dmlshim.InferenceSession(str(path))
    proto = session._loaded.proto
    external = {t.name for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert external == {t.name for t in model.graph.initializer} and "scale" in external
    assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_a_model_with_nothing_to_emulate_and_an_overridable_weight(
    tmp_path: Path, walk_every_graph: None
) -> None:
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((64, 512)).astype(np.float32)  # 128 KiB, also a graph input (IR >= 4)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "weight"], ["y"], name="matmul")],
        "plain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
            helper.make_tensor_value_info("weight", TensorProto.FLOAT, [64, 512]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    path = _save(model, tmp_path, external=False)
    session = dmlshim.InferenceSession(str(path))
    assert session._loaded.weightless
    x = rng.standard_normal((2, 64)).astype(np.float32)
    assert_same_bits(session.run(None, {"x": x}), ort_run(model, {"x": x}))
    other = -weight
    assert_same_bits(session.run(None, {"x": x, "weight": other}), ort_run(model, {"x": x, "weight": other}))
