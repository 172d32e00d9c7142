"""det55b (issue 36): the static size check's second inference, once small constant arithmetic is folded
(or outer constants are copied into a subgraph), infers only the part of the model those changes reach
(:mod:`dmlshim.execute.plan.changed_sizes`), and refuses and accepts what the whole-model pass did.

Each model below has an unrelated prefix (a chain on another feed), so the part is smaller than the
model and is the one inferred. Expected values are onnxruntime CPU's; the refusals are the sizes the
models' own constants give (the hostile h48 cases of :mod:`tests.test_hostile48_folded_sizes`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import dmlshim
from dmlshim.execute.plan import changed_sizes, checks
from tests.test_hostile48_folded_sizes import BIG, HIDDEN, LIMIT, _c, _vi

ENGINES = ("partitioned", "customop", "cpu")


def _with_prefix(model: bytes, length: int = 12) -> onnx.ModelProto:
    """``model`` with a second feed ``pre`` and a chain of ``length`` nodes on it to a second output."""
    proto = onnx.load_from_string(model)
    graph = proto.graph
    chain = [
        h.make_node("Relu" if i % 2 else "Neg", [f"pre{i}" if i else "pre"], [f"pre{i + 1}"])
        for i in range(length)
    ]
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend([*chain, *rest])
    graph.input.append(_vi("pre", T.FLOAT, [4]))
    graph.output.append(_vi(f"pre{length}", T.FLOAT, None))
    return proto


def _expand_by_feed(n: int, rows: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """An ``If`` branch computing ``Expand(Unsqueeze(Range(0, Mul(a, b), 1)), eshape)`` from the main
    graph's constants ``a``, ``b`` and ``eshape = Concat(Shape(q), [1])``: the Range is sized only once
    ``Mul`` is folded, the expansion only with the feed ``q``'s static length, which data propagation
    carries into the branch from outside the folded part."""
    body = [
        h.make_node("Mul", ["a", "b"], ["n"]),
        h.make_node("Range", ["z", "n", "one"], ["r"]),
        h.make_node("Unsqueeze", ["r", "zero1"], ["r2"]),
        h.make_node("Expand", ["r2", "eshape"], ["big"]),
        h.make_node("ReduceMax", ["big"], ["s"], keepdims=0),
    ]
    then = h.make_graph(body, "then", [], [_vi("s", T.INT64, None)])
    other = h.make_graph([h.make_node("Identity", ["z"], ["s2"])], "else", [], [_vi("s2", T.INT64, None)])
    nodes = [
        h.make_node("Shape", ["q"], ["qs"]),
        h.make_node("Concat", ["qs", "one1"], ["eshape"], axis=0),
        h.make_node("If", ["cond"], ["m"], then_branch=then, else_branch=other),
        h.make_node("Add", ["m", "x"], ["y"]),
    ]
    inits = [
        _c("a", np.int64(n // 1000)),
        _c("b", np.int64(1000)),
        _c("z", np.int64(0)),
        _c("one", np.int64(1)),
        _c("zero1", np.array([0], np.int64)),
        _c("one1", np.array([1], np.int64)),
    ]
    inputs = [_vi("x", T.INT64, []), _vi("cond", T.BOOL, []), _vi("q", T.FLOAT, [rows])]
    graph = h.make_graph(nodes, "det55b", inputs, [_vi("y", T.INT64, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=8)
    return model, {"x": np.array(1), "cond": np.array(True), "q": np.zeros(rows, np.float32)}


def _count_parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the part was built, and how often the whole model was inferred again."""
    counts = {"part": 0, "whole": 0}
    part, whole = changed_sizes.changed_part, checks._check_folded

    def counted_part(*args: Any) -> Any:
        found = part(*args)
        counts["part"] += found is not None
        return found

    def counted_whole(*args: Any) -> None:
        counts["whole"] += 1
        whole(*args)

    monkeypatch.setattr(changed_sizes, "changed_part", counted_part)
    monkeypatch.setattr(checks, "_check_folded", counted_whole)
    return counts


