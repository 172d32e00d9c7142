"""Each onnxruntime level-1 rule ``inspect`` models (``dmlshim.translate.ort_folding``), on a small model
built here, against onnxruntime CPU itself: the gather/scatter nodes inspect reports removed (with the
twins common-subexpression elimination merges into a node onnxruntime keeps, which the oracle counts as
gone) must be the nodes onnxruntime's ``ORT_ENABLE_BASIC`` graph no longer holds
(:func:`dmlshim.directml.optimized_away.optimized_away_nodes`). Whether a node goes is onnxruntime's
answer, never written here except as a check that the case exercises what it names.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from dmlshim.directml.optimized_away import optimized_away_nodes
from tests.test_inspect_folding53 import _gone_twins, _inspect_removed

X_STATIC = helper.make_tensor_value_info("x", T.FLOAT, [4, 3])
X_DYNAMIC = helper.make_tensor_value_info("x", T.FLOAT, ["n", 3])


def _init(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    outputs: list[str],
    x: onnx.ValueInfoProto | None = X_STATIC,
    extra_inputs: list[onnx.ValueInfoProto] | None = None,
    opset: int = 17,
    ir: int = 8,
) -> onnx.ModelProto:
    inputs = ([x] if x is not None else []) + (extra_inputs or [])
    graph = helper.make_graph(
        nodes, "rules", inputs, [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], inits
    )
    model = helper.make_model(graph, ir_version=ir, opset_imports=[helper.make_opsetid("", opset)])
    return model


def _check(model: onnx.ModelProto) -> set[str]:
    """inspect's gone set equals onnxruntime's; returns onnxruntime's."""
    oracle = set(optimized_away_nodes(model, "all"))
    ours = _inspect_removed(model)
    gone, either = _gone_twins(model, ours)
    assert ours | gone <= oracle <= ours | gone | either, (sorted(ours), sorted(gone), sorted(oracle))
    return oracle


def _const_gather_scatter(op: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], int]:
    """``op`` on initializers only, its output added to ``x`` (so the graph reads an input)."""
    data = _init("data", np.arange(12).reshape(4, 3), np.float32)
    if op == "Gather":
        return (
            [helper.make_node(op, ["data", "i"], ["g"], axis=0, name="n")],
            [data, _init("i", [3, 0, 1, 2])],
            17,
        )
    if op == "GatherElements":
        idx = _init("i", [[1, 0, 2]] * 4)
        return [helper.make_node(op, ["data", "i"], ["g"], axis=1, name="n")], [data, idx], 17
    if op == "GatherND":
        return (
            [helper.make_node(op, ["data", "i"], ["g"], name="n")],
            [data, _init("i", [[3], [2], [1], [0]])],
            17,
        )
    upd = _init("u", np.ones((4, 3)), np.float32)
    if op in ("ScatterElements", "Scatter"):
        idx = _init("i", [[2, 1, 0]] * 4)
        return (
            [helper.make_node(op, ["data", "i", "u"], ["g"], axis=1, name="n")],
            [data, idx, upd],
            (10 if op == "Scatter" else 17),
        )
    assert op == "ScatterND"
    return (
        [helper.make_node(op, ["data", "i", "u"], ["g"], name="n")],
        [data, _init("i", [[3], [1], [0], [2]]), upd],
        17,
    )


OPS = ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "Scatter"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("overridable", [False, True], ids=["constant", "overridable"])
def test_constant_inputs_fold(op: str, overridable: bool) -> None:
    """Constant folding of each gather/scatter op whose inputs are all initializers; an initializer also
    listed as a graph input (IR 4 and later: a caller may override it) is no constant."""
    nodes, inits, opset = _const_gather_scatter(op)
    nodes.append(helper.make_node("Add", ["x", "g"], ["y"], name="add"))
    extra = [helper.make_tensor_value_info("data", T.FLOAT, [4, 3])] if overridable else []
    removed = _check(_model(nodes, inits, ["y"], extra_inputs=extra, opset=opset))
    assert ("n" in removed) is not overridable


