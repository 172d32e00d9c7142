"""Export the small PyTorch models in ``onnx_models/`` with the dynamo-based ``torch.onnx.export``.

Each module below uses a gather or scatter the way a real network does (a loss that picks per-token
log-probabilities, an embedding lookup, a static key/value cache, graph message passing, ...). The
exporter — not a person — chooses the ONNX ops, so these files show what ``dmlshim`` meets in the wild.

Regenerate (torch is only an optional extra; tests and the runtime never need it)::

    pip install '.[export]'          # torch>=2.5 and onnxscript>=0.5
    python onnx_models/export_models.py      # also runs build_handmade.py for the hand-built models

On a machine without a GPU pin the CPU wheel (``pip install torch==2.13.0`` from the CPU index), or the
CUDA build, several GB, is pulled in. The committed files were written by torch 2.13.0+cpu and
onnxscript 0.7.2.

For every model the script writes ``<name>.onnx`` and ``<name>.npz`` (one array per graph input, keyed by
the input's name; no pickled objects) and checks that onnxruntime on CPU reproduces the PyTorch output on
that input. Seeds are fixed, so a re-run gives the same weights and sample inputs. Files that the
exporter stamps with debugging metadata (stack traces with local paths, FX node dumps) are cleaned of it;
only the module-hierarchy ``namespace`` entry of each node is kept.

Notes on what the exporter does (torch 2.13, opset 18):

* ``x[batch_idx, token_idx]`` becomes Unsqueeze+Concat of the index tensors and one ``GatherND``
  (batch_dims 0); ``torch.arange(B)`` is folded to a constant for static shapes, and becomes ``Range``
  when the batch dimension is symbolic.
* ``cache[:, :, pos] = new`` becomes ``Transpose`` -> ``ScatterND`` -> ``Transpose``: the indexed axis is
  moved to the front so the positions address whole slices.
* ``index_add`` becomes ``ScatterND`` with ``reduction="add"`` (not ScatterElements), ``index_select``
  and ``nn.Embedding`` become ``Gather``, ``scatter_reduce(..., "amax")`` becomes ``ScatterElements``
  with ``reduction="max"``.
* The exporter writes IR version 10, which onnxruntime 1.31 reads; :func:`save_model` still caps the IR
  version at :data:`MAX_IR_VERSION` in case a newer exporter writes one onnxruntime cannot load.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# build_handmade is the sibling script (on sys.path when this file is run as a script).
import build_handmade
import numpy as np
import onnx
from build_handmade import save_npz

try:
    import torch
    from torch import nn
    from torch.export import Dim
except ImportError as exc:  # pragma: no cover - only for people regenerating the files
    raise SystemExit(
        "export_models.py needs torch and onnxscript: pip install '.[export]' (see the module docstring)"
    ) from exc

HERE = Path(__file__).resolve().parent
#: The opset every exported model is written at; 18 is the first with ScatterElements reduction="max".
OPSET = 18
#: IR version cap. onnxruntime 1.31 reads up to 13 (onnx 1.23's make_model writes 14); 10 is what the
#: exporter writes today and what every onnxruntime the project supports (>= 1.20) reads.
MAX_IR_VERSION = 10
#: Node metadata kept from the exporter; the rest (stack traces, FX dumps) is dropped.
KEPT_METADATA = frozenset({"namespace"})


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------


class TokenLogProb(nn.Module):
    """Per-token log-likelihood of the target ids, as in a language-model loss (``torch.gather``)."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits, dim=-1)
        picked = torch.gather(logp, -1, targets.unsqueeze(-1)).squeeze(-1)
        return -picked.mean(dim=-1)


