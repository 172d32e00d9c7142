"""Writes ``torchscript_stale_if.onnx`` (and its inputs ``.npz``): a legacy PyTorch export whose If
branches declare stale output shapes, for tests/test_validate_levels.py.

torch.onnx's TorchScript exporter (torch 2.13.0, ``dynamo=False``, opset 18) wraps ``scatter_reduce`` in
two Ifs (``flatten when the input is 0-d``) and writes the traced sizes into their branch outputs: the
second If's else branch declares ``[12]`` for a ``[4, 3]`` value. onnxruntime fails it with graph
optimizations disabled (the If pre-allocates its output with the declared shape) and runs it from its
basic level on. Run ``python tests/models/export_legacy_if.py`` (needs torch) to write the files again.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent


class SegmentMax(torch.nn.Module):
    """Rows picked by ``sel`` (a Gather), then the max over each of 4 segments (``scatter_reduce``)."""

    def forward(self, x: torch.Tensor, sel: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        rows = x.index_select(0, sel)
        out = torch.zeros(4, x.shape[1])
        index = seg.unsqueeze(1).expand(-1, x.shape[1])
        return out.scatter_reduce(0, index, rows, reduce="amax", include_self=True)


def main() -> None:
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    sel = torch.tensor([4, 0, 2, 2, 1, 3])
    seg = torch.tensor([0, 1, 1, 3, 2, 0])
    path = HERE / "torchscript_stale_if.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            SegmentMax(), (x, sel, seg), str(path), dynamo=False, opset_version=18,
            input_names=["x", "sel", "seg"], output_names=["y"],
        )  # fmt: skip
    model = onnx.load(str(path))
    model.ir_version = 10
    model.producer_version = torch.__version__
    onnx.save(model, str(path))
    np.savez(HERE / "torchscript_stale_if.npz", x=x.numpy(), sel=sel.numpy(), seg=seg.numpy())


if __name__ == "__main__":
    main()
