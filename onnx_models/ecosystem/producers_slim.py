"""PyTorch exports of ``onnx_models/real/`` rewritten by graph optimizers people run before deployment:
onnxslim (what ultralytics runs on its exports: constant folding, dead-node and common-subexpression
elimination, pattern fusions) and onnxoptimizer (the onnx optimizer passes: ``fuse_consecutive_*``,
``eliminate_*``, ``extract_constant_to_initializer``).

The sources are a decoder step writing a static KV cache with ScatterElements (TorchScript) and ScatterND
(dynamo), a FasterRCNN detector (NMS postprocess, ``If``), a BERT encoder, a GCN's ``scatter_add`` message
passing, beam-search bookkeeping (gathers and scatters on beams), GPT-2 / Mixtral steps with their
Shape->Gather chains, Mixtral's GatherND expert routing and a BART decoder step with past;
each is rewritten with one pass set or option and keeps the source's sample inputs (less any input the
rewrite dropped). onnxslim folds the
Shape->Gather->Unsqueeze->Concat chains the TorchScript exporter writes (and, with static input shapes,
every shape computation); onnxoptimizer's ``eliminate_shape_gather`` does the same for a Gather on a
Shape whose dimension is known.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from eco_common import HERE, Built, Spec

REAL = HERE.parent / "real"
#: onnxoptimizer's pass set for Shape->Gather chains and the dead code they leave
SHAPE_PASSES = (
    "eliminate_shape_gather",
    "eliminate_shape_op",
    "eliminate_slice_after_shape",
    "eliminate_common_subexpression",
    "eliminate_deadend",
    "eliminate_unused_initializer",
)
#: onnxoptimizer's constant hoisting and concat/unsqueeze fusions
EXTRACT_PASSES = (
    "extract_constant_to_initializer",
    "eliminate_unused_initializer",
    "eliminate_duplicate_initializer",
    "eliminate_nop_reshape",
    "fuse_consecutive_unsqueezes",
    "fuse_consecutive_concats",
)


def _source(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    model = onnx.load(str(REAL / f"{name}.onnx"))
    with np.load(REAL / f"{name}.npz", allow_pickle=False) as data:
        feeds = {k: data[k] for k in data.files}
    return model, feeds


def _ir(model: onnx.ModelProto) -> onnx.ModelProto:
    model.ir_version = min(model.ir_version, 10)
    return model


def _fed(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The source's sample inputs the rewritten graph still has (onnxslim drops unused graph inputs:
    onnxruntime refuses a feed that names no input)."""
    names = {i.name for i in model.graph.input} - {i.name for i in model.graph.initializer}
    return {k: v for k, v in feeds.items() if k in names}


def slimmed(source: str, notes: str, **options: object) -> Callable[[], Built]:
    def build() -> Built:
        import onnxslim

        model, feeds = _source(source)
        kwargs = dict(options)
        if kwargs.get("input_shapes") == "static":  # the sample's shapes
            kwargs["input_shapes"] = [f"{k}:{','.join(map(str, v.shape))}" for k, v in feeds.items()]
        out = _ir(onnxslim.slim(model, **kwargs))
        return Built(out, _fed(out, feeds), notes=notes)

    return build


def optimized(source: str, passes: tuple[str, ...] | None, notes: str) -> Callable[[], Built]:
    def build() -> Built:
        import onnxoptimizer

        model, feeds = _source(source)
        if passes is None:
            out = onnxoptimizer.optimize(model)  # onnxoptimizer's default pass list
        elif passes == ("fuse_and_elimination",):
            fuse = onnxoptimizer.get_fuse_and_elimination_passes()
            out = onnxoptimizer.optimize(model, fuse, fixed_point=True)
        else:
            out = onnxoptimizer.optimize(model, list(passes), fixed_point=True)
        return Built(_ir(out), _fed(out, feeds), notes=notes)

    return build