class LastTokenPooling(nn.Module):
    """Classify a padded batch from each sequence's last real token (``h[batch_idx, lengths - 1]``)."""

    def __init__(self, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.head = nn.Linear(hidden, classes)

    def forward(self, hidden_states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        batch_idx = torch.arange(hidden_states.shape[0])
        last = hidden_states[batch_idx, lengths - 1]
        return self.head(last)


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy with label smoothing; the one-hot target is built with ``Tensor.scatter``."""

    def __init__(self, classes: int = 10, smoothing: float = 0.1) -> None:
        super().__init__()
        self.classes = classes
        self.smoothing = smoothing

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        fill = self.smoothing / (self.classes - 1)
        target = torch.full_like(logits, fill).scatter(1, labels.unsqueeze(1), 1.0 - self.smoothing)
        return -(target * torch.log_softmax(logits, dim=1)).sum(dim=1)


class BagOfTokens(nn.Module):
    """Weighted token-count histogram per sequence (``scatter_add``), then a linear classifier."""

    def __init__(self, vocab: int = 32, classes: int = 3) -> None:
        super().__init__()
        self.vocab = vocab
        self.head = nn.Linear(vocab, classes)

    def forward(self, input_ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        counts = torch.zeros(input_ids.shape[0], self.vocab).scatter_add(1, input_ids, weights)
        return self.head(counts)


class StaticCacheAttention(nn.Module):
    """One attention layer with a fixed-size key/value cache written at ``cache_position``.

    The cache update is the ``cache[:, :, pos] = new`` pattern of static-cache decoders.
    """

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        cache_position: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        new_keys = key_cache.clone()
        new_values = value_cache.clone()
        new_keys[:, :, cache_position] = k
        new_values[:, :, cache_position] = v
        scores = q @ new_keys.transpose(-1, -2) / self.head_dim**0.5
        scores = scores + attention_mask
        out = torch.softmax(scores, dim=-1) @ new_values
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), new_keys, new_values


class TokenAndPositionEmbedding(nn.Module):
    """Token plus learned position embeddings and a LayerNorm (two ``nn.Embedding`` lookups)."""

    def __init__(self, vocab: int = 64, max_len: int = 16, dim: int = 16) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.tokens(input_ids) + self.positions(position_ids))


class TopKTokenSelect(nn.Module):
    """Keep the ``k`` highest-scoring tokens of each sequence (token pruning / routing)."""

    def __init__(self, dim: int = 8, k: int = 3) -> None:
        super().__init__()
        self.k = k
        self.scorer = nn.Linear(dim, 1)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.scorer(features).squeeze(-1)
        top_scores, top_idx = torch.topk(scores, self.k, dim=1)
        index = top_idx.unsqueeze(-1).expand(-1, -1, features.shape[-1])
        selected = torch.gather(features, 1, index)
        return selected * torch.sigmoid(top_scores).unsqueeze(-1), top_idx


class GraphMessagePassing(nn.Module):
    """A graph-network layer: gather source features, sum messages per target, max-pool per graph."""

    def __init__(self, dim: int = 8, graphs: int = 3) -> None:
        super().__init__()
        self.graphs = graphs
        self.message = nn.Linear(dim, dim)

    def forward(
        self, node_features: torch.Tensor, edge_index: torch.Tensor, graph_of_node: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        src, dst = edge_index[0], edge_index[1]
        messages = torch.relu(self.message(node_features.index_select(0, src)))
        aggregated = torch.zeros_like(node_features).index_add(0, dst, messages)
        nodes = node_features + aggregated
        pool_index = graph_of_node.unsqueeze(1).expand(-1, nodes.shape[1])
        pooled = torch.full((self.graphs, nodes.shape[1]), -1e4).scatter_reduce(
            0, pool_index, nodes, reduce="amax", include_self=True
        )
        return nodes, pooled


class TinyDecoderStep(nn.Module):
    """One greedy decoding step of a toy decoder with a static cache.

    Embedding lookup (Gather), cache write (ScatterND), attention, logits, top-k candidates (TopK) and
    their log-probabilities (GatherElements).
    """

    def __init__(self, vocab: int = 32, dim: int = 16, heads: int = 2, k: int = 4) -> None:
        super().__init__()
        self.k = k
        self.embed = nn.Embedding(vocab, dim)
        self.attn = StaticCacheAttention(dim, heads)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        cache_position: torch.Tensor,
        attention_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.embed(input_ids)
        h, new_keys, new_values = self.attn(h, key_cache, value_cache, cache_position, attention_mask)
        logp = torch.log_softmax(self.lm_head(h[:, -1]), dim=-1)
        _, candidates = torch.topk(logp, self.k, dim=-1)
        candidate_logp = torch.gather(logp, -1, candidates)
        return candidates, candidate_logp, new_keys, new_values


class BeamReorder(nn.Module):
    """Reorder a key/value cache by beam index between decoding steps (``index_select``, dynamic batch)."""

    def forward(self, past_keys: torch.Tensor, beam_idx: torch.Tensor) -> torch.Tensor:
        return past_keys.index_select(0, beam_idx)


# --------------------------------------------------------------------------------------------------
# Sample inputs
# --------------------------------------------------------------------------------------------------


def _causal_cache_mask(cache_len: int, positions: Sequence[int]) -> np.ndarray:
    """Additive mask ``[1, 1, len(positions), cache_len]``: a query sees cache slots up to its position."""
    mask = np.full((1, 1, len(positions), cache_len), -1e4, dtype=np.float32)
    for row, pos in enumerate(positions):
        mask[0, 0, row, : pos + 1] = 0.0
    return mask


def _kv_inputs(rng: np.random.Generator, tokens: np.ndarray | None, x_len: int) -> dict[str, np.ndarray]:
    """Inputs shared by the cache models: a cache of 8 slots with 3 filled, ``x_len`` new positions."""
    heads, cache_len, head_dim, filled = 2, 8, 8, 3
    key_cache = np.zeros((1, heads, cache_len, head_dim), dtype=np.float32)
    value_cache = np.zeros_like(key_cache)
    key_cache[:, :, :filled] = rng.standard_normal((1, heads, filled, head_dim), dtype=np.float32)
    value_cache[:, :, :filled] = rng.standard_normal((1, heads, filled, head_dim), dtype=np.float32)
    positions = list(range(filled, filled + x_len))
    inputs: dict[str, np.ndarray] = {}
    if tokens is None:
        inputs["x"] = rng.standard_normal((1, x_len, heads * head_dim), dtype=np.float32)
    else:
        inputs["input_ids"] = tokens
    inputs["key_cache"] = key_cache
    inputs["value_cache"] = value_cache
    inputs["cache_position"] = np.array(positions, dtype=np.int64)  # unique: ScatterND without reduction
    inputs["attention_mask"] = _causal_cache_mask(cache_len, positions)
    return inputs


def _inputs_token_logprob(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "logits": rng.standard_normal((2, 6, 32), dtype=np.float32),
        "targets": rng.integers(0, 32, (2, 6), dtype=np.int64),
    }


def _inputs_last_token(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "hidden_states": rng.standard_normal((3, 8, 16), dtype=np.float32),
        "lengths": np.array([8, 3, 5], dtype=np.int64),
    }


def _inputs_label_smoothing(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "logits": rng.standard_normal((6, 10), dtype=np.float32),
        "labels": rng.integers(0, 10, (6,), dtype=np.int64),
    }


def _inputs_bag_of_tokens(rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Repeated ids within a row are the point of a histogram: scatter_add accumulates them.
    return {
        "input_ids": rng.integers(0, 32, (4, 16), dtype=np.int64),
        "weights": rng.uniform(0.5, 1.5, (4, 16)).astype(np.float32),
    }


def _inputs_kv_cache(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return _kv_inputs(rng, None, 2)


def _inputs_embedding(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "input_ids": rng.integers(0, 64, (2, 6), dtype=np.int64),
        "position_ids": np.tile(np.arange(6, dtype=np.int64), (2, 1)),
    }


def _inputs_topk(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"features": rng.standard_normal((2, 10, 8), dtype=np.float32)}


def _inputs_graph(rng: np.random.Generator) -> dict[str, np.ndarray]:
    # Three graphs over nine nodes; edges stay inside their graph.
    graph_of_node = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2], dtype=np.int64)
    edges = [(0, 1), (1, 2), (2, 0), (1, 0), (3, 4), (4, 5), (5, 6), (6, 3), (3, 5), (7, 8), (8, 7)]
    return {
        "node_features": rng.standard_normal((9, 8), dtype=np.float32),
        "edge_index": np.array(edges, dtype=np.int64).T.copy(),
        "graph_of_node": graph_of_node,
    }


def _inputs_decoder(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return _kv_inputs(rng, rng.integers(0, 32, (1, 1), dtype=np.int64), 1)


def _inputs_beam(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "past_keys": rng.standard_normal((4, 2, 5, 8), dtype=np.float32),
        "beam_idx": np.array([1, 1, 3, 0], dtype=np.int64),
    }


# --------------------------------------------------------------------------------------------------
# Export driver
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportSpec:
    """One model to export: file stem, module factory, sample inputs and optional symbolic dimensions."""

    name: str
    make_module: Callable[[], nn.Module]
    make_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    seed: int
    #: graph output names (the exporter would otherwise name them after the last aten op).
    outputs: tuple[str, ...]
    #: input name -> {axis: dimension name} for inputs whose dimension is left symbolic.
    dynamic: Mapping[str, Mapping[int, str]] = field(default_factory=dict)


SPECS: tuple[ExportSpec, ...] = (
    ExportSpec("gather_elements_torch_gather", TokenLogProb, _inputs_token_logprob, 101, ("nll",)),
    ExportSpec("gathernd_advanced_indexing", LastTokenPooling, _inputs_last_token, 102, ("class_logits",)),
    ExportSpec("scatter_elements_scatter", LabelSmoothingLoss, _inputs_label_smoothing, 103, ("loss",)),
    ExportSpec("scatter_add_histogram", BagOfTokens, _inputs_bag_of_tokens, 104, ("class_logits",)),
    ExportSpec(
        "scatternd_kv_cache",
        StaticCacheAttention,
        _inputs_kv_cache,
        105,
        ("attn_output", "new_key_cache", "new_value_cache"),
    ),
    ExportSpec("embedding_gather", TokenAndPositionEmbedding, _inputs_embedding, 106, ("embeddings",)),
    ExportSpec("topk_gather", TopKTokenSelect, _inputs_topk, 107, ("selected", "selected_index")),
    ExportSpec("gnn_scatter_reduce", GraphMessagePassing, _inputs_graph, 108, ("node_out", "graph_pooled")),
    ExportSpec(
        "tiny_decoder_step",
        TinyDecoderStep,
        _inputs_decoder,
        109,
        ("candidate_ids", "candidate_logprobs", "new_key_cache", "new_value_cache"),
    ),
    ExportSpec(
        "gathernd_dynamic_batch",
        LastTokenPooling,
        _inputs_last_token,
        110,
        ("class_logits",),
        dynamic={"hidden_states": {0: "batch"}, "lengths": {0: "batch"}},
    ),
    ExportSpec(
        "gather_beam_reorder_dynamic",
        BeamReorder,
        _inputs_beam,
        111,
        ("reordered_keys",),
        dynamic={"past_keys": {0: "beams"}, "beam_idx": {0: "beams"}},
    ),
)


def clean_metadata(model: onnx.ModelProto) -> None:
    """Drop exporter debugging metadata (stack traces, FX dumps) that would make files machine-specific."""

    def keep(props: Any) -> None:
        kept = [(p.key, p.value) for p in props if p.key in KEPT_METADATA]
        del props[:]
        for key, value in kept:
            props.add(key=key, value=value)

    def walk(graph: onnx.GraphProto) -> None:
        keep(graph.metadata_props)
        for info in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
            keep(info.metadata_props)
        for node in graph.node:
            keep(node.metadata_props)
            node.doc_string = ""
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(model.graph)
    keep(model.metadata_props)


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Cap the IR version for onnxruntime, check the model and write it as a single file."""
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def _check_with_onnxruntime(
    path: Path, inputs: Mapping[str, np.ndarray], expected: Sequence[np.ndarray]
) -> None:
    """Run the saved model in onnxruntime CPU (one thread) and compare with the PyTorch outputs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(inputs))
    if len(got) != len(expected):
        raise AssertionError(f"{path.name}: {len(got)} outputs from onnxruntime, {len(expected)} from torch")
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=f"{path.name} output {i}")


def export_one(spec: ExportSpec, out_dir: Path = HERE) -> Path:
    """Export one spec to ``out_dir/<name>.onnx`` with its sample input ``<name>.npz``."""
    torch.manual_seed(spec.seed)
    module = spec.make_module().eval()
    inputs = spec.make_inputs(np.random.default_rng(spec.seed))
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    dynamic_shapes = None
    if spec.dynamic:
        dims: dict[str, Dim] = {}
        dynamic_shapes = {
            name: {axis: dims.setdefault(dim, Dim(dim, min=1, max=1024)) for axis, dim in axes.items()}
            for name, axes in spec.dynamic.items()
        }
    with torch.no_grad():
        expected = module(*args)
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            opset_version=OPSET,
            dynamic_shapes=dynamic_shapes,
            input_names=list(inputs),
            output_names=list(spec.outputs),
            verbose=False,
        )
    if program is None:  # pragma: no cover - only the legacy exporter returns None
        raise RuntimeError("torch.onnx.export returned no program")
    model = program.model_proto
    graph_inputs = [i.name for i in model.graph.input]
    if graph_inputs != list(inputs):
        raise AssertionError(f"{spec.name}: graph inputs {graph_inputs} != sample keys {list(inputs)}")
    clean_metadata(model)
    model.doc_string = (
        f"dmlshim onnx_models: {type(module).__name__} exported by torch.onnx.export(dynamo=True)"
    )
    path = out_dir / f"{spec.name}.onnx"
    save_model(model, path)
    save_npz(out_dir / f"{spec.name}.npz", inputs)
    outs = expected if isinstance(expected, tuple) else (expected,)
    _check_with_onnxruntime(path, inputs, [o.numpy() for o in outs])
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Export every model in :data:`SPECS` (or the names given on the command line)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="only these models (file stems)")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    known = {s.name for s in SPECS}
    unknown = set(args.names) - known
    if unknown:
        parser.error(f"unknown model(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        if args.names and spec.name not in args.names:
            continue
        path = export_one(spec, args.out_dir)
        model = onnx.load(path)
        ops = sorted({n.op_type for n in model.graph.node if "Gather" in n.op_type or "Scatter" in n.op_type})
        print(f"{path.name:40s} {path.stat().st_size:7d} B  IR {model.ir_version}  {', '.join(ops)}")
    if not args.names:
        build_handmade.main(args.out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
