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

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.directml.optimized_away import _twin_key, optimized_away_nodes
from dmlshim.graph import display_names, is_gather_scatter
from dmlshim.model.prepare import prepare_model
from dmlshim.translate.model_translation import _GraphInfos, translate_model
from dmlshim.translate.ort_folding import OPTIMIZED_AWAY_CODE, merged_twins
from dmlshim.translate.plan import CPU_PROVIDER
from dmlshim.translate.shapes_info import infer_shapes

ROOT = Path(__file__).resolve().parent.parent / "onnx_models"
MODELS = sorted([*ROOT.glob("*.onnx"), *(ROOT / "real").glob("*.onnx"), *(ROOT / "ecosystem").glob("*.onnx")])

KNOWN_GAPS: dict[str, tuple[int, str]] = {}
"""Nodes onnxruntime removes and inspect still places, by model: (count, cause). None left: the one Gather
of ``ecosystem/jax_at_set_add`` was a twin merged into a later one (common-subexpression elimination keeps
the first twin in onnxruntime's graph-viewer order, not in the file's)."""


def _inspect_removed(model: onnx.ModelProto) -> set[str]:
    translation = translate_model(model, other_domains=True, optimized=True)
    removed = set()
    for n in translation.nodes:
        if any(r.code == OPTIMIZED_AWAY_CODE for r in n.reasons):
            assert n.ort_placement == CPU_PROVIDER, n.name
            removed.add(n.name)
    return removed


def _one_element_constants(graph: onnx.GraphProto) -> dict[str, bytes]:
    """Name -> type and value of each one-element constant (what onnxruntime's constant sharing merges)."""
    tensors = [*graph.initializer]
    tensors += [
        a.t
        for n in graph.node
        if n.op_type == "Constant"
        for a in n.attribute
        if a.name == "value" and n.output
    ]
    names = [*(t.name for t in graph.initializer)]
    names += [
        n.output[0] for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    ]
    out = {}
    for name, t in zip(names, tensors, strict=True):
        if t.data_location != onnx.TensorProto.EXTERNAL and np.prod(t.dims, dtype=np.int64) == 1:
            out[name] = bytes([t.data_type]) + numpy_helper.to_array(t).tobytes()
    return out


def _gone_twins(model: onnx.ModelProto, removed: set[str]) -> tuple[set[str], set[str]]:
    """The gather/scatter nodes common-subexpression elimination merges, as inspect models it, into a
    twin onnxruntime keeps, by what the oracle makes of them: (gone, either). The oracle counts a node
    as gone unless a node onnxruntime keeps had its op, attributes and input names in the model, or has
    them in onnxruntime's graph: there its inputs are the outputs of the nodes kept upstream and, for a
    one-element constant equal to another, the name constant sharing kept (which one follows the order
    of onnxruntime's hash map: either answer is right then)."""
    ready = prepare_model(model)
    infos = _GraphInfos(infer_shapes(ready, None).graph, {})
    opset = next((o.version for o in ready.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return set(), set()
    nodes = ready.graph.node
    names = display_names(nodes)
    twins = merged_twins(ready.graph, ready.ir_version, opset, infos.get)
    kept_as = {
        mine: theirs
        for i, r in twins.items()
        for mine, theirs in zip(nodes[i].output, nodes[r].output, strict=True)
    }
    outputs = {v.name for v in ready.graph.output}
    for node in nodes:  # an Identity onnxruntime eliminates: its readers read its input
        if node.op_type == "Identity" and len(node.input) == 1 and node.output[0] not in outputs:
            kept_as[node.output[0]] = kept_as.get(node.input[0], node.input[0])
    constants = _one_element_constants(ready.graph)
    values = Counter(constants.values())
    shared = {name for name, value in constants.items() if values[value] > 1}  # renamed, maybe
    kept = [
        k for k, n in enumerate(nodes) if is_gather_scatter(n) and k not in twins and names[k] not in removed
    ]

    def verdict(i: int, k: int) -> str:
        """Whether node i's names are node k's in onnxruntime's graph: "same", "maybe" or "no"."""
        a, b = nodes[i], nodes[k]
        key_a, key_b = _twin_key(a), _twin_key(b)
        if (key_a[:2], key_a[3]) != (key_b[:2], key_b[3]) or len(a.input) != len(b.input):
            return "no"
        answer = "same"
        for mine, theirs in zip(a.input, b.input, strict=True):
            theirs = kept_as.get(theirs, theirs)
            if mine == theirs and mine not in shared:
                continue
            if mine in constants and constants[mine] == constants.get(theirs):
                answer = "maybe"
                continue
            return "no"
        return answer

    gone: set[str] = set()
    either: set[str] = set()
    for i, r in twins.items():
        if not is_gather_scatter(nodes[i]) or names[r] in removed:
            continue
        if any(_twin_key(nodes[k]) == _twin_key(nodes[i]) for k in kept):
            continue  # the oracle's twins: the same names as a node onnxruntime keeps
        verdicts = {verdict(i, k) for k in kept}
        if "same" in verdicts:
            continue
        (either if "maybe" in verdicts else gone).add(names[i])
    return gone, either


def test_every_shipped_model_is_covered() -> None:
    assert len(MODELS) >= 100, MODELS
    for name in KNOWN_GAPS:
        assert (ROOT / name).is_file(), name


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(ROOT)))
def test_removed_nodes_match_onnxruntime(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    ort_removed = set(optimized_away_nodes(model, "all", path))
    ours = _inspect_removed(model)
    gone, either = _gone_twins(model, ours)
    expected = ours | gone
    extra = expected - ort_removed
    assert not extra, f"inspect says gone, onnxruntime keeps: {sorted(extra)}"
    missed = ort_removed - expected - either
    gap = KNOWN_GAPS.get(str(path.relative_to(ROOT)), (0, ""))[0]
    assert len(missed) == gap, f"onnxruntime removes, inspect places: {sorted(missed)}"


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