SLIM, OPT = ("onnxslim",), ("onnxoptimizer",)
_FUSE = "get_fuse_and_elimination_passes(), fixed_point=True"
SPECS: list[Spec] = [
    Spec("slim_llama_static_cache", "onnxslim", "llama_static_cache_torchscript slimmed: KV-cache "
         "ScatterElements writes, the folded cache-position chains", slimmed(
             "llama_static_cache_torchscript", "onnxslim.slim(model)"), SLIM),
    Spec("slim_fasterrcnn", "onnxslim", "fasterrcnn_torchscript slimmed: RPN/NMS box Gathers, If branches",
         slimmed("fasterrcnn_torchscript", "onnxslim.slim(model)"), SLIM),
    Spec("slim_bert_static", "onnxslim", "bert_torchscript slimmed with static input shapes [2, 7]: every "
         "Shape->Gather folded, the embedding Gathers left", slimmed(
             "bert_torchscript", "onnxslim.slim(model, input_shapes=[name:2,7 per input])",
             input_shapes="static"), SLIM),
    Spec("slim_gnn_scatter", "onnxslim", "gnn_scatter_torchscript slimmed: index_select Gathers, "
         "scatter_add ScatterElements", slimmed("gnn_scatter_torchscript", "onnxslim.slim(model)"), SLIM),
    Spec("slim_beam_search", "onnxslim", "beam_search_step_torchscript slimmed: beam reorder Gather, "
         "GatherElements, ScatterND and ScatterElements", slimmed(
             "beam_search_step_torchscript", "onnxslim.slim(model)"), SLIM),
    Spec("slim_mixtral_moe_nofusion", "onnxslim", "mixtral_moe_torchscript slimmed without graph fusion "
         "and subexpression elimination: expert routing Gathers", slimmed(
             "mixtral_moe_torchscript",
             "onnxslim.slim(model, skip_optimizations=['graph_fusion', 'subexpression_elimination'])",
             skip_optimizations=["graph_fusion", "subexpression_elimination"]), SLIM),
    Spec("onnxopt_llama_static_cache", "onnxoptimizer", "llama_static_cache_torchscript after the fuse "
         "and elimination passes: KV-cache ScatterElements", optimized(
             "llama_static_cache_torchscript", ("fuse_and_elimination",), _FUSE), OPT),
    Spec("onnxopt_fasterrcnn", "onnxoptimizer", "fasterrcnn_torchscript after the fuse and elimination "
         "passes: box Gathers, If branches", optimized(
             "fasterrcnn_torchscript", ("fuse_and_elimination",), _FUSE), OPT),
    Spec("onnxopt_gpt2_past_shape_gather", "onnxoptimizer", "gpt2_past_torchscript after "
         "eliminate_shape_gather and dead-code passes: past-length Gathers", optimized(
             "gpt2_past_torchscript", SHAPE_PASSES, f"{list(SHAPE_PASSES)}, fixed_point=True"), OPT),
    Spec("onnxopt_gnn_scatter_extract", "onnxoptimizer", "gnn_scatter_torchscript after "
         "extract_constant_to_initializer and concat/unsqueeze fusions", optimized(
             "gnn_scatter_torchscript", EXTRACT_PASSES, f"{list(EXTRACT_PASSES)}, fixed_point=True"), OPT),
    Spec("onnxopt_beam_search", "onnxoptimizer", "beam_search_step_torchscript after onnxoptimizer's "
         "default passes", optimized("beam_search_step_torchscript", None, "onnxoptimizer.optimize(model)"),
         OPT),
    Spec("slim_llama_static_cache_dynamo", "onnxslim", "llama_static_cache_dynamo slimmed: index_copy_ "
         "KV-cache ScatterND writes at cache_position", slimmed(
             "llama_static_cache_dynamo", "onnxslim.slim(model)"), SLIM),
    Spec("slim_bart_decoder_past_dynamo", "onnxslim", "bart_decoder_past_dynamo slimmed: the unused "
         "encoder_hidden_states input dropped, GatherND of the last token", slimmed(
             "bart_decoder_past_dynamo", "onnxslim.slim(model); the sample without the dropped input"), SLIM),
    Spec("onnxopt_mixtral_moe_dynamo", "onnxoptimizer", "mixtral_moe_dynamo after the fuse and elimination "
         "passes: expert weights GatherND by routed id", optimized(
             "mixtral_moe_dynamo", ("fuse_and_elimination",), _FUSE), OPT),
]  # fmt: skip