@pytest.mark.parametrize("op", ["Gather", "GatherElements", "GatherND"])
def test_constant_node_inputs_fold(op: str) -> None:
    """A Constant node's output is a constant (onnxruntime makes it an initializer when it loads)."""
    nodes, inits, opset = _const_gather_scatter(op)
    constants = [
        helper.make_node("Constant", [], [t.name], value=t, name=f"c_{t.name}")
        for t in inits
        if t.name == "i"
    ]
    inits = [t for t in inits if t.name != "i"]
    nodes = [*constants, *nodes, helper.make_node("Add", ["x", "g"], ["y"], name="add")]
    assert "n" in _check(_model(nodes, inits, ["y"], opset=opset))


@pytest.mark.parametrize("x", [X_STATIC, X_DYNAMIC], ids=["static", "dynamic"])
def test_gather_of_shape(x: onnx.ValueInfoProto) -> None:
    """A Shape of a static shape is folded, then the Gather reading it; a dynamic one is not."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["d"], axis=0, name="dim"),
        helper.make_node("Cast", ["d"], ["f"], to=T.FLOAT, name="cast"),
        helper.make_node("Mul", ["x", "f"], ["y"], name="mul"),
    ]
    removed = _check(_model(nodes, [_init("one", 1)], ["y"], x=x))
    assert ("dim" in removed) is (x is X_STATIC)


def test_chain_only_read_by_a_folded_shape() -> None:
    """A Gather whose output only a folded Shape reads goes with it (removed bottom-up)."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="rows"),
        helper.make_node("Shape", ["g"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["f"], to=T.FLOAT, name="cast"),
        helper.make_node("ReduceSum", ["f"], ["r"], keepdims=0, name="sum"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add"),
    ]
    dynamic_index = helper.make_tensor_value_info("i", T.INT64, [2])
    assert "rows" in _check(_model(nodes, [], ["y"], extra_inputs=[dynamic_index]))


@pytest.mark.parametrize("same_shape_source", [False, True], ids=["reshaped", "same-shape"])
def test_reshape_fusion(same_shape_source: bool) -> None:
    """``Shape -> Gather(0) -> Unsqueeze -> Concat -> Reshape`` of a dynamic tensor: the reshape fusion
    makes the Concat a constant and removes the Gather that fed only it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["x2"], name="twin_shape"),
        helper.make_node("Shape", ["x2" if same_shape_source else "x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0, name="dim0"),
        helper.make_node("Unsqueeze", ["d0", "axes"], ["u0"], name="unsq"),
        helper.make_node("Concat", ["u0", "rest"], ["shape2"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "shape2"], ["r"], name="reshape"),
        helper.make_node("Add", ["r", "x2"], ["y"], name="add"),
    ]
    inits = [_init("zero", 0), _init("axes", [0]), _init("rest", [3])]
    assert "dim0" in _check(_model(nodes, inits, ["y"], x=X_DYNAMIC))


def test_reshape_fusion_needs_the_reshaped_position() -> None:
    """A dimension of the Shape at another position than its place in the Concat: no fusion."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "one"], ["d1"], axis=0, name="dim1"),
        helper.make_node("Unsqueeze", ["d1", "axes"], ["u1"], name="unsq"),
        helper.make_node("Concat", ["u1", "minus"], ["shape2"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "shape2"], ["y"], name="reshape"),
    ]
    inits = [_init("one", 1), _init("axes", [0]), _init("minus", [-1])]
    assert "dim1" not in _check(_model(nodes, inits, ["y"], x=X_DYNAMIC))


def _twin_chain(k: int, index: str) -> list[onnx.NodeProto]:
    """``y{k} = Neg(Gather(Relu(x), index))``: the same computation for every k."""
    return [
        helper.make_node("Relu", ["x"], [f"a{k}"], name=f"relu{k}"),
        helper.make_node("Gather", [f"a{k}", index], [f"g{k}"], axis=0, name=f"gather{k}"),
        helper.make_node("Neg", [f"g{k}"], [f"y{k}"], name=f"neg{k}"),
    ]


@pytest.mark.parametrize("order", [(1, 2), (2, 1)], ids=["file-order", "reversed-leaves"])
def test_twins_keep_the_first_in_graph_viewer_order(order: tuple[int, int]) -> None:
    """Gathers of twin values (two Relu of x) are merged by common-subexpression elimination; the one
    onnxruntime keeps is the first in its graph viewer's order (the chain of the last leaf), so the other
    is gone by name. The chains' leaves are written in either order."""
    first, second = (_twin_chain(k, "i") for k in (1, 2))
    nodes = first[:2] + second[:2] + [first[2], second[2]][:: 1 if order == (1, 2) else -1]
    removed = _check(_model(nodes, [_init("i", [1, 0])], ["y1", "y2"], x=X_DYNAMIC))
    assert len(removed & {"gather1", "gather2"}) == 1


