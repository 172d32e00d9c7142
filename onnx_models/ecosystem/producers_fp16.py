"""float16 graphs: onnxconverter-common's ``float16.convert_float_to_float16`` on a shipped decoder step
(float16 KV-cache ScatterND, top-k GatherElements) and a graph built with onnx-graphsurgeon (float16
ScatterElements max/min, GatherElements, GatherND batch_dims 1 and Gather with negative constant indices).

onnxruntime CPU has no float16 kernel for ScatterElements add/mul nor for any ScatterND reduction (it fails
at run time: "MLFloat16 data type is not supported with ScatterND opset 18 when reduction is 'max'"), so the
float16 reductions here are ScatterElements max and min, the ones it runs.
"""

from __future__ import annotations

import numpy as np
import onnx
from eco_common import HERE, Built, Spec

TOP = HERE.parent


def _shipped(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model = onnx.load(str(TOP / f"{name}.onnx"))
    with np.load(TOP / f"{name}.npz", allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    return model, feeds


def fp16_decoder_step() -> Built:
    from onnxconverter_common import float16

    model, feeds = _shipped("tiny_decoder_step")
    # keep_io_types=True writes a Cast whose output type clashes with a Transpose (onnxruntime refuses
    # the model: "Type (tensor(float16)) of output arg (transpose_4) ... does not match"), so the graph
    # inputs and outputs become float16 too.
    out = float16.convert_float_to_float16(model, keep_io_types=False)
    halves = {i.name for i in out.graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    cast = {k: (v.astype(np.float16) if k in halves else v) for k, v in feeds.items()}
    return Built(out, cast, notes="convert_float_to_float16(keep_io_types=False)")


def gs_fp16_gathers_scatters() -> Built:
    import onnx_graphsurgeon as gs

    rng = np.random.default_rng(4701)
    x = gs.Variable("x", dtype=np.float16, shape=(4, 6))
    upd = gs.Variable("upd", dtype=np.float16, shape=(2, 6))
    seq = gs.Variable("seq", dtype=np.float16, shape=(2, 5, 3))
    se_idx = gs.Constant("se_idx", np.array([[-1, 0, 2, -4, 1, 3], [3, -3, -1, 0, -2, 1]], np.int64))
    ge_idx = gs.Constant("ge_idx", np.array([[-1, 0, -6], [2, -2, 5], [0, 0, -3], [-5, 1, 4]], np.int32))
    nd_idx = gs.Constant("nd_idx", np.array([[[-1, 0], [1, -3], [4, 2]], [[0, 2], [-5, -1], [2, -2]]], np.int64))
    g_idx = gs.Constant("g_idx", np.array([-1, 0, -2], np.int32))
    t_idx = gs.Constant("t_idx", np.array([-1, -7], np.int32))
    table = gs.Constant("table", (rng.standard_normal((7, 3)) * 4).astype(np.float16))
    outs = {name: gs.Variable(name, dtype=np.float16) for name in
            ("scatter_max", "scatter_min", "gathered", "rows", "picked", "looked_up", "mixed")}
    nodes = [
        gs.Node("ScatterElements", "scatter_max", {"axis": 0, "reduction": "max"}, [x, se_idx, upd],
                [outs["scatter_max"]]),
        gs.Node("ScatterElements", "scatter_min", {"axis": 0, "reduction": "min"}, [x, se_idx, upd],
                [outs["scatter_min"]]),
        gs.Node("GatherElements", "gather_elements_neg", {"axis": -1}, [outs["scatter_max"], ge_idx],
                [outs["gathered"]]),
        gs.Node("Gather", "gather_rows_neg", {"axis": -2}, [outs["scatter_min"], g_idx], [outs["rows"]]),
        gs.Node("GatherND", "gathernd_batch1_neg", {"batch_dims": 1}, [seq, nd_idx], [outs["picked"]]),
        gs.Node("Gather", "table_lookup_neg", {"axis": 0}, [table, t_idx], [outs["looked_up"]]),
        gs.Node("Add", "mix", {}, [outs["picked"], outs["looked_up"]], [outs["mixed"]]),
    ]
    graph = gs.Graph(nodes=nodes, inputs=[x, upd, seq],
                     outputs=[outs[k] for k in ("gathered", "rows", "mixed")], opset=18)
    graph.cleanup().toposort()
    model = gs.export_onnx(graph)
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model)
    feeds = {
        "x": (rng.standard_normal((4, 6)) * 3).astype(np.float16),
        "upd": (rng.standard_normal((2, 6)) * 3).astype(np.float16),
        "seq": (rng.standard_normal((2, 5, 3)) * 3).astype(np.float16),
    }
    return Built(model, feeds, notes="gs.Graph -> cleanup().toposort() -> gs.export_onnx, opset 18")


SPECS: list[Spec] = [
    Spec("fp16_tiny_decoder_step", "onnxconverter-common", "onnx_models/tiny_decoder_step.onnx after "
         "float16.convert_float_to_float16: float16 KV-cache ScatterND, embedding Gather, top-k "
         "GatherElements", fp16_decoder_step, ("onnxconverter-common",)),
    Spec("gs_fp16_gathers_scatters", "onnx-graphsurgeon", "float16 ScatterElements max/min; GatherElements, "
         "GatherND batch_dims 1 and Gather with negative constant indices (int32 and int64)",
         gs_fp16_gathers_scatters, ("onnx-graphsurgeon",)),
]
