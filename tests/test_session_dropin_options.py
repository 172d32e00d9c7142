"""``sess_options`` for the whole model: one optimized model, one profile from ``end_profiling()``
covering CPU partitions and emulated nodes, and the options reaching every onnxruntime session."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from dmlshim import BadInputError, InferenceSession
from dmlshim.ort.session_options import copy_options

REPO = Path(__file__).resolve().parents[1]
DECODER = REPO / "onnx_models" / "tiny_decoder_step.onnx"


def decoder_feeds() -> dict[str, np.ndarray]:
    with np.load(REPO / "onnx_models" / "tiny_decoder_step.npz") as z:
        return {k: z[k] for k in z.files}


def options(**settings: object) -> onnxruntime.SessionOptions:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    for key, value in settings.items():
        setattr(so, key, value)
    return so


def test_optimized_model_is_the_whole_model_as_onnxruntime_writes_it(tmp_path: Path) -> None:
    level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ours_path, theirs_path = tmp_path / "ours" / "opt.onnx", tmp_path / "theirs" / "opt.onnx"
    ours_path.parent.mkdir()
    theirs_path.parent.mkdir()
    sess = InferenceSession(
        DECODER, options(optimized_model_filepath=str(ours_path), graph_optimization_level=level)
    )
    onnxruntime.InferenceSession(
        str(DECODER),
        options(optimized_model_filepath=str(theirs_path), graph_optimization_level=level),
        providers=["CPUExecutionProvider"],
    )
    assert [p.name for p in ours_path.parent.iterdir()] == ["opt.onnx"]  # one file, not one per partition
    ours, theirs = onnx.load(str(ours_path)), onnx.load(str(theirs_path))
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in theirs.graph.node]
    assert len(ours.graph.node) > 20  # the whole decoder, not a partition's fragment
    record_ops = {"Gather", "GatherElements", "ScatterND"}
    assert record_ops <= {n.op_type for n in ours.graph.node}
    feeds = decoder_feeds()
    ref = onnxruntime.InferenceSession(str(DECODER), options(), providers=["CPUExecutionProvider"])
    want = ref.run(None, feeds)
    for got, w in zip(InferenceSession(ours_path, options()).run(None, feeds), want, strict=True):
        np.testing.assert_array_equal(got, w)
    # The session itself ran with the caller's options minus the file: nothing else was written.
    sess.run(None, feeds)
    assert len(list(ours_path.parent.iterdir())) == 1


def test_optimized_model_never_replaces_the_model(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(DECODER.read_bytes())
    with pytest.raises(BadInputError, match="input"):
        InferenceSession(model, options(optimized_model_filepath=str(model)))
    assert model.read_bytes() == DECODER.read_bytes()


@pytest.mark.parametrize("level", ["basic", "all"])
def test_one_profile_covers_partitions_and_emulated_nodes(tmp_path: Path, level: str) -> None:
    """At basic the partitions answer profiled runs (their sessions' events, one partition each); beyond
    basic the whole-model check does, as without profiling (its one session's events)."""
    feeds = decoder_feeds()
    before = time.time_ns()
    levels = {
        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    so = options(
        enable_profiling=True, profile_file_prefix=str(tmp_path / "p"), graph_optimization_level=levels[level]
    )
    sess = InferenceSession(DECODER, so)
    assert before <= sess.get_profiling_start_time_ns() <= time.time_ns()
    for _ in range(3):
        sess.run(None, feeds)
    record = sess.last_run_record
    assert record is not None
    name = sess.end_profiling()
    assert sess.end_profiling() == ""
    assert [str(p) for p in tmp_path.iterdir()] == [name]
    assert Path(name).name.startswith("p_") and name.endswith(".json")
    events = json.loads(Path(name).read_text(encoding="utf-8"))
    assert isinstance(events, list)
    for e in events:
        assert e["ph"] == "X" and e["ts"] >= 0 and e["dur"] >= 0
        assert set(e) == {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"}
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    session_events = [e["name"] for e in events if e["cat"] == "Session" and "partition" not in e["args"]]
    assert session_events.count("model_run") == 3
    assert {"model_loading_uri", "session_initialization"} <= set(session_events)

    emulated = [e for e in events if e["args"].get("emulated_by") == "dmlshim"]
    want = sorted([f"{n.name}_kernel_time" for n in record.emulated] * 3)
    assert sorted(e["name"] for e in emulated) == want
    by_node = {e["name"]: e for e in emulated}
    first = by_node["node_embedding_kernel_time"]["args"]
    assert first["op_name"] == "Gather" and first["provider"] == "DmlExecutionProvider"
    assert first["dml_operator"] == "DML_OPERATOR_GATHER"
    assert first["input_type_shape"] == [{"float": [32, 16]}, {"int64": [1, 1]}]
    assert first["output_type_shape"] == [{"float": [1, 1, 16]}]

    # onnxruntime 1.20 also writes *_fence_before/_after node events, which name no provider (1.22 does not).
    cpu_nodes = [
        e
        for e in events
        if e["cat"] == "Node" and "partition" in e["args"] and e["name"].endswith("_kernel_time")
    ]
    assert {e["args"]["provider"] for e in cpu_nodes} == {"CPUExecutionProvider"}
    assert {"MatMul", "Softmax", "TopK"} <= {e["args"]["op_name"] for e in cpu_nodes}
    assert record.cpu_partitions >= 2
    partitions = {e["args"]["partition"] for e in cpu_nodes}
    if level == "basic":
        assert record.path == "partitioned"
        assert len(partitions) == record.cpu_partitions
    else:
        assert record.path == "whole-model check"
        assert partitions == {"whole-model check"}
        # onnxruntime's events for the emulated nodes are left out: dmlshim's time their kernels
        assert not {e["name"] for e in cpu_nodes} & {e["name"] for e in emulated}
    # Every event lies within the session's lifetime on one clock.
    runs = [e for e in events if e["name"] == "model_run"]
    for e in emulated:
        assert any(r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1 for r in runs)


def test_profile_keeps_events_across_set_providers(tmp_path: Path) -> None:
    sess = InferenceSession(DECODER, options(enable_profiling=True, profile_file_prefix=str(tmp_path / "p")))
    sess.run(None, decoder_feeds())
    sess.set_providers(["CPUExecutionProvider"])
    sess.run(None, decoder_feeds())
    events = json.loads(Path(sess.end_profiling()).read_text(encoding="utf-8"))
    assert sum(e["name"] == "model_run" for e in events) == 2
    assert any(e["args"].get("emulated_by") == "dmlshim" for e in events)
    assert any(e["args"].get("partition") == "the model" for e in events)  # the CPU-only session


def test_profile_prefix_in_a_missing_folder_writes_nothing_as_onnxruntime(tmp_path: Path) -> None:
    """onnxruntime builds and runs the session, and end_profiling returns the name of a file it could not
    write; dmlshim refused the session."""
    names = []
    for side, make in (("theirs", onnxruntime.InferenceSession), ("ours", InferenceSession)):
        missing = str(tmp_path / side / "p")
        so = options(enable_profiling=True, profile_file_prefix=missing)
        sess = make(DECODER, so)  # onnxruntime: its CPU provider; dmlshim: DirectML emulated
        sess.run(None, decoder_feeds())
        assert sess.get_profiling_start_time_ns() > 0
        names.append(sess.end_profiling())
    for name, side in zip(names, ("theirs", "ours"), strict=True):
        assert name.startswith(str(tmp_path / side / "p_")) and name.endswith(".json")
    assert not any(tmp_path.iterdir())  # nothing written, no folder made


def test_default_profile_name_is_onnxruntimes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sess = InferenceSession(DECODER, options(enable_profiling=True))
    name = sess.end_profiling()
    assert name.startswith("onnxruntime_profile__") and os.path.isfile(tmp_path / name)


def test_options_reach_the_partitions() -> None:
    so = options(
        intra_op_num_threads=3,
        graph_optimization_level=onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
        enable_mem_pattern=False,
        optimized_model_filepath="/nonexistent/opt.onnx",
        enable_profiling=True,
    )
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    copy = copy_options(so)
    assert copy.intra_op_num_threads == 3 and not copy.enable_mem_pattern
    assert copy.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert copy.get_session_config_entry("session.set_denormal_as_zero") == "1"
    assert copy.optimized_model_filepath == "" and not copy.enable_profiling
    profiled = copy_options(so, profile_prefix="/tmp/x/part")
    assert profiled.enable_profiling and profiled.profile_file_prefix == "/tmp/x/part"


def test_a_property_the_installed_onnxruntime_lacks_is_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime before 1.23 has no ``use_per_session_threads``: copying must skip what is missing."""
    from dmlshim.ort import session_options

    missing = "a_property_onnxruntime_does_not_have"
    assert not hasattr(onnxruntime.SessionOptions(), missing)
    monkeypatch.setattr(session_options, "COPIED_ATTRIBUTES", (missing, *session_options.COPIED_ATTRIBUTES))
    monkeypatch.chdir(tmp_path)
    copy = copy_options(options(intra_op_num_threads=2, enable_profiling=True))
    assert copy.intra_op_num_threads == 2 and not copy.enable_profiling
    # And a whole profiled session, as on onnxruntime 1.20-1.22, runs and matches onnxruntime CPU.
    feeds = decoder_feeds()
    sess = InferenceSession(DECODER, options(enable_profiling=True))
    ref = onnxruntime.InferenceSession(str(DECODER), options(), providers=["CPUExecutionProvider"])
    for got, want in zip(sess.run(None, feeds), ref.run(None, feeds), strict=True):
        np.testing.assert_array_equal(got, want)
    assert os.path.isfile(sess.end_profiling())


def test_customop_engine_profile_shows_the_lowered_nodes(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime_extensions")
    so = options(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    sess = InferenceSession(DECODER, so, engine="customop")
    sess.run(None, decoder_feeds())
    events = json.loads(Path(sess.end_profiling()).read_text(encoding="utf-8"))
    ops = {e["args"]["op_name"] for e in events if e["cat"] == "Node"}
    assert {"DmlGather_float32_int64", "DmlScatterND_float32_int64", "MatMul"} <= ops
    assert len(list(tmp_path.iterdir())) == 1


def test_plain_options_reach_the_engine_as_a_copy_taken_at_construction(tmp_path: Path) -> None:
    """onnxruntime reads the options once, when the session is built; the engine builds some sessions
    later, so it gets a copy taken then (carrying what the options hold), not the program's object."""
    so = options()
    got = InferenceSession(DECODER, so).engine.config.sess_options  # type: ignore[attr-defined]
    assert got is not so
    assert got.intra_op_num_threads == so.intra_op_num_threads == 1
    assert got.graph_optimization_level == so.graph_optimization_level
    profiled = options(enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    got = InferenceSession(DECODER, profiled).engine.config.sess_options  # type: ignore[attr-defined]
    assert got is not profiled and got.enable_profiling and got.intra_op_num_threads == 1


@pytest.mark.parametrize("model", sorted(p.name for p in (REPO / "onnx_models").glob("*.onnx")))
def test_every_shipped_model_profiles_and_optimizes_as_one(model: str, tmp_path: Path) -> None:
    path = REPO / "onnx_models" / model
    with np.load(path.with_suffix(".npz")) as z:
        feeds = {k: z[k] for k in z.files}
    so = options(
        enable_profiling=True,
        profile_file_prefix=str(tmp_path / "p"),
        optimized_model_filepath=str(tmp_path / "opt.onnx"),
    )
    sess = InferenceSession(path, so)
    got = [sess.run(None, feeds) for _ in range(2)][-1]
    ref = onnxruntime.InferenceSession(str(path), options(), providers=["CPUExecutionProvider"])
    for g, w in zip(got, ref.run(None, feeds), strict=True):
        np.testing.assert_array_equal(g, w)
    record = sess.last_run_record
    assert record is not None
    events = json.loads(Path(sess.end_profiling()).read_text(encoding="utf-8"))
    emulated = [e for e in events if e["args"].get("emulated_by") == "dmlshim"]
    assert len(emulated) == 2 * len(record.emulated)
    assert {e["args"]["op_name"] for e in emulated} == {n.op_type for n in record.emulated}
    assert sum(e["name"] == "model_run" for e in events) == 2
    assert len(list(tmp_path.glob("*.json"))) == len(list(tmp_path.glob("*.onnx"))) == 1
    assert len(onnx.load(str(tmp_path / "opt.onnx")).graph.node) > 0
