"""The custom-op engine and ``dmlshim lower`` keep every initializer (issue 19, item 4).

Large initializers (64 KiB and more) used to be dropped from the lowered model and declared as graph
inputs without data, so engine="customop" failed on every real transformer export. Here every model of
onnx_models/ and onnx_models/real/ runs through engine="customop" and through a lowered file loaded
standalone in onnxruntime with onnxruntime-extensions, against onnxruntime CPU (single-threaded) bit for
bit; hand-built models carry weights of real size, inline and as external data.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime_extensions")

import dmlshim
from dmlshim.cli.main import main
from dmlshim.execute.engines.custom_op import session_options_with_custom_ops
from tests.test_session_models import assert_bitwise

ROOT = Path(__file__).resolve().parents[1] / "onnx_models"
CORPUS = sorted([*ROOT.glob("*.onnx"), *(ROOT / "real").glob("*.onnx")])


def single_thread(so: ort.SessionOptions | None = None) -> ort.SessionOptions:
    so = so or ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def reference(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), single_thread(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def run_lowered(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The lowered file as docs/engines.md says to load it: dmlshim's custom ops registered."""
    so = single_thread(session_options_with_custom_ops())
    return list(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds))


def sample(path: Path) -> dict[str, np.ndarray]:
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def lower(source: Path, out: Path, *extra: str) -> int:
    return main(["lower", str(source), "-o", str(out), *extra])


@pytest.mark.parametrize("path", CORPUS, ids=[f"{p.parent.name}/{p.stem}" for p in CORPUS])
def test_customop_engine_equals_onnxruntime_on_the_corpus(path: Path) -> None:
    feeds = sample(path)
    sess = dmlshim.InferenceSession(str(path), sess_options=single_thread(), engine="customop")
    got = sess.run(None, feeds)
    assert_bitwise(got, reference(path, feeds))
    record = sess.last_run_record
    assert record is not None and record.engine == "customop"


@pytest.mark.parametrize("path", CORPUS, ids=[f"{p.parent.name}/{p.stem}" for p in CORPUS])
def test_lowered_file_runs_standalone_on_the_corpus(path: Path, tmp_path: Path) -> None:
    out = tmp_path / f"{path.stem}.lowered.onnx"
    assert lower(path, out) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    source = onnx.load(str(path))
    # Every initializer of the source is there, with its data; no weight became a graph input.
    inits = {t.name: t for t in model.graph.initializer}
    for t in source.graph.initializer:
        assert t.name in inits and np.array_equal(
            numpy_helper.to_array(inits[t.name]), numpy_helper.to_array(t), equal_nan=True
        )
    assert [v.name for v in model.graph.input] == [v.name for v in source.graph.input]
    feeds = sample(path)
    assert_bitwise(run_lowered(out, feeds), reference(path, feeds))


def weights_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An embedding of 128 KiB and a 75 KiB table, both above the 64 KiB that used to be dropped; a
    GatherElements on a 64 KiB-plus weight reshaped by the graph; a small bias."""
    rng = np.random.default_rng(1919)
    emb = rng.standard_normal((128, 256)).astype(np.float32)  # 128 KiB
    table = rng.integers(-1000, 1000, size=(64, 300)).astype(np.int32)  # 75 KiB
    bias = rng.standard_normal((256,)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0, name="embed"),
        helper.make_node("Add", ["e", "bias"], ["y"], name="add_bias"),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0, name="rows"),
        helper.make_node("GatherElements", ["rows", "cols"], ["z"], axis=1, name="pick"),
    ]
    graph = helper.make_graph(
        nodes,
        "weights",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("cols", TensorProto.INT64, ["n", 3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256]),
            helper.make_tensor_value_info("z", TensorProto.INT32, ["n", 3]),
        ],
        [
            numpy_helper.from_array(emb, "emb"),
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(bias, "bias"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    feeds = {
        "ids": np.array([0, 127 - 64, 5, 63, -1], dtype=np.int64),
        "cols": rng.integers(-300, 300, size=(5, 3)).astype(np.int64),
    }
    return model, feeds


def test_customop_engine_keeps_large_initializers(tmp_path: Path) -> None:
    model, feeds = weights_model()
    path = tmp_path / "weights.onnx"
    onnx.save(model, str(path))
    expected = reference(path, feeds)
    for source in (str(path), model, model.SerializeToString()):
        sess = dmlshim.InferenceSession(source, sess_options=single_thread(), engine="customop")
        assert_bitwise(sess.run(None, feeds), expected)
        assert [i.name for i in sess.get_inputs()] == ["ids", "cols"]
        record = sess.last_run_record
        assert record is not None and all(n.placement == "dml" for n in record.nodes)


def test_lower_keeps_inline_weights_inline(tmp_path: Path) -> None:
    model, feeds = weights_model()
    path = tmp_path / "weights.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "lowered.onnx"
    assert lower(path, out) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lowered.onnx", "weights.onnx"]
    lowered = onnx.load(str(out), load_external_data=False)
    emb = next(t for t in lowered.graph.initializer if t.name == "emb")
    assert emb.data_location == TensorProto.DEFAULT and len(emb.raw_data) == 128 * 256 * 4
    assert [v.name for v in lowered.graph.input] == ["ids", "cols"]
    assert_bitwise(run_lowered(out, feeds), reference(path, feeds))


def test_lower_writes_external_data_beside_the_lowered_file(tmp_path: Path) -> None:
    model, feeds = weights_model()
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    path = src_dir / "weights.onnx"
    # emb (128 KiB) external, table (75 KiB) and bias inline: the lowered file keeps exactly that split.
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=100 * 1024,
    )
    expected = reference(path, feeds)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "lowered.onnx"
    assert lower(path, out) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["lowered.onnx", "lowered.onnx.data"]
    lowered = onnx.load(str(out), load_external_data=False)
    by_name = {t.name: t for t in lowered.graph.initializer}
    assert by_name["emb"].data_location == TensorProto.EXTERNAL
    entries = {e.key: e.value for e in by_name["emb"].external_data}
    assert entries["location"] == "lowered.onnx.data" and int(entries["length"]) == 128 * 256 * 4
    assert by_name["table"].data_location == TensorProto.DEFAULT
    assert by_name["bias"].data_location == TensorProto.DEFAULT
    # Standalone: moved with its data file elsewhere, without the source folder.
    moved = tmp_path / "moved"
    shutil.copytree(out_dir, moved)
    shutil.rmtree(src_dir)
    assert_bitwise(run_lowered(moved / "lowered.onnx", feeds), expected)


def test_lower_refuses_to_replace_an_existing_data_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = weights_model()
    path = tmp_path / "weights.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=1024)
    out = tmp_path / "lowered.onnx"
    (tmp_path / "lowered.onnx.data").write_bytes(b"keep me")
    assert lower(path, out) == 2
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / "lowered.onnx.data").read_bytes() == b"keep me" and not out.exists()
    assert lower(path, out, "--overwrite") == 0
    assert (tmp_path / "lowered.onnx.data").stat().st_size >= 128 * 256 * 4
