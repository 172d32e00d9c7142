"""What the corpus tests ask of every model file, with expected values from outside dmlshim.

Shared by ``test_ecosystem_corpus.py`` and ``test_every_command.py``: the gather/scatter count comes from
the ONNX file itself (functions expanded per call site), reference outputs from onnxruntime CPU with one
thread, and each dmlshim command runs in-process through ``dmlshim.cli.main.main``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

# One CLI runner for both corpora: the real-export one beside its models.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "onnx_models" / "real"))
from corpus_results import CliRun, run_cli

from dmlshim.graph import GATHER_SCATTER_OPS

try:
    from .oracle import has_zero_depth_scatternd, onnx_reference_run, ort_crashes_on_zero_depth_scatternd
except ImportError:  # imported as a top-level module
    from oracle import has_zero_depth_scatternd, onnx_reference_run, ort_crashes_on_zero_depth_scatternd  # type: ignore[no-redef]

__all__ = ["CliRun", "run_cli"]


def expected_gather_scatter(path: Path) -> Counter[str]:
    """ai.onnx gather/scatter nodes onnxruntime runs: main graph, control-flow bodies, and the body of every
    model-local function once per call site (nested calls expanded)."""
    model = onnx.load(str(path), load_external_data=False)
    functions = {(f.domain, f.name): f for f in model.functions}

    def count(nodes: Iterable[onnx.NodeProto]) -> Counter[str]:
        found: Counter[str] = Counter()
        for node in nodes:
            if node.domain in ("", "ai.onnx") and node.op_type in GATHER_SCATTER_OPS:
                found[node.op_type] += 1
            if (node.domain, node.op_type) in functions:
                found += count(functions[(node.domain, node.op_type)].node)
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    found += count(sub.node)
        return found

    return count(model.graph.node)


def inspected_gather_scatter(doc: Mapping[str, Any]) -> Counter[str]:
    return Counter(
        n["op_type"]
        for n in doc.get("nodes", [])
        if n.get("op_type") in GATHER_SCATTER_OPS and n.get("domain", "") in ("", "ai.onnx")
    )


def single_thread() -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return opts


@cache
def feeds_of(path: Path) -> dict[str, np.ndarray]:
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@cache
def ort_reference(path: Path) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Output names and values of onnxruntime CPU on the model's sample inputs."""
    model = onnx.load(str(path), load_external_data=False)
    if has_zero_depth_scatternd(model) and ort_crashes_on_zero_depth_scatternd():
        # this onnxruntime dies on the node: ONNX's reference (newer onnxruntime gives the same values)
        model = onnx.load(str(path))
        return tuple(o.name for o in model.graph.output), tuple(onnx_reference_run(model, feeds_of(path)))
    sess = ort.InferenceSession(str(path), single_thread(), providers=["CPUExecutionProvider"])
    names = tuple(o.name for o in sess.get_outputs())
    return names, tuple(sess.run(None, dict(feeds_of(path))))


def assert_same(got: Sequence[Any], want: Sequence[Any], where: str) -> None:
    """Bit for bit for arrays (dtype, shape, bytes); by value for sequences and maps (ZipMap outputs)."""
    assert len(got) == len(want), f"{where}: {len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(w, np.ndarray):
            assert g is not None, f"{where} output {k}: missing"
            g = np.asarray(g)
            if (
                w.dtype == object and g.dtype.kind == "U"
            ):  # `run -o` stores strings as a text array (documented)
                assert g.shape == w.shape and g.tolist() == w.tolist(), f"{where} output {k}: strings differ"
                continue
            assert g.dtype == w.dtype, f"{where} output {k}: dtype {g.dtype} != {w.dtype}"
            assert g.shape == w.shape, f"{where} output {k}: shape {g.shape} != {w.shape}"
            assert g.tobytes() == w.tobytes(), f"{where} output {k}: values differ from onnxruntime"
        elif g is not None:  # None: `run -o` left a sequence/map out of the .npz, as documented
            assert g == w, f"{where} output {k}: {g!r} != {w!r}"


def session_outputs(path: Path, engine: str | None) -> list[Any]:
    from dmlshim import InferenceSession

    kwargs: dict[str, Any] = {} if engine is None else {"engine": engine}
    sess = InferenceSession(str(path), sess_options=single_thread(), **kwargs)
    return list(sess.run(None, dict(feeds_of(path))))


def cli_run_outputs(path: Path, out: Path) -> tuple[CliRun, list[Any]]:
    """``dmlshim run MODEL --inputs MODEL.npz -o OUT``; the outputs in onnxruntime's order."""
    run = run_cli("run", str(path), "--inputs", str(path.with_suffix(".npz")), "-o", str(out), "-q")
    if run.code != 0:
        return run, []
    names, _ = ort_reference(path)
    with np.load(out, allow_pickle=False) as data:
        # A sequence or map output cannot be stored in an .npz: None stands for it (run names it in a note).
        return run, [data[n] if n in data.files else None for n in names]


def lowered_outputs(path: Path, lowered: Path) -> tuple[CliRun, list[Any]]:
    """``dmlshim lower`` then the lowered file in plain onnxruntime with dmlshim's custom ops registered."""
    from dmlshim.execute.engines.custom_op import session_options_with_custom_ops

    run = run_cli("lower", str(path), "-o", str(lowered), "-q")
    if run.code != 0:
        return run, []
    opts = session_options_with_custom_ops(single_thread())
    sess = ort.InferenceSession(str(lowered), opts, providers=["CPUExecutionProvider"])
    return run, list(sess.run(None, dict(feeds_of(path))))