def test_three_twins_and_shared_constants() -> None:
    """Three twin chains whose index constants are equal one-element initializers of other names
    (onnxruntime's constant sharing gives them one name first), their leaves in a third order."""
    chains = [_twin_chain(k, f"i{k}") for k in (1, 2, 3)]
    nodes = [n for c in chains for n in c[:2]] + [chains[2][2], chains[0][2], chains[1][2]]
    inits = [_init(f"i{k}", [2]) for k in (1, 2, 3)]
    removed = _check(_model(nodes, inits, ["y1", "y2", "y3"], x=X_DYNAMIC))
    assert len(removed & {"gather1", "gather2", "gather3"}) == 2


@pytest.mark.parametrize("output", [False, True], ids=["read", "graph-output"])
def test_twins_through_an_identity(output: bool) -> None:
    """A Gather reading through an Identity is a twin of one reading its input (onnxruntime removes the
    Identity first); an Identity writing a graph output is removed too, its producer then a leaf."""
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"], name="same"),
        helper.make_node("Gather", ["xi", "i"], ["g1"], axis=0, name="gather1"),
        helper.make_node("Neg", ["g1"], ["n1"], name="neg1"),
        helper.make_node("Gather", ["x", "i"], ["g2"], axis=0, name="gather2"),
        helper.make_node("Neg", ["g2"], ["y2"], name="neg2"),
    ]
    if output:
        nodes.append(helper.make_node("Identity", ["n1"], ["y1"], name="out1"))
    else:
        nodes[2].output[0] = "y1"
    removed = _check(_model(nodes, [_init("i", [1, 0])], ["y1", "y2"], x=X_DYNAMIC))
    assert removed & {"gather1", "gather2"}


def test_direct_twins_run_as_one() -> None:
    """Gathers of the very same inputs: one runs for both, and the oracle counts neither as gone."""
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g1"], axis=0, name="gather1"),
        helper.make_node("Gather", ["x", "i"], ["g2"], axis=0, name="gather2"),
        helper.make_node("Add", ["g1", "g2"], ["y"], name="add"),
    ]
    assert not _check(_model(nodes, [_init("i", [1, 0])], ["y"], x=X_DYNAMIC)) & {"gather1", "gather2"}


