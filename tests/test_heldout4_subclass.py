"""A program's own subclass of ``onnxruntime.InferenceSession`` works over dmlshim's session.

Found in the fourth held-out round (client libraries): insightface's ``PickableInferenceSession``
subclasses ``onnxruntime.InferenceSession`` (dmlshim's, once bound), sets ``self.model_path`` in its
``__init__`` (dmlshim's read-only property refused it: AttributeError) and pickles itself through
``__getstate__``/``__setstate__`` (dmlshim refused every pickle). Reduced here to the same pattern on plain
onnxruntime API; the expected behaviour is the same subclass over onnxruntime's own class.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim


def _model(path: Path) -> str:
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return str(path)


class _PickableMixin:
    """The pattern of insightface's PickableInferenceSession."""

    def __init__(self, model_path: str, **kwargs: Any) -> None:
        super().__init__(model_path, **kwargs)  # type: ignore[call-arg]
        self.model_path = model_path

    def __getstate__(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "providers": list(self.get_providers())}  # type: ignore[attr-defined]

    def __setstate__(self, values: dict[str, Any]) -> None:
        self.__init__(values["model_path"], providers=values["providers"])  # type: ignore[misc]


class RealPickable(_PickableMixin, ort.InferenceSession):
    pass


class OurPickable(_PickableMixin, dmlshim.InferenceSession):
    pass


FEEDS = {"ids": np.array([3, 0, 9], dtype=np.int64)}


@pytest.mark.parametrize("providers", [None, ["DmlExecutionProvider", "CPUExecutionProvider"]])
def test_subclass_sets_model_path_and_pickles(tmp_path: Path, providers: list[str] | None) -> None:
    path = _model(tmp_path / "m.onnx")
    theirs = RealPickable(path, providers=["CPUExecutionProvider"])
    expected = theirs.run(None, FEEDS)[0]
    assert pickle.loads(pickle.dumps(theirs)).run(None, FEEDS)[0].tobytes() == expected.tobytes()

    ours = OurPickable(path, providers=providers)
    assert ours.model_path == path
    for clone in (pickle.loads(pickle.dumps(ours)), copy.deepcopy(ours)):
        assert type(clone) is type(ours) and clone.model_path == path
        assert clone.get_providers() == ours.get_providers()
        assert clone.run(None, FEEDS)[0].tobytes() == expected.tobytes()


def test_plain_session_still_refuses_pickle_as_onnxruntime(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx")
    with pytest.raises(TypeError) as real:
        pickle.dumps(ort.InferenceSession(path, providers=["CPUExecutionProvider"]))
    with pytest.raises(TypeError) as ours:
        pickle.dumps(dmlshim.InferenceSession(path))
    assert str(ours.value) == str(real.value)


@pytest.mark.parametrize(
    "name",
    ["model_path", "engine", "feature_level", "index_mode", "last_run_record", "_providers", "_sess_options"],
)
def test_program_may_assign_attribute_names(tmp_path: Path, name: str) -> None:
    """onnxruntime's session is a plain Python object: a subclass may assign any attribute and read it back.
    dmlshim's session keeps running on its own state."""
    path = _model(tmp_path / "m.onnx")
    real = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    setattr(real, name, "mine")
    assert getattr(real, name) == "mine"
    ours = dmlshim.InferenceSession(path)
    setattr(ours, name, "mine")
    assert getattr(ours, name) == "mine"
    assert ours.run(None, FEEDS)[0].tobytes() == real.run(None, FEEDS)[0].tobytes()
    delattr(ours, name)
    assert getattr(ours, name) != "mine"


def test_bound_program_subclass_is_counted(tmp_path: Path) -> None:
    """Bound by ``dmlshim.install()``, a subclass made after the binding is dmlshim's tracked session."""
    path = _model(tmp_path / "m.onnx")
    from dmlshim.ort.standin import standin_module

    standin = standin_module()
    bound = type("BoundPickable", (_PickableMixin, standin.InferenceSession), {})
    session = bound(path)
    session.last_run_record = None  # a program's own attribute of that name: the summary still counts
    session.run(None, FEEDS)
    assert session._last_run_record is not None