def _feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**feeds, "pre": np.array([1.0, -2.0, 3.0, -4.0], np.float32)}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_part_refuses_what_the_whole_model_refused(
    case: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2-4 GB of constants under a 100 MB limit, behind a prefix the folds do not reach: refused, naming
    the op (the part refuses, and the whole model's pass confirms it)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    counts = _count_parts(monkeypatch)
    model = _with_prefix(HIDDEN[case](BIG)[0])
    with pytest.raises(dmlshim.TooLargeError, match=r"op (Range|Tile|Pad|ConstantOfShape)"):
        dmlshim.InferenceSession(model.SerializeToString(), engine=engine)
    assert counts["part"] >= 1
    assert counts["whole"] >= 1


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_part_alone_accepts_what_fits(case: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same models at 40 KB (a 1 MB limit): only the part is inferred again, and the values are
    onnxruntime's."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    counts = _count_parts(monkeypatch)
    small, feeds = HIDDEN[case](10_000)
    model = _with_prefix(small).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, _feeds(feeds))
    got = dmlshim.InferenceSession(model, so, engine=engine).run(None, _feeds(feeds))
    assert counts == {"part": counts["part"], "whole": 0} and counts["part"] >= 1
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


@pytest.mark.parametrize("engine", ENGINES)
def test_part_reads_data_propagated_from_outside(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1,000,000-element Range (8 MB, under the limit) expanded to the feed ``q``'s static length 1000:
    8 GB of int64 once folding sizes the Range, which the part sizes only by carrying ``Shape(q)`` from
    outside it: refused under 100 MB, naming the Expand (the part sizes it so, below)."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    counts = _count_parts(monkeypatch)
    model, _ = _expand_by_feed(1_000_000, 1000)
    with pytest.raises(dmlshim.TooLargeError, match=r"\[1000, 1000000\].*8000000000 bytes.*op Expand"):
        dmlshim.InferenceSession(_with_prefix(model.SerializeToString()).SerializeToString(), engine=engine)
    assert counts["part"] >= 1


def test_part_sizes_the_branch_with_data_from_outside() -> None:
    """The part of the model above (prefix included) holds the ``If``, its consumer and the ``Shape`` and
    ``Concat`` it reads, not the prefix; its inference sizes the branch's expansion [1000, 1000000] as
    the folded constants (1000 x 1000) and ``q``'s length give it."""
    from dmlshim.execute.plan.folded_sizes import folded_copy_at
    from dmlshim.model.data_prop import infer_with_data_prop
    from dmlshim.model.outer_constants import outer_constant_holders, with_outer_constants
    from dmlshim.translate.shapes_info import infer_shapes

    model, _ = _expand_by_feed(1_000_000, 1000)
    model = _with_prefix(model.SerializeToString())
    first = infer_shapes(model)
    found = folded_copy_at(model, first.graph)
    assert found is not None
    copy, roots = found
    part = changed_sizes.changed_part(copy, first.graph, roots | outer_constant_holders(copy))
    assert part is not None
    sub, kept = part
    assert [model.graph.node[i].op_type for i in kept] == ["Shape", "Concat", "If", "Add"]
    inferred = infer_with_data_prop(with_outer_constants(sub) or sub)
    branch = next(a.g for a in inferred.graph.node[2].attribute if a.name == "then_branch")
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in branch.value_info}
    assert shapes["big"] == [1000, 1_000_000]


@pytest.mark.parametrize("engine", ENGINES)
def test_part_with_outside_data_that_fits(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same model at 10 x 1000 (80 KB): only the part is inferred again; onnxruntime's values."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    counts = _count_parts(monkeypatch)
    small, feeds = _expand_by_feed(1000, 10)
    model = _with_prefix(small.SerializeToString()).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, _feeds(feeds))
    got = dmlshim.InferenceSession(model, so, engine=engine).run(None, _feeds(feeds))
    assert counts["whole"] == 0 and counts["part"] >= 1
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
