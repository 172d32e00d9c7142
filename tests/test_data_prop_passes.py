"""Bounded data propagation stops its passes once they only rename onnx's generated dimension names.

The expected inferences are onnx's own ``infer_shapes(..., data_prop=True)`` of the same (small) model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.model import data_prop
from dmlshim.model.data_prop import _UNKNOWN, _renamed_only, _Site, infer_with_data_prop

from .inference_calls import count_inference_passes

vi = helper.make_tensor_value_info


@pytest.fixture(autouse=True)
def _propagate_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """These models have no node reading propagated data (inference skips propagation for them, see
    tests/test_prop_readers.py): the bounded propagation under test is forced, as a model with a shape
    reader (Reshape, Expand, ...) gets it."""
    monkeypatch.setattr(data_prop, "propagation_unread", lambda model, *_: False)


def _range_model() -> onnx.ModelProto:
    """Range(0, Shape(x)[1], 1) read by an Unsqueeze: without data its length is a generated name, so
    its read is cut as "unknown"; each cut pass declares the last pass's name and onnx generates the next
    one around it (unk__0, unk__1, unk__0, ...), the cuts themselves never changing."""
    ints = lambda v, n: numpy_helper.from_array(np.array(v, dtype=np.int64), n)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "step"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "axes0"], ["u"]),
        helper.make_node("Gather", ["x", "r"], ["g"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [vi("x", TensorProto.FLOAT, ["batch", "seq"])],
        [vi("u", TensorProto.INT64, None), vi("g", TensorProto.FLOAT, None)],
        initializer=[ints(1, "one"), ints(0, "zero"), ints(1, "step"), ints([0], "axes0")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_renaming_only_passes_stop_with_onnx_result(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _range_model()
    # the loop of cut passes itself: a Range's cut is settled without them (dmlshim.model.range_cuts,
    # tests/test_build55.py), so the shortcut is turned off here
    monkeypatch.setattr(data_prop, "cuts_settled", lambda *_: False)
    calls = count_inference_passes(monkeypatch)
    ours = infer_with_data_prop(model)
    expected = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert ours.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    # the pass without data, one cut pass (its cuts = the first plan's, renamed), the uncut pass
    assert calls == [False, True, True]


def _plan(*shapes: list[str | int]) -> dict[_Site, tuple[str, bytes]]:
    out = {}
    for k, dims in enumerate(shapes):
        tp = helper.make_tensor_type_proto(TensorProto.INT64, dims)
        out[_Site((), k, 0, f"v{k}", False, False)] = (_UNKNOWN, tp.SerializeToString())
    return out


@pytest.mark.parametrize(
    ("before", "after", "renamed"),
    [
        ((["unk__1"], ["unk__2"]), (["unk__7"], ["unk__5"]), True),  # one-to-one
        ((["unk__1"], ["unk__1"]), (["unk__2"], ["unk__3"]), False),  # an equality lost
        ((["unk__1"], ["unk__2"]), (["unk__3"], ["unk__3"]), False),  # an equality gained
        ((["unk__1"],), (["seq"],), False),  # the model's own name is no renaming
        ((["unk__1"],), ([4],), False),  # a length found
        ((["unk__1", "unk__1"],), (["unk__4", "unk__4"],), True),
    ],
)
def test_renamed_only_is_a_one_to_one_renaming_of_generated_names(before, after, renamed) -> None:
    model = _range_model()
    paths = [()]
    assert _renamed_only(_plan(*before), _plan(*after), model, paths) is renamed
