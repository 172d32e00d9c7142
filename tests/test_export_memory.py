"""``dmlshim export`` holds no copy of a model's weights: the capture session reads them from the model's
files (never serialized), a node input that is an initializer is read from the model when its folder is
written (never asked of onnxruntime, never held), and the folders are the same bytes as when the whole
model was held in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.dxdispatch import capture as capture_mod
from dmlshim.dxdispatch import capture_run
from dmlshim.dxdispatch import captured as captured_mod
from dmlshim.dxdispatch import export as export_mod
from dmlshim.dxdispatch.capture import capture_nodes
from dmlshim.dxdispatch.export import export_model
from dmlshim.errors import BadModelError
from dmlshim.execute.weights.shared import SharedWeights
from dmlshim.ort.session import load_model

from .oracle import IR_VERSION, ort_run

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "onnx_models"

# 5 MiB of float32: dmlshim shares it rather than copies it, and a file this large is read without it
# (its graph is above WALK_MIN_GRAPH_BYTES), so sessions read it from the file
ROWS, WIDTH = 20_000, 64
_TABLE = np.random.default_rng(7).standard_normal((ROWS, WIDTH)).astype(np.float32)
_IDS = np.array([[3, ROWS - 1, 0], [17, 3, 250]], dtype=np.int64)


def _big_table_model() -> onnx.ModelProto:
    """A large initializer ``table`` read by a top-level Gather and, from the enclosing scope, by a Gather
    inside the branch an If takes."""
    then = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["t_out"], name="inner_gather")],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["emb"], ["e_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),
            helper.make_node("If", ["cond"], ["branch"], then_branch=then, else_branch=other, name="pick"),
        ],
        "big_table",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("emb", TensorProto.FLOAT, [2, 3, WIDTH]),
            helper.make_tensor_value_info("branch", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(_TABLE, "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=IR_VERSION)


def _feeds() -> dict[str, np.ndarray]:
    return {"ids": _IDS, "cond": np.array(True)}


@pytest.fixture
def big_model(tmp_path: Path) -> Path:
    path = tmp_path / "big_table.onnx"
    onnx.save(_big_table_model(), str(path))
    return path


class _Spy:
    """Records the model and outputs of every capture session."""

    def __init__(self) -> None:
        self.sessions: list[tuple[onnx.ModelProto, list[str]]] = []

    def __call__(self, model: onnx.ModelProto, outputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.sessions.append((model, list(outputs)))
        return capture_run.CaptureRunner(model, outputs, *args, **kwargs)


def _table_bytes_in(model: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) + 4 * len(t.float_data) for t in model.graph.initializer if t.name == "table")


def test_capture_holds_no_copy_of_the_initializer(big_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy()
    monkeypatch.setattr(capture_mod, "CaptureRunner", spy)
    loaded = load_model(big_model, weightless=True, own_weights=False)
    assert loaded.weightless
    capture = capture_nodes(loaded.proto, _feeds(), weights_path=loaded.weights_path)

    assert spy.sessions, "the capture ran no onnxruntime session"
    for _, outputs in spy.sessions:
        assert "table" not in outputs  # never asked of onnxruntime as an extra output
    # the top-level session's model holds the table as a reference to the file, not its bytes
    top, _ = spy.sessions[0]
    assert _table_bytes_in(top) == 0
    by_name = {c.name: c for c in capture.nodes}
    assert set(by_name) == {"embed", "pick/then_branch/inner_gather"}
    for node in by_name.values():
        # the captured node keeps a reference to the model's weight, not an array of it
        held = [*vars(node).values(), *node.inputs]
        assert not any(isinstance(v, np.ndarray) and v.size >= _TABLE.size for v in held)
        assert isinstance(node.inputs[0], capture_mod.ModelWeight)
        # read from the model file on demand: the value onnx writes for the initializer
        np.testing.assert_array_equal(node.arrays[0], _TABLE)
    want = ort_run(big_model, _feeds())
    np.testing.assert_array_equal(by_name["embed"].output, want[0])
    np.testing.assert_array_equal(by_name["pick/then_branch/inner_gather"].output, want[1])


def test_capture_from_memory_hands_the_weight_without_serializing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy()
    monkeypatch.setattr(capture_mod, "CaptureRunner", spy)
    capture = capture_nodes(_big_table_model(), _feeds())
    top, outputs = spy.sessions[0]
    assert "table" not in outputs
    assert _table_bytes_in(top) == 0  # a placeholder, its array handed to onnxruntime
    embed = next(c for c in capture.nodes if c.name == "embed")
    assert isinstance(embed.inputs[0], capture_mod.ModelWeight)
    np.testing.assert_array_equal(embed.output, ort_run(_big_table_model(), _feeds())[0])


def test_export_writes_the_weight_and_onnxruntime_output(big_model: Path, tmp_path: Path) -> None:
    result = export_model(big_model, tmp_path / "out", inputs=_feeds())
    folders = {e.node: tmp_path / "out" / e.folder for e in result.exported}
    assert set(folders) == {"embed", "pick/then_branch/inner_gather"}
    want = ort_run(big_model, _feeds())
    for node, out in zip(("embed", "pick/then_branch/inner_gather"), want, strict=True):
        # DirectML Sizes: the ONNX shapes padded with leading 1s
        np.testing.assert_array_equal(np.load(folders[node] / "input.npy").reshape(_TABLE.shape), _TABLE)
        np.testing.assert_array_equal(np.load(folders[node] / "expected_output.npy").reshape(out.shape), out)
    assert all(e.matches_onnxruntime for e in result.exported)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _whole_model_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The export as it was before weights were shared: the whole model read into memory, copied and
    serialized for onnxruntime, every initializer a node reads turned into an array."""
    real_load = export_mod.load_model
    monkeypatch.setattr(export_mod, "load_model", lambda m, **_: real_load(m))
    monkeypatch.setattr(
        capture_mod,
        "SharedWeights",
        lambda inits, model_path=None, graph=None: SharedWeights(inits, min_bytes=1 << 62),
    )
    monkeypatch.setattr(captured_mod, "is_large", lambda t: False)


