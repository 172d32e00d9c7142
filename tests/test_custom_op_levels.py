"""The custom-op engine at every onnxruntime optimization level: onnxruntime's outputs bit for bit where
it gives them, a record note where onnxruntime's layout optimizations (level all: NCHWc transforms around
Conv, pooling and Resize) may work differently around custom-op nodes, and validate comparing at extended
when the outputs at all differ. The model is a small FPN step (Conv, a channel Gather, nearest Resize,
lateral 1x1 Conv, Add, Conv) with 64 channels, which onnxruntime's NCHWc transformer rewrites."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

import dmlshim
from dmlshim.execute.custom_ops.notes import NOTE_LAYOUT
from dmlshim.validate import engine_side, validate_model, verdict
from dmlshim.validate.references import PartitionedRun

pytest.importorskip("onnxruntime_extensions")

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
C = 64


def _fpn_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("w0", (C, 3, 3, 3), 0.3), w("b0", (C,), 1), w("w1", (C, C, 3, 3), 0.05), w("b1", (C,), 1),
        w("wl", (C, C, 1, 1), 0.2), w("bl", (C,), 1), w("w2", (C, C, 3, 3), 0.05), w("b2", (C,), 1),
        nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        nh.from_array(np.zeros(0, np.float32), "roi"),
    ]  # fmt: skip
    nodes = [
        oh.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="stem"),
        oh.make_node("Relu", ["c0"], ["r0"]),
        oh.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], name="down"),
        oh.make_node("Relu", ["c1"], ["r1"]),
        oh.make_node("Gather", ["r1", "perm"], ["g"], axis=1, name="channel_gather"),
        oh.make_node("Resize", ["g", "roi", "scales"], ["up"], mode="nearest", name="upsample"),
        oh.make_node("Conv", ["r0", "wl", "bl"], ["lat"], name="lateral"),
        oh.make_node("Add", ["lat", "up"], ["s"]),
        oh.make_node("Conv", ["s", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], name="smooth"),
    ]
    graph = oh.make_graph(
        nodes,
        "fpn_step",
        [
            oh.make_tensor_value_info("x", T.FLOAT, [1, 3, "h", "w"]),
            oh.make_tensor_value_info("perm", T.INT64, [C]),
        ],
        [oh.make_tensor_value_info("y", T.FLOAT, [1, C, "h", "w"])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


@pytest.fixture(scope="module")
def fpn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("fpn") / "fpn.onnx"
    onnx.save(_fpn_model(), str(path))
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 3, 48, 48)).astype(np.float32), "perm": rng.permutation(C)}
    return path, feeds


def _options(level: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return so


@pytest.mark.parametrize("level", list(LEVELS))
def test_onnxruntimes_outputs_at_every_level(level: str, fpn: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, feeds = fpn
    reference = ort.InferenceSession(str(path), _options(level), providers=["CPUExecutionProvider"])
    (expected,) = reference.run(None, feeds)
    session = dmlshim.InferenceSession(str(path), _options(level), engine="customop")
    (got,) = session.run(None, feeds)
    assert got.tobytes() == expected.tobytes()
    record = session.last_run_record
    assert record is not None and [n.placement for n in record.nodes] == ["dml"]
    # the record says where the outputs could stop being onnxruntime's: level all, around the Convs
    notes = dict(record.notes)
    assert (NOTE_LAYOUT in notes) == (level == "all")
    if level == "all":
        assert "5 Conv/pooling/Resize node(s)" in notes[NOTE_LAYOUT]


def test_default_options_are_level_all_and_say_so(fpn: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, feeds = fpn
    session = dmlshim.InferenceSession(str(path), engine="customop")
    session.run(None, feeds)
    record = session.last_run_record
    assert record is not None
    assert [c for c, _ in record.notes] == [NOTE_LAYOUT]
    assert record.to_json()["notes"][0]["code"] == NOTE_LAYOUT


def test_validate_at_all_matches_here(fpn: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, feeds = fpn
    report = validate_model(str(path), inputs=feeds, engine="customop", optimization_level="all")
    assert report.match and dict(report.optimization_levels)["dmlshim"] == "all"
    assert report.optimization_level_reason is None


def test_validate_compares_at_extended_when_all_differs(
    fpn: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the layout optimizations do change the bits (RetinaNet, Mask R-CNN on other machines), the
    run at all differs; here that difference is made by moving one output element by one ulp at all. The
    comparison at extended is real: the engine against onnxruntime."""
    path, feeds = fpn
    real = engine_side.engine_runs

    def at_all_differs(*args: object, **kwargs: object) -> tuple[PartitionedRun, PartitionedRun]:
        ours, ref = real(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs["level"] != "all":
            return ours, ref
        y = ours.outputs["y"].copy()
        y.reshape(-1)[7] = np.nextafter(y.reshape(-1)[7], np.float32(np.inf))
        return PartitionedRun({"y": y}, {}, ours.record, ()), ref

    monkeypatch.setattr(verdict, "engine_runs", at_all_differs)
    report = validate_model(str(path), inputs=feeds, engine="customop", optimization_level="all")
    assert report.match
    sides = ("dmlshim", "reference", "whole_model")
    assert dict(report.optimization_levels) == dict.fromkeys(sides, "extended")
    reason = report.optimization_level_reason or ""
    assert "differs from onnxruntime at level all (y max |diff|" in reason
    assert "NCHWc transforms around 5 Conv/pooling/Resize node(s): stem, down, upsample and 2 more" in reason
    reference = ort.InferenceSession(str(path), _options("extended"), providers=["CPUExecutionProvider"])
    (expected,) = reference.run(None, feeds)
    assert report.outputs[0].dmlshim.tobytes() == expected.tobytes()
