"""`dmlshim export` captures node inputs in an onnxruntime run without graph optimisation. PyTorch's
TorchScript exporter writes ``scatter_reduce(..., "amin")`` as an If on ``Size(Shape(x)) == 0`` whose
branch outputs are declared with the flattened shape ([30]) while the branch taken returns [6, 5].
onnxruntime's default session folds the If and runs the model; without optimisation it refuses the
stale declared shape, and export failed on a model onnxruntime runs. Expected values: onnxruntime CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from dmlshim.cli.main import main


def _model() -> onnx.ModelProto:
    """The TorchScript export's shape: If (flatten a scalar-free input or not) -> ScatterElements min ->
    If (squeeze or not), every branch output declared [30] but the else branches return [6, 5]."""
    flt, i64 = TensorProto.FLOAT, TensorProto.INT64
    flat = helper.make_tensor("flat", i64, [1], [-1])
    names = ("x", "idx", "src")
    types = (flt, i64, flt)
    then1 = helper.make_graph(
        [helper.make_node("Reshape", [n, "flat"], [f"{n}_flat"]) for n in names],
        "then1",
        [],
        [helper.make_tensor_value_info(f"{n}_flat", t, [30]) for n, t in zip(names, types, strict=True)],
        initializer=[flat],
    )
    else1 = helper.make_graph(
        [helper.make_node("Identity", [n], [f"{n}_same"]) for n in names],
        "else1",
        [],
        [helper.make_tensor_value_info(f"{n}_same", t, [6, 5]) for n, t in zip(names, types, strict=True)],
    )
    then2 = helper.make_graph(
        [helper.make_node("Squeeze", ["s"], ["t_out"])],
        "then2",
        [],
        [helper.make_tensor_value_info("t_out", flt, [30])],
    )
    else2 = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["e_out"])],
        "else2",
        [],
        [helper.make_tensor_value_info("e_out", flt, [30])],
    )
    zero = helper.make_tensor("zero", i64, [], [0])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank"]),
        helper.make_node("Equal", ["rank", "zero"], ["is_scalar"]),
        helper.make_node("If", ["is_scalar"], ["d", "i", "u"], then_branch=then1, else_branch=else1),
        helper.make_node("ScatterElements", ["d", "i", "u"], ["s"], axis=1, reduction="min"),
        helper.make_node("If", ["is_scalar"], ["y"], then_branch=then2, else_branch=else2),
    ]
    graph = helper.make_graph(
        nodes,
        "stale_branch",
        [helper.make_tensor_value_info(n, t, [6, 5]) for n, t in zip(names, types, strict=True)],
        [helper.make_tensor_value_info("y", flt, [30])],
        initializer=[zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "x": rng.standard_normal((6, 5)).astype(np.float32),
        "idx": rng.integers(0, 5, (6, 5)),
        "src": rng.standard_normal((6, 5)).astype(np.float32),
    }


def test_export_captures_a_model_whose_taken_branch_has_a_stale_declared_shape(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **_feeds())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, _feeds())[0]
    assert want.shape == (6, 5)  # onnxruntime runs it, the else branch's [6, 5] value through
    out = tmp_path / "export"
    assert main(["export", str(path), "--inputs", str(inputs), "-o", str(out), "-q"]) == 0
    files = sorted(p.name for p in out.rglob("*.json"))
    assert files, "export wrote no node"
    assert main(["validate", str(path), "--inputs", str(inputs), "-q"]) == 0