@pytest.mark.parametrize(
    "model",
    ["big_table", "ecosystem/hw_external_data", "embedding_gather", "loop_scatternd", "real/bert_dynamo"],
)
def test_export_is_byte_identical_to_the_whole_model_route(
    model: str, big_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if model == "big_table":
        path, feeds = big_model, _feeds()
    else:
        path = MODELS / f"{model}.onnx"
        with np.load(MODELS / f"{model}.npz", allow_pickle=False) as data:
            feeds = {k: data[k] for k in data.files}
    export_model(path, tmp_path / "shared", inputs=feeds)
    with monkeypatch.context() as m:
        _whole_model_in_memory(m)
        export_model(path, tmp_path / "whole", inputs=feeds)
    shared, whole = _tree(tmp_path / "shared"), _tree(tmp_path / "whole")
    assert any(name.endswith("input.npy") for name in shared)
    assert shared.keys() == whole.keys()
    for name in shared:
        assert shared[name] == whole[name], name


def test_export_refuses_a_model_file_changed_while_it_is_read(
    big_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights are read from the model file while the folders are written: a file changed meanwhile
    stops the export, and nothing is left in the output folder."""
    real_export_one = export_mod._export_one

    def export_then_change(*args: Any, **kwargs: Any) -> Any:
        entry = real_export_one(*args, **kwargs)
        with open(big_model, "ab") as handle:
            handle.write(b"\0")
        return entry

    monkeypatch.setattr(export_mod, "_export_one", export_then_change)
    with pytest.raises(BadModelError, match="changed since"):
        export_model(big_model, tmp_path / "out", inputs=_feeds())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
