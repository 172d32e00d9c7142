"""A pool worker's tally is written after every run (``python -m dmlshim.ort``: SIGTERM leaves no time
for more). Encoding it whole took 100-380 us a run (a small model runs in 10-20 us); the text is now made
from a template filled with the counts while nothing else changes. It must always be exactly what encoding
the tally whole gives (``json.loads`` of both equal), whatever changes between runs."""

from __future__ import annotations

import json

from dmlshim.execute.record import NodeRecord, RunRecord
from dmlshim.ort import tracking

ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _node(name: str, placement: str = "dml", **kw: object) -> NodeRecord:
    return NodeRecord(name=name, op_type="Gather", placement=placement, status="dml", **kw)  # type: ignore[arg-type]


def _record(
    *nodes: NodeRecord, engine: str = "partitioned", level: str = "DML_FEATURE_LEVEL_5_0"
) -> RunRecord:
    return RunRecord(engine=engine, feature_level=level, nodes=nodes)


def _same(tracker: tracking.Tracker) -> None:
    text = tracker.to_text(ENCODER)
    assert json.loads(text) == json.loads(ENCODER.encode(tracker.to_json()))
    assert text == ENCODER.encode(tracker.to_json())


def test_the_text_follows_every_change() -> None:
    tracker = tracking.Tracker()
    one = tracker.add_session("a.onnx", ["DmlExecutionProvider"], "partitioned", model_file="/m/a.onnx")
    two = tracker.add_session("<in-memory>", ["CPUExecutionProvider"], "cpu")
    _same(tracker)
    steps = [
        (one, _record(_node("g1", operator="DML_OPERATOR_GATHER"))),
        (one, _record(_node("g1", operator="DML_OPERATOR_GATHER"))),  # counts only: the template
        (one, _record(_node("g1", placement="onnxruntime-cpu", reasons=(("R", "why"),)))),  # a placement
        (one, _record(_node("g1"), _node("g2", duplicate_indices=3))),  # a node
        (one, _record(_node("g2", negative_indices=True), level="DML_FEATURE_LEVEL_2_1")),  # flags
        (two, _record(_node("s", operator="DML_OPERATOR_SCATTER"), engine="cpu")),
        (one, _record(_node("g1"), engine="customop")),  # the engine
    ]
    shapes = []
    for tally, record in steps:
        tracker.add_run(tally, record)
        _same(tracker)
        shapes.append(one.shape)
    assert shapes[1] == shapes[0] and shapes[2] > shapes[1]  # a run that changed only counts kept it
    tracker.add_failure(one, ValueError("first\nsecond"))
    _same(tracker)
    tracker.add_failure(one, ValueError("later"))
    tracker.undo_run(two)
    _same(tracker)
    tracker.reset_after_fork()  # a forked child: the parent's sessions with nothing counted
    _same(tracker)
    tracker.add_run(two, _record(_node("s")))
    _same(tracker)


def test_names_holding_the_templates_own_marks_are_written_whole() -> None:
    tracker = tracking.Tracker()
    hostile = f'm{tracking._HOLE}"{{}}[],:'
    tally = tracker.add_session(hostile, ["DmlExecutionProvider"], "partitioned")
    for _ in range(3):
        tracker.add_run(
            tally, _record(_node(tracking._HOLE), _node(f"x{tracking._HOLE}y", reasons=((hostile, hostile),)))
        )
        _same(tracker)
