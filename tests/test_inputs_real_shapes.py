"""Generated index inputs are drawn over the dimension they index at the run's shapes, resolved through
shape inference at those shapes, --input-shape applied first. The model is torch_geometric's SAGEConv and
GATConv exported by torch.onnx (tests/models/export_pyg_gnn.py): edge_index feeds Gathers and
ScatterElements over num_nodes, partly through TorchScript's Ifs whose branches declare stale shapes.
onnxruntime checks every index against its dimension, so its accepting the feeds is the outside check."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from dmlshim.execute.weights.model_source import load_model
from dmlshim.inputs import generate

GNN = Path(__file__).resolve().parent / "models" / "pyg_sage_gat.onnx"


def _ort_run(feeds: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    (out,) = ort.InferenceSession(str(GNN), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    return out


@pytest.mark.parametrize(
    ("shapes", "nodes", "edges"),
    [({"num_nodes": (50000,), "num_edges": (500000,)}, 50000, 500000), (None, 2, 2)],
)
def test_edge_lists_span_the_nodes(
    shapes: dict[str, tuple[int, ...]] | None, nodes: int, edges: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        generated = generate(load_model(str(GNN), weightless=True), input_shapes=shapes, seed=0)
    assert not [r for r in caplog.records if "drawing zeros" in r.getMessage()]
    edge_index = generated.feeds["edge_index"]
    assert edge_index.shape == (2, edges) and generated.feeds["x"].shape == (nodes, 16)
    assert edge_index.min() == 0 and edge_index.max() == nodes - 1  # every node reachable, none beyond
    assert len(np.unique(edge_index)) == min(nodes, 2 * edges)
    out = _ort_run(dict(generated.feeds))  # onnxruntime refuses an index outside its dimension
    assert out.shape == (nodes, 16) and np.isfinite(out).all()


def test_one_unknowable_use_does_not_zero_the_input(caplog: pytest.LogCaptureFixture) -> None:
    """Before, the stale If branch shapes left two of the data shapes unknown and drew edge_index as
    zeros, --input-shape or not; the range of a use stays unknown only where inference at the run's
    shapes cannot give it."""
    shapes = {"edge_index": (2, 64), "x": (10, 16)}
    with caplog.at_level(logging.WARNING):
        generated = generate(load_model(str(GNN), weightless=True), input_shapes=shapes, seed=3)
    assert not caplog.records
    assert set(np.unique(generated.feeds["edge_index"])) == set(range(10))