def test_twin_folded_with_its_representative() -> None:
    """Twin Gathers of a static Shape (read through twin Shape nodes): folded, both reported removed."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s1"], name="shape1"),
        helper.make_node("Shape", ["x"], ["s2"], name="shape2"),
        helper.make_node("Gather", ["s1", "zero"], ["d1"], axis=0, name="dim1"),
        helper.make_node("Gather", ["s2", "zero"], ["d2"], axis=0, name="dim2"),
        helper.make_node("Add", ["d1", "d2"], ["e"], name="add"),
        helper.make_node("Cast", ["e"], ["f"], to=T.FLOAT, name="cast"),
        helper.make_node("Mul", ["x", "f"], ["y"], name="mul"),
    ]
    assert {"dim1", "dim2"} <= _check(_model(nodes, [_init("zero", 0)], ["y"]))


def _random_twin_graph(seed: int) -> onnx.ModelProto:
    """A random chain of Relu, Identity, Add (of two earlier values), Gather and Gather-of-Shape (through an
    Identity) steps on ``x`` (static or not), with one-element index constants of few values: twins, shared
    constants and Identity nodes onnxruntime removes arise by chance; every unread value is an output."""
    rng = np.random.default_rng(seed)
    inits = [_init(f"c{c}", [int(rng.integers(0, 2))]) for c in range(int(rng.integers(1, 4)))]
    nodes: list[onnx.NodeProto] = []
    values = ["x"]
    for k in range(int(rng.integers(4, 14))):
        src, other = (values[int(rng.integers(0, len(values)))] for _ in range(2))
        index = inits[int(rng.integers(0, len(inits)))].name
        op = ["Relu", "Identity", "Add", "Gather", "Identity", "Shape"][int(rng.integers(0, 6))]
        if op == "Shape":
            nodes += [
                helper.make_node("Shape", [src], [f"s{k}"], name=f"shape{k}"),
                helper.make_node("Identity", [f"s{k}"], [f"t{k}"], name=f"same{k}"),
                helper.make_node("Gather", [f"t{k}", index], [f"d{k}"], axis=0, name=f"dim{k}"),
                helper.make_node("Cast", [f"d{k}"], [f"f{k}"], to=T.FLOAT, name=f"cast{k}"),
                helper.make_node("Add", [src, f"f{k}"], [f"v{k}"], name=f"add{k}"),
            ]
        elif op == "Gather":
            nodes += [
                helper.make_node("Gather", [src, index], [f"g{k}"], axis=1, name=f"gather{k}"),
                helper.make_node("Add", [f"g{k}", src], [f"v{k}"], name=f"add{k}"),
            ]
        elif op == "Add":
            nodes.append(helper.make_node("Add", [src, other], [f"v{k}"], name=f"sum{k}"))
        else:
            nodes.append(helper.make_node(op, [src], [f"v{k}"], name=f"{op.lower()}{k}"))
        values.append(f"v{k}")
    read = {n for node in nodes for n in node.input}
    outputs = [v for v in values[1:] if v not in read]
    x = X_STATIC if rng.integers(0, 2) else X_DYNAMIC
    return _model(nodes, inits, outputs, x=x)


@pytest.mark.parametrize("seed", range(60))
def test_random_twin_graphs(seed: int) -> None:
    """Random graphs of twins, shared constants, Identity nodes and folded shapes (seeded) against
    onnxruntime."""
    _check(_random_twin_graph(seed))


def _dim_chain(k: int) -> list[onnx.NodeProto]:
    """``u{k} = Unsqueeze(Abs(Gather(Shape(x), 0)))``: the same computation for every k (Abs: no data
    propagation in onnx's inference, so only a folded value gives it)."""
    return [
        helper.make_node("Shape", ["x"], [f"s{k}"], name=f"shape{k}"),
        helper.make_node("Gather", [f"s{k}", "zero"], [f"d{k}"], axis=0, name=f"dim{k}"),
        helper.make_node("Abs", [f"d{k}"], [f"a{k}"], name=f"abs{k}"),
        helper.make_node("Unsqueeze", [f"a{k}", "axes"], [f"u{k}"], name=f"unsq{k}"),
    ]


def test_fold_reads_a_later_twin() -> None:
    """A Concat of a Reshape reads a twin merged into one later in the file (the first in onnxruntime's
    graph-viewer order: the chain of the last leaf). onnxruntime folds the Concat (all its inputs are
    constants), not the reshape fusion; its value then gives the Reshape's shape and the Gather of that
    shape folds too (fasterrcnn's rpn Gathers: inspect folded in file order once and fused the Concat)."""
    nodes = [
        *_dim_chain(1),
        helper.make_node("Concat", ["u1", "one"], ["shp"], axis=0, name="concat"),
        helper.make_node("Cast", ["d1"], ["lim"], to=T.FLOAT, name="lim"),
        helper.make_node("Range", ["f0", "lim", "f1"], ["rng"], name="range"),
        helper.make_node("Mul", ["rng", "v"], ["data"], name="scale"),
        helper.make_node("Reshape", ["data", "shp"], ["r"], name="reshape"),
        helper.make_node("Shape", ["r"], ["rs"], name="rshape"),
        helper.make_node("Gather", ["rs", "one0"], ["c"], axis=0, name="cols"),
        helper.make_node("Cast", ["c"], ["cf"], to=T.FLOAT, name="colsf"),
        helper.make_node("Mul", ["r", "cf"], ["y1"], name="leaf1"),
        *_dim_chain(2),
        helper.make_node("Cast", ["u2"], ["uf"], to=T.FLOAT, name="castu"),
        helper.make_node("Mul", ["x", "uf"], ["y2"], name="leaf2"),
    ]
    inits = [
        _init("zero", 0),
        _init("axes", [0]),
        _init("one", [1]),
        _init("one0", 1),
        _init("f0", 0.0, np.float32),
        _init("f1", 1.0, np.float32),
    ]
    v = helper.make_tensor_value_info("v", T.FLOAT, [])
    assert "cols" in _check(_model(nodes, inits, ["y1", "y2"], extra_inputs=[v]))
