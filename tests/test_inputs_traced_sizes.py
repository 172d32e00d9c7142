"""Generated inputs for models traced at fixed sizes but declared with symbolic dimensions.

TorchScript exports keep the example's sizes in constants: GPT-NeoX reshapes ``Range(0, seq, 1)`` to a
constant ``[6, 1]``; Funnel computes GatherElements indices from a float ``8.0``. Each hand-built model
below reproduces one of these patterns; it runs on onnxruntime CPU only at the traced size, so the test
checks that ``generate`` finds that size, that onnxruntime CPU runs the generated feeds, and that
``dmlshim validate MODEL`` (generated inputs) exits 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim.cli.main import main
from dmlshim.inputs import generate
from dmlshim.inputs.hints import size_hints

VOCAB = 11


def _const(name: str, value: object, dtype: type = np.int64) -> onnx.NodeProto:
    tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), name)
    return helper.make_node("Constant", [], [name], value=tensor)


def _model(nodes: list[onnx.NodeProto], outputs: list[str], weight_rows: int = VOCAB) -> onnx.ModelProto:
    rows = np.arange(weight_rows * 4, dtype=np.float32).reshape(weight_rows, 4)
    weight = numpy_helper.from_array(rows, "w")
    graph = helper.make_graph(
        nodes,
        "traced",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _seq_len(nodes: list[onnx.NodeProto]) -> None:
    """``seq`` (int64 scalar) = Shape(embedded)[1], as the TorchScript exporter writes it."""
    nodes += [
        helper.make_node("Gather", ["w", "input_ids"], ["emb"]),
        helper.make_node("Shape", ["emb"], ["shape"]),
        _const("one", 1),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
    ]


def reshape_to_traced_shape() -> onnx.ModelProto:
    """GPT-NeoX: positions ``Range(0, seq, 1)`` reshaped to the constant ``[6, 1]``, then gathered."""
    nodes: list[onnx.NodeProto] = []
    _seq_len(nodes)
    nodes += [
        _const("zero", 0),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"]),
        _const("target", [6, 1]),
        helper.make_node("Reshape", ["pos", "target"], ["pos2"]),
        helper.make_node("Gather", ["w", "pos2"], ["y"]),
    ]
    return _model(nodes, ["y", "emb"])


def indices_from_traced_float(quantized: bool = False) -> onnx.ModelProto:
    """Funnel: GatherElements indices ``seq - 1 - Range(0, 8.0, 1.0)`` (``8.0`` the traced length) along
    the sequence axis of the embedding; any ``seq`` but 8 puts an index out of range (negative below, past
    the end... of the reversed range above it). ``quantized``: ``8.0`` passes a QuantizeLinear/
    DequantizeLinear pair first, as in a QDQ copy of the model."""
    nodes: list[onnx.NodeProto] = []
    _seq_len(nodes)
    length = "eight"
    nodes.append(_const("eight", 8.0, np.float32))
    if quantized:
        nodes += [
            _const("scale", 1.0 / 16, np.float32),
            _const("zp", 0, np.int8),
            helper.make_node("QuantizeLinear", ["eight", "scale", "zp"], ["eight_q"]),
            helper.make_node("DequantizeLinear", ["eight_q", "scale", "zp"], ["eight_dq"]),
        ]
        length = "eight_dq"
    nodes += [
        _const("fzero", 0.0, np.float32),
        _const("fone", 1.0, np.float32),
        helper.make_node("Range", ["fzero", length, "fone"], ["frange"]),
        helper.make_node("Cast", ["frange"], ["steps"], to=TensorProto.INT64),
        helper.make_node("Sub", ["seq", "one"], ["last"]),
        helper.make_node("Sub", ["last", "steps"], ["rev"]),  # seq-1 .. seq-8: in range only when seq == 8
        _const("axes", [0, 2]),
        helper.make_node("Unsqueeze", ["rev", "axes"], ["rev3"]),  # [1, 8, 1]
        _const("zero", 0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        _const("zero1", [0]),
        helper.make_node("Unsqueeze", ["batch", "zero1"], ["batch1"]),
        _const("tail", [8, 4]),
        helper.make_node("Concat", ["batch1", "tail"], ["full"], axis=0),
        helper.make_node("Expand", ["rev3", "full"], ["idx"]),
        helper.make_node("GatherElements", ["emb", "idx"], ["y"], axis=1),
    ]
    return _model(nodes, ["y"])


def _ort_runs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize(
    ("build", "traced"),
    [
        (reshape_to_traced_shape, 6),
        (indices_from_traced_float, 8),
        (lambda: indices_from_traced_float(quantized=True), 8),
    ],
    ids=["reshape-constant-shape", "float-length", "quantized-float-length"],
)
def test_traced_size_is_found(build: object, traced: int, tmp_path: Path) -> None:
    model = build()  # type: ignore[operator]
    # onnxruntime refuses the model at the default size: the pattern really pins the length
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's error types share no useful base
        _ort_runs(model, {"input_ids": np.zeros((2, 2), np.int64)})
    generated = generate(model)
    assert generated.symbols["s"] == traced
    assert generated.checked
    _ort_runs(model, generated.feeds)  # onnxruntime CPU runs the generated inputs
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["validate", str(path)]) == 0


def test_hints_are_the_traced_sizes() -> None:
    assert 6 in size_hints(reshape_to_traced_shape())
    assert 8 in size_hints(indices_from_traced_float())
    assert 8 in size_hints(indices_from_traced_float(quantized=True))


def scatter_through_rank_if() -> onnx.ModelProto:
    """TorchScript's ``scatter_reduce`` wrapper: ``if x.dim() == 0`` flattens data and indices, else passes
    them on (``If(Equal(Size(Shape(x)), 0))``); the ScatterElements after it reads the If's outputs. The
    indices reach it through the If, and its data dims are those of the branch that runs ([4, 3])."""

    def branch(name: str, flatten: bool) -> onnx.GraphProto:
        if flatten:
            nodes = [helper.make_node("Reshape", [src, "flat"], [f"{name}_{src}"]) for src in ("x", "idx")]
        else:
            nodes = [helper.make_node("Identity", [src], [f"{name}_{src}"]) for src in ("x", "idx")]
        outputs = [helper.make_tensor_value_info(f"{name}_{s}", t, None)
                   for s, t in (("x", TensorProto.FLOAT), ("idx", TensorProto.INT64))]  # fmt: skip
        return helper.make_graph(nodes, name, [], outputs)

    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Size", ["shape"], ["rank"]),
            helper.make_node("Equal", ["rank", "zero"], ["is_scalar"]),
            helper.make_node("If", ["is_scalar"], ["data", "indices"], then_branch=branch("t", True),
                             else_branch=branch("e", False)),
            helper.make_node("ScatterElements", ["data", "indices", "u"], ["y"], axis=0, reduction="add"),
        ],
        "rank_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=10)


@pytest.mark.parametrize("seed", range(4))
def test_indices_through_an_if_decided_by_rank(seed: int, tmp_path: Path) -> None:
    model = scatter_through_rank_if()
    generated = generate(model, seed=seed)
    idx = generated.feeds["idx"]
    assert idx.min() >= 0 and idx.max() < 4  # ONNX: ScatterElements indices inside data dim 0 (4)
    _ort_runs(model, generated.feeds)
    if seed == 0:
        path = tmp_path / "m.onnx"
        onnx.save(model, str(path))
        assert main(["validate", str(path)]) == 0
