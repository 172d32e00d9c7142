"""The committed models in ``onnx_models/``: valid, loadable, runnable, and holding the ops we claim.

These tests need no torch: the ``.onnx`` files and their sample inputs are committed, written by
``onnx_models/export_models.py`` (PyTorch dynamo exporter) and ``onnx_models/build_handmade.py``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

MODELS_DIR = Path(__file__).resolve().parents[1] / "onnx_models"
#: A shrinking directory must fail loudly.
MIN_MODELS = 16
#: onnxruntime 1.31 reads IR versions up to 13.
MAX_IR = 13
MAX_BYTES = 200 * 1024

#: Ops whose presence (with key attributes) the table below pins; other ops are free to change.
TRACKED_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND", "TopK", "Loop"}
)
#: Key attribute per tracked op, with the ONNX default used when the attribute is absent.
KEY_ATTRS: dict[str, dict[str, Any]] = {
    "Gather": {"axis": 0},
    "GatherElements": {"axis": 0},
    "GatherND": {"batch_dims": 0},
    "Scatter": {"axis": 0},
    "ScatterElements": {"axis": 0, "reduction": "none"},
    "ScatterND": {"reduction": "none"},
    "TopK": {"axis": -1},
    "Loop": {},
}


@dataclass(frozen=True)
class Expect:
    """What one committed model must contain."""

    opset: int
    ir: int
    #: (op_type, key attributes) of every tracked node, subgraphs included; order does not matter.
    ops: tuple[tuple[str, dict[str, Any]], ...]
    #: graph inputs whose sample values must hold no duplicate (scatter without reduction), with the
    #: axis along which each line must be duplicate-free (None: the whole tensor).
    unique: tuple[tuple[str, int | None], ...] = ()


_KV_SCATTERS = (("ScatterND", {"reduction": "none"}), ("ScatterND", {"reduction": "none"}))

EXPECTED: dict[str, Expect] = {
    # --- exported with torch.onnx.export(dynamo=True), opset 18 ---
    "gather_elements_torch_gather": Expect(18, 10, (("GatherElements", {"axis": -1}),)),
    "gathernd_advanced_indexing": Expect(18, 10, (("GatherND", {"batch_dims": 0}),)),
    "gathernd_dynamic_batch": Expect(18, 10, (("GatherND", {"batch_dims": 0}),)),
    "scatter_elements_scatter": Expect(18, 10, (("ScatterElements", {"axis": 1, "reduction": "none"}),)),
    "scatter_add_histogram": Expect(18, 10, (("ScatterElements", {"axis": 1, "reduction": "add"}),)),
    "scatternd_kv_cache": Expect(18, 10, _KV_SCATTERS, unique=(("cache_position", None),)),
    "embedding_gather": Expect(18, 10, (("Gather", {"axis": 0}), ("Gather", {"axis": 0}))),
    "topk_gather": Expect(18, 10, (("TopK", {"axis": 1}), ("GatherElements", {"axis": 1}))),
    "gnn_scatter_reduce": Expect(
        18,
        10,
        (
            ("Gather", {"axis": 0}),
            ("Gather", {"axis": 0}),
            ("Gather", {"axis": 0}),
            ("ScatterND", {"reduction": "add"}),
            ("ScatterElements", {"axis": 0, "reduction": "max"}),
        ),
    ),
    "tiny_decoder_step": Expect(
        18,
        10,
        (
            ("Gather", {"axis": 0}),
            *_KV_SCATTERS,
            ("Gather", {"axis": 1}),
            ("TopK", {"axis": -1}),
            ("GatherElements", {"axis": -1}),
        ),
        unique=(("cache_position", None),),
    ),
    "gather_beam_reorder_dynamic": Expect(18, 10, (("Gather", {"axis": 0}),)),
    # --- hand-built with onnx.helper ---
    "scatter_deprecated_opset10": Expect(10, 5, (("Scatter", {"axis": 1}),), unique=(("indices", 1),)),
    "gathernd_batch_dims1": Expect(13, 7, (("GatherND", {"batch_dims": 1}),)),
    "gathernd_batch_dims2": Expect(13, 7, (("GatherND", {"batch_dims": 2}),)),
    "gathernd_batch_dims3": Expect(13, 7, (("GatherND", {"batch_dims": 3}),)),
    "loop_scatternd": Expect(
        13,
        7,
        (
            ("Loop", {}),
            ("Gather", {"axis": 0}),
            ("Gather", {"axis": 0}),
            ("ScatterND", {"reduction": "none"}),
        ),
        unique=(("perm", None),),
    ),
}

NAMES = sorted(EXPECTED)


def _model_path(name: str) -> Path:
    return MODELS_DIR / f"{name}.onnx"


def _load_inputs(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS_DIR / f"{name}.npz", allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def _iter_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs (Loop/If/Scan bodies)."""
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes.extend(_iter_nodes(attr.g))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    nodes.extend(_iter_nodes(sub))
    return nodes


