"""Writes ``pyg_sage_gat.onnx``: torch_geometric's SAGEConv then GATConv (2 heads), exported by torch.onnx's
TorchScript exporter (torch 2.13.0, torch_geometric 2.8.1, ``dynamo=False``, opset 17) with symbolic
``num_nodes`` and ``num_edges``, for tests/test_inputs_real_shapes.py.

``edge_index`` feeds Gathers (``x_j = x[edge_index[0]]``) and ScatterElements (the mean and softmax
aggregations over ``num_nodes``); GATConv's ``scatter_reduce`` comes wrapped in Ifs (``flatten when 0-d``)
whose else branches declare stale rank-1 shapes for 2-d values. Run
``python tests/models/export_pyg_gnn.py`` (needs torch and torch_geometric) to write it again.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch
from torch_geometric.nn import GATConv, SAGEConv

HERE = Path(__file__).resolve().parent


class SageGat(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sage = SAGEConv(16, 32)
        self.gat = GATConv(32, 8, heads=2)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.gat(self.sage(x, edge_index).relu(), edge_index)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(7, 16)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 0], [1, 2, 3, 4, 5, 6, 0, 3]])
    path = HERE / "pyg_sage_gat.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            SageGat().eval(), (x, edge_index), str(path), dynamo=False, opset_version=17,
            input_names=["x", "edge_index"], output_names=["out"],
            dynamic_axes={"x": {0: "num_nodes"}, "edge_index": {1: "num_edges"}, "out": {0: "num_nodes"}},
        )  # fmt: skip
    model = onnx.load(str(path))
    model.ir_version = 10
    model.producer_version = torch.__version__
    onnx.save(model, str(path))


if __name__ == "__main__":
    main()
