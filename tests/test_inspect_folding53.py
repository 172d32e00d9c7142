"""inspect's claim about the gather/scatter nodes onnxruntime's level-1 optimizations remove, against
onnxruntime itself.

For every model shipped in ``onnx_models/`` (the top level, ``real/`` and ``ecosystem/``), the nodes
``inspect`` reports as removed (reason ``EP_OPTIMIZED_AWAY``) are compared with the nodes onnxruntime CPU's
``ORT_ENABLE_BASIC`` graph no longer holds (:func:`dmlshim.directml.optimized_away.optimized_away_nodes`,
which saves the optimized graph). No DirectML is needed.

inspect never claims a node removed that onnxruntime keeps. What it does not model is listed in
``KNOWN_GAPS`` by model, with the count and the cause, so that a change either way fails here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.directml.optimized_away import optimized_away_nodes
from dmlshim.model.prepare import prepare_model
from dmlshim.translate.model_translation import _GraphInfos, translate_model
from dmlshim.translate.ort_folding import OPTIMIZED_AWAY_CODE, merged_twins
from dmlshim.translate.plan import CPU_PROVIDER
from dmlshim.translate.shapes_info import infer_shapes

ROOT = Path(__file__).resolve().parent.parent / "onnx_models"
MODELS = sorted([*ROOT.glob("*.onnx"), *(ROOT / "real").glob("*.onnx"), *(ROOT / "ecosystem").glob("*.onnx")])

KNOWN_GAPS: dict[str, tuple[int, str]] = {
    "ecosystem/jax_at_set_add.onnx": (
        1,
        "a level-1 rewrite of a Gather of a constant index other than folding",
    ),
}
"""Nodes onnxruntime removes and inspect still places, by model: (count, cause)."""


def _inspect_removed(model: onnx.ModelProto) -> set[str]:
    translation = translate_model(model, other_domains=True, optimized=True)
    removed = set()
    for n in translation.nodes:
        if any(r.code == OPTIMIZED_AWAY_CODE for r in n.reasons):
            assert n.ort_placement == CPU_PROVIDER, n.name
            removed.add(n.name)
    return removed


def _twins(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> the name of the twin common-subexpression elimination merges it into."""
    ready = prepare_model(model)
    infos = _GraphInfos(infer_shapes(ready, None).graph, {})
    opset = next(o.version for o in ready.opset_import if o.domain in ("", "ai.onnx"))
    nodes = ready.graph.node
    return {
        nodes[i].name: nodes[r].name
        for i, r in merged_twins(ready.graph, ready.ir_version, opset, infos.get).items()
    }


def test_every_shipped_model_is_covered() -> None:
    assert len(MODELS) >= 100, MODELS
    for name in KNOWN_GAPS:
        assert (ROOT / name).is_file(), name


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_removed_nodes_match_onnxruntime(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    ort_removed = set(optimized_away_nodes(model, "all", path))
    ours = _inspect_removed(model)
    assert not ours - ort_removed, f"inspect says removed, onnxruntime keeps: {sorted(ours - ort_removed)}"
    missed = ort_removed - ours
    if missed:
        # The oracle calls twins only nodes of the very same inputs; one merged into a twin whose inputs
        # were merged first (a Gather of the Shape of the same tensor, read with an equal constant) is
        # gone by name but runs as its twin, which onnxruntime keeps.
        twins = _twins(model)
        merged = {n for n in missed if n in twins and twins[n] not in ort_removed}
        missed -= merged
    expected = KNOWN_GAPS.get(str(path.relative_to(ROOT)), (0, ""))[0]
    assert len(missed) == expected, f"onnxruntime removes, inspect places: {sorted(missed)}"


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], ir: int, inputs: list[str]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])]
        + [helper.make_tensor_value_info(n, T.FLOAT if n == "w" else T.INT64, None) for n in inputs],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, ir_version=ir, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("ir", "w_is_input", "removed"), [(8, False, True), (8, True, False), (3, True, True)]
)
def test_overridable_initializer_is_not_constant(ir: int, w_is_input: bool, removed: bool) -> None:
    """A Gather of initializers is folded unless one is also a graph input a caller may override (IR 4
    and later); the expected answer is onnxruntime's."""
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2), "w"),
        numpy_helper.from_array(np.array([2, 0], np.int64), "i"),
    ]
    nodes = [
        helper.make_node("Gather", ["w", "i"], ["g"], name="gather_w"),
        helper.make_node("Shape", ["x"], ["s"], name="shape_x"),
        helper.make_node("Gather", ["s", "i1"], ["d"], name="gather_dim"),
        helper.make_node("Reshape", ["g", "t"], ["y"], name="reshape"),
    ]
    inits += [
        numpy_helper.from_array(np.array([1], np.int64), "i1"),
        numpy_helper.from_array(np.array([-1], np.int64), "t"),
    ]
    inputs = ["w"] if w_is_input else []
    if ir < 4:
        inputs = [t.name for t in inits]
    model = _model(nodes, inits, ir, inputs)
    ort_removed = set(optimized_away_nodes(model, "all"))
    assert ("gather_w" in ort_removed) is removed
    assert "gather_dim" in ort_removed  # the Shape of a static [2, 3], then a constant index
    assert _inspect_removed(model) == ort_removed


def test_a_huge_folded_value_is_never_computed() -> None:
    """A Range whose limit is computed from a static shape (10^12 elements) is folded by onnxruntime at
    session creation; inspect, following its folding, bounds what it computes and never allocates it."""
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(10**12, np.int64), "big"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "idx"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="dim"),
        helper.make_node("Mul", ["n", "big"], ["limit"], name="mul"),
        helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="range"),
        helper.make_node("Gather", ["r", "idx"], ["first"], name="gather_huge"),
        helper.make_node("Cast", ["first"], ["f"], to=T.FLOAT, name="cast"),
        helper.make_node("Add", ["x", "f"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "huge",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    removed = _inspect_removed(model)
    assert "dim" in removed  # a Gather of the Shape of a static [2, 3]
    assert "gather_huge" in removed  # its inputs are all constants once folded, whatever their size