def _key(op_type: str, attrs: dict[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return op_type, tuple(sorted(attrs.items()))


def _tracked_ops(model: onnx.ModelProto) -> Counter[tuple[str, tuple[tuple[str, Any], ...]]]:
    found: Counter[tuple[str, tuple[tuple[str, Any], ...]]] = Counter()
    for node in _iter_nodes(model.graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in TRACKED_OPS:
            continue
        attrs = dict(KEY_ATTRS[node.op_type])
        for attr in node.attribute:
            if attr.name in attrs:
                value = helper.get_attribute_value(attr)
                attrs[attr.name] = value.decode() if isinstance(value, bytes) else value
        found[_key(node.op_type, attrs)] += 1
    return found


def _session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def test_model_floor_and_table_match_directory() -> None:
    on_disk = sorted(p.stem for p in MODELS_DIR.glob("*.onnx"))
    assert len(on_disk) >= MIN_MODELS, f"only {len(on_disk)} models in {MODELS_DIR}"
    assert on_disk == NAMES, "onnx_models/ and the EXPECTED table in this test disagree"
    samples = sorted(p.stem for p in MODELS_DIR.glob("*.npz"))
    assert samples == on_disk, "every model needs exactly one sample input <name>.npz"


def test_readme_lists_every_model() -> None:
    readme = (MODELS_DIR / "README.md").read_text(encoding="utf-8")
    missing = [name for name in NAMES if f"{name}.onnx" not in readme]
    assert not missing, f"onnx_models/README.md does not list {missing}"


@pytest.mark.parametrize("name", NAMES)
def test_model_is_valid_and_small(name: str) -> None:
    path = _model_path(name)
    assert path.stat().st_size < MAX_BYTES
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    expect = EXPECTED[name]
    assert model.ir_version <= MAX_IR
    assert model.ir_version == expect.ir
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    assert opsets == {"ai.onnx": expect.opset}
    assert not any(init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer)


@pytest.mark.parametrize("name", NAMES)
def test_model_contains_expected_gather_scatter_ops(name: str) -> None:
    model = onnx.load(_model_path(name))
    expected = Counter(_key(op, attrs) for op, attrs in EXPECTED[name].ops)
    assert _tracked_ops(model) == expected


@pytest.mark.parametrize("name", NAMES)
def test_sample_inputs_match_graph_inputs(name: str) -> None:
    model = onnx.load(_model_path(name))
    inputs = _load_inputs(name)
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    assert list(inputs) == [i.name for i in graph_inputs]
    for info in graph_inputs:
        value = inputs[info.name]
        tensor_type = info.type.tensor_type
        assert value.dtype == helper.tensor_dtype_to_np_dtype(tensor_type.elem_type), info.name
        dims = tensor_type.shape.dim
        assert value.ndim == len(dims), info.name
        for axis, dim in enumerate(dims):
            if dim.HasField("dim_value"):
                assert value.shape[axis] == dim.dim_value, (info.name, axis)
    for input_name, axis in EXPECTED[name].unique:
        value = inputs[input_name]
        lines = (
            value.reshape(1, -1)
            if axis is None
            else np.moveaxis(value, axis, -1).reshape(-1, value.shape[axis])
        )
        for line in lines:
            assert len(np.unique(line)) == line.size, f"{input_name} repeats an index: {line}"


@pytest.mark.parametrize("name", NAMES)
def test_model_runs_in_onnxruntime_cpu(name: str) -> None:
    path = _model_path(name)
    sess = _session(path)
    inputs = _load_inputs(name)
    outputs = sess.run(None, inputs)
    model = onnx.load(path)
    assert len(outputs) == len(model.graph.output)
    for info, value in zip(model.graph.output, outputs, strict=True):
        assert value.dtype == helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type), info.name
        if np.issubdtype(value.dtype, np.floating):
            assert np.isfinite(value).all(), info.name
    # Deterministic: the same inputs give the same outputs on a second run.
    again = sess.run(None, inputs)
    for first, second in zip(outputs, again, strict=True):
        np.testing.assert_array_equal(first, second)


def test_dynamic_models_have_symbolic_batch() -> None:
    for name, dim_name in (("gathernd_dynamic_batch", "batch"), ("gather_beam_reorder_dynamic", "beams")):
        model = onnx.load(_model_path(name))
        for info in model.graph.input:
            assert info.type.tensor_type.shape.dim[0].dim_param == dim_name, (name, info.name)
