"""Shared pieces of the ecosystem corpus scripts: deterministic writers, op counting, the onnxruntime check.

Needs only onnx, numpy and onnxruntime; the producers (skl2onnx, onnxscript, ...) are imported by the
modules that use them, so a missing producer skips its models and nothing else.
"""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
MAX_BYTES = 2 * 1024 * 1024
GATHER_SCATTER_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)


@dataclass(frozen=True)
class Built:
    """What a builder returns: the model, its sample inputs and, for external data, where the weights go."""

    model: onnx.ModelProto
    feeds: Mapping[str, np.ndarray]
    #: file name of the external-data file beside the model (None: everything inline)
    external_data: str | None = None
    #: the producer's own words about the model, for the manifest
    notes: str = ""


@dataclass(frozen=True)
class Spec:
    """One corpus entry: file stem, producer (the package that wrote the graph), description, builder."""

    name: str
    producer: str
    description: str
    build: Callable[[], Built]
    #: extra packages the builder imports (for the manifest's version record)
    packages: tuple[str, ...] = field(default=())


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Like :func:`numpy.savez` with fixed zip timestamps, so that re-runs write identical bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(value, order="C"), allow_pickle=False)  # rank 0 stays rank 0
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())


def graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    """``graph`` and every subgraph (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from graphs(attr.g)
            for sub in attr.graphs:
                yield from graphs(sub)


def gather_scatter_counts(model: onnx.ModelProto) -> Counter[str]:
    """Gather/scatter nodes (ai.onnx domain) as onnxruntime runs them: main graph, subgraphs and the body
    of every model-local function, counted once per call site (nested calls expanded)."""
    functions = {(f.domain, f.name): f for f in model.functions}

    def count_nodes(nodes: Iterable[onnx.NodeProto], depth: int) -> Counter[str]:
        if depth > 32:
            raise ValueError("model-local functions nest deeper than 32 levels")
        found: Counter[str] = Counter()
        for node in nodes:
            if node.domain in ("", "ai.onnx") and node.op_type in GATHER_SCATTER_OPS:
                found[node.op_type] += 1
            fn = functions.get((node.domain, node.op_type))
            if fn is not None:
                found += count_nodes(fn.node, depth + 1)
            for attr in node.attribute:
                subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
                for sub in subs:
                    found += count_nodes(sub.node, depth + 1)
        return found

    return count_nodes(model.graph.node, 0)


def ort_outputs(path: Path, feeds: Mapping[str, np.ndarray]) -> list[object]:
    """onnxruntime CPU, one thread, on the saved file (external data resolved beside it)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, dict(feeds)))
