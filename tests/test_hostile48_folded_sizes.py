"""Hostile pass h48 (issue 35, item 6), the memory limit: sizes hidden behind constant arithmetic.

onnx's inference sizes a ``Range``, ``Tile``, ``Pad`` or ``ConstantOfShape`` only when its size input is an
initializer or a ``Constant`` (or, for some, data propagation reaches it); onnxruntime folds the whole
constant chain when it builds the session and allocates the result. Under a 100 MB
``DMLSHIM_MEMORY_LIMIT`` each model below peaked at 2-4 GB in every engine (and in ``validate``) before
:mod:`dmlshim.execute.plan.folded_sizes`. Expected values and shapes are onnxruntime CPU's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import dmlshim
from dmlshim.execute.plan.folded_sizes import folded_copy
from dmlshim.model.last_inference import infer_shapes
from dmlshim.model.weightless import without_weights

ENGINES = ("partitioned", "customop", "cpu")
LIMIT = "100000000"
BIG = 500_000_000  # elements: 2 GB as float32, 4 GB as int64


def _c(name: str, value: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _vi(name: str, elem: int, shape: list[Any] | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, elem, shape)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], out_type: int,
           inits: list[onnx.TensorProto], opset: int = 18) -> bytes:  # fmt: skip
    graph = h.make_graph(nodes, "h48", inputs, [_vi("y", out_type, None)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8).SerializeToString()


def _reduced(big: str, out: str, feed: str) -> list[onnx.NodeProto]:
    return [h.make_node("ReduceMax", [big], ["s"], keepdims=0), h.make_node("Add", ["s", feed], [out])]


def range_of_mul(n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """``Range(0, Mul(a, b), 1)``."""
    nodes = [h.make_node("Mul", ["a", "b"], ["n"]), h.make_node("Range", ["z", "n", "one"], ["r"])]
    inits = [
        _c("a", np.int64(n // 1000)),
        _c("b", np.int64(1000)),
        _c("z", np.int64(0)),
        _c("one", np.int64(1)),
    ]
    return _model([*nodes, *_reduced("r", "y", "x")], [_vi("x", T.INT64, [])], T.INT64, inits), {
        "x": np.array(1)
    }


def range_of_cast(n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """``Range(0, Cast(float), 1)``."""
    nodes = [h.make_node("Cast", ["lf"], ["n"], to=T.INT64), h.make_node("Range", ["z", "n", "one"], ["r"])]
    inits = [_c("lf", np.float32(n)), _c("z", np.int64(0)), _c("one", np.int64(1))]
    return _model([*nodes, *_reduced("r", "y", "x")], [_vi("x", T.INT64, [])], T.INT64, inits), {
        "x": np.array(1)
    }


def tile_of_concat(n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """``Tile(t, Concat(r1, r2))``."""
    nodes = [h.make_node("Concat", ["r1", "r2"], ["rep"], axis=0), h.make_node("Tile", ["t", "rep"], ["big"])]
    inits = [
        _c("t", np.ones((1, 1), np.float32)),
        _c("r1", np.array([n // 1000])),
        _c("r2", np.array([1000])),
    ]
    feeds = {"x": np.array(1, np.float32)}
    return _model([*nodes, *_reduced("big", "y", "x")], [_vi("x", T.FLOAT, [])], T.FLOAT, inits), feeds


def pad_of_mul(n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """``Pad(t, Mul(p, q))``."""
    nodes = [h.make_node("Mul", ["p", "q"], ["pads"]), h.make_node("Pad", ["t", "pads"], ["big"])]
    inits = [
        _c("t", np.ones(1, np.float32)),
        _c("p", np.array([n // 1000, 0])),
        _c("q", np.array([1000, 1000])),
    ]
    feeds = {"x": np.array(1, np.float32)}
    return _model([*nodes, *_reduced("big", "y", "x")], [_vi("x", T.FLOAT, [])], T.FLOAT, inits), feeds


def loop_of_mul(n: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """A Loop body's ``ConstantOfShape(Mul(s1, s2))``, both outer-scope constants."""
    one = numpy_helper.from_array(np.array([1], np.float32))
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond"], ["co"]),
            h.make_node("Mul", ["s1", "s2"], ["shp"]),
            h.make_node("ConstantOfShape", ["shp"], ["big"], value=one),
            h.make_node("ReduceMax", ["big"], ["m"], keepdims=0),
            h.make_node("Add", ["acc", "m"], ["acc2"]),
        ],
        "body",
        [_vi("it", T.INT64, []), _vi("cond", T.BOOL, []), _vi("acc", T.FLOAT, [])],
        [_vi("co", T.BOOL, []), _vi("acc2", T.FLOAT, [])],
    )
    nodes = [h.make_node("Loop", ["n", "", "x"], ["y"], body=body)]
    inits = [_c("s1", np.array([n // 1000])), _c("s2", np.array([1000]))]
    feeds = {"n": np.array(2), "x": np.array(0, np.float32)}
    return _model(nodes, [_vi("n", T.INT64, []), _vi("x", T.FLOAT, [])], T.FLOAT, inits), feeds


HIDDEN: dict[str, Callable[[int], tuple[bytes, dict[str, np.ndarray]]]] = {
    "range_of_mul": range_of_mul,
    "range_of_cast": range_of_cast,
    "tile_of_concat": tile_of_concat,
    "pad_of_mul": pad_of_mul,
    "loop_of_mul": loop_of_mul,
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_hidden_size_refused_under_the_limit(case: str, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """2-4 GB of constants under a 100 MB limit: refused when the session is built, naming the op."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    model, _ = HIDDEN[case](BIG)
    with pytest.raises(dmlshim.TooLargeError, match=r"op (Range|Tile|Pad|ConstantOfShape)"):
        dmlshim.InferenceSession(model, engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_hidden_size_that_fits_runs_as_onnxruntime(
    case: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same models at 40 KB (a 1 MB limit): never refused, onnxruntime's values."""
    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    model, feeds = HIDDEN[case](10_000)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dmlshim.InferenceSession(model, so, engine=engine).run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == want[0].dtype


def test_validate_refuses_hidden_size(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dmlshim validate`` generated inputs for ``Range(0, Mul(a, b), 1)`` at 4 GB under a 100 MB limit:
    exit 2 (it ran onnxruntime to 4 GB and answered MATCH before)."""
    from dmlshim.cli.main import main

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    path = tmp_path / "m.onnx"
    path.write_bytes(range_of_mul(BIG)[0])
    assert main(["validate", str(path), "-q"]) == 2


def _plain_static_with_gather(n: int) -> bytes:
    """A gather beside ``ConstantOfShape([n])`` of an initializer shape."""
    one = numpy_helper.from_array(np.array([1], np.float32))
    nodes = [
        h.make_node("ConstantOfShape", ["shp"], ["big"], value=one),
        h.make_node("ReduceSum", ["big"], ["s"], keepdims=1),
        h.make_node("Gather", ["W", "i"], ["g"], axis=0),
        h.make_node("Add", ["g", "s"], ["y"]),
    ]
    inits = [_c("shp", np.array([n])), _c("W", np.ones((5, 3), np.float32))]
    return _model(nodes, [_vi("i", T.INT64, [2])], T.FLOAT, inits)


@pytest.mark.parametrize("case", ["plain", "hidden"])
def test_export_refuses_static_sizes(case: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dmlshim export`` runs the whole model in onnxruntime to capture its gathers' inputs: it peaked at
    2.1 GB (a ConstantOfShape of an initializer shape) and 4.1 GB (a Range to Mul of constants, beside a
    Gather) under a 100 MB limit. Now refused first (exit 2), nothing written."""
    from dmlshim.cli.main import main

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", LIMIT)
    model = tmp_path / "m.onnx"
    if case == "plain":
        model.write_bytes(_plain_static_with_gather(BIG))
    else:
        proto = onnx.ModelProto.FromString(range_of_mul(BIG)[0])
        gather = h.make_node("Gather", ["W", "i"], ["g"], axis=0)
        proto.graph.node.append(gather)
        proto.graph.initializer.append(_c("W", np.ones((5, 3), np.float32)))
        proto.graph.input.append(_vi("i", T.INT64, [2]))
        proto.graph.output.append(_vi("g", T.FLOAT, None))
        model.write_bytes(proto.SerializeToString())
    assert main(["export", str(model), "-o", str(tmp_path / "out"), "-q"]) == 2
    assert not (tmp_path / "out").exists()


def test_export_of_a_small_static_value_still_works(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlshim.cli.main import main

    monkeypatch.setenv("DMLSHIM_MEMORY_LIMIT", "1000000")
    model = tmp_path / "m.onnx"
    model.write_bytes(_plain_static_with_gather(1000))
    assert main(["export", str(model), "-o", str(tmp_path / "out"), "-q"]) == 0
    assert (tmp_path / "out" / "index.json").is_file()


# The values folding computes must be onnxruntime's, or a model it runs could be refused (or a large one let
# through): each op computed here, in a constant chain ending in ConstantOfShape, sized as onnxruntime
# sizes it.
def _chain(op_nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], opset: int = 18) -> bytes:
    one = numpy_helper.from_array(np.array([1], np.float32))
    nodes = [
        *op_nodes,
        h.make_node("Cast", ["v"], ["vi"], to=T.INT64),
        h.make_node("Abs", ["vi"], ["va"]),
        h.make_node("Reshape", ["va", "flat"], ["shape"]),
        h.make_node("ConstantOfShape", ["shape"], ["big"], value=one),
        h.make_node("Shape", ["big"], ["y"]),
    ]
    return _model(nodes, [], T.INT64, [*inits, _c("flat", np.array([-1]))], opset)


def _a(*values: Any, dtype: Any = np.int64) -> np.ndarray:
    return np.array(values, dtype=dtype)


OPS: dict[str, tuple[list[onnx.NodeProto], list[onnx.TensorProto]]] = {
    "div_negative": (
        [h.make_node("Div", ["p", "q"], ["v"])],
        [_c("p", _a(-7, 7, -8)), _c("q", _a(2, -2, 3))],
    ),
    "div_float": (
        [h.make_node("Div", ["p", "q"], ["v"])],
        [_c("p", _a(7, 9, dtype=np.float32)), _c("q", _a(2, 4, dtype=np.float32))],
    ),
    "sub_max_min": (
        [
            h.make_node("Sub", ["p", "q"], ["d"]),
            h.make_node("Max", ["d", "q"], ["e"]),
            h.make_node("Min", ["e", "p"], ["v"]),
        ],
        [_c("p", _a(9, 2, 5)), _c("q", _a(3, 4, 1))],
    ),
    "cast_float_truncates": (
        [h.make_node("Cast", ["p"], ["v"], to=T.INT32)],
        [_c("p", _a(2.9, -3.7, 4.5, dtype=np.float32))],
    ),
    "concat_unsqueeze_squeeze": (
        [
            h.make_node("Unsqueeze", ["p", "ax"], ["u"]),
            h.make_node("Squeeze", ["u", "ax"], ["s"]),
            h.make_node("Concat", ["s", "q"], ["v"], axis=0),
        ],
        [_c("p", _a(3, 2)), _c("q", _a(4)), _c("ax", _a(0))],
    ),
    "gather_negative": (
        [h.make_node("Gather", ["p", "i"], ["v"], axis=0)],
        [_c("p", _a(5, 6, 7)), _c("i", _a(-1, 0))],
    ),
    "slice_steps": (
        [h.make_node("Slice", ["p", "st", "en", "ax", "sp"], ["v"])],
        [
            _c("p", _a(2, 3, 4, 5, 6)),
            _c("st", _a(-1)),
            _c("en", _a(-(10**18))),
            _c("ax", _a(0)),
            _c("sp", _a(-2)),
        ],
    ),
    "shape_size_of_constant": (
        [
            h.make_node("Shape", ["p"], ["s"], start=1),
            h.make_node("Size", ["p"], ["z"]),
            h.make_node("Unsqueeze", ["z", "ax"], ["zu"]),
            h.make_node("Concat", ["s", "zu"], ["v"], axis=0),
        ],
        [_c("p", np.zeros((2, 3, 4), np.float32)), _c("ax", _a(0))],
    ),
    "reduce_prod_sum": (
        [
            h.make_node("ReduceProd", ["p"], ["r"], keepdims=1),
            h.make_node("ReduceSum", ["p", "ax"], ["t"], keepdims=1),
            h.make_node("Concat", ["r", "t"], ["v"], axis=0),
        ],
        [_c("p", _a(3, 4, 2)), _c("ax", _a(0))],
    ),
    "range_where_equal": (
        [
            h.make_node("Range", ["z", "n", "one"], ["r"]),
            h.make_node("Equal", ["r", "one"], ["eq"]),
            h.make_node("Where", ["eq", "n", "r"], ["v"]),
        ],
        [_c("z", np.int64(1)), _c("n", np.int64(5)), _c("one", np.int64(1))],
    ),
    "reduce_max_min_mod": (
        [
            h.make_node("ReduceMax", ["p", "ax"], ["mx"], keepdims=1),
            h.make_node("ReduceMin", ["p", "ax"], ["mn"], keepdims=1),
            h.make_node("Mod", ["p", "q"], ["md"]),
            h.make_node("Mod", ["p", "q"], ["mf"], fmod=1),
            h.make_node("Concat", ["mx", "mn", "md", "mf"], ["v"], axis=0),
        ],
        [_c("p", _a(-7, 9, 5)), _c("q", _a(3, -4, 2)), _c("ax", _a(0))],
    ),
    "neg_relu_floor": (
        [
            h.make_node("Neg", ["p"], ["n"]),
            h.make_node("Relu", ["n"], ["r"]),
            h.make_node("Floor", ["r"], ["v"]),
        ],
        [_c("p", _a(-2.5, 3.5, -4.0, dtype=np.float32))],
    ),
}


@pytest.mark.parametrize("case", sorted(OPS))
def test_folded_values_size_as_onnxruntime(case: str) -> None:
    """The static shape inference finds once the chain is folded is the shape onnxruntime computes."""
    nodes, inits = OPS[case]
    model = onnx.ModelProto.FromString(_chain(nodes, inits))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[
        0
    ]
    # the chain ends in a ConstantOfShape whose size input onnx's own inference cannot read
    inferred = infer_shapes(without_weights(model))
    copy = folded_copy(model, inferred.graph)
    assert copy is not None
    typed = infer_shapes(copy, remember=False)
    big = next(v for v in typed.graph.value_info if v.name == "big")
    dims = [d.dim_value for d in big.type.tensor_type.shape.dim]
    assert dims == want.tolist()


def test_overridable_initializer_is_not_folded() -> None:
    """An initializer that is also a graph input is the caller's to feed (onnxruntime folds nothing from
    it): a ``Range`` to ``Mul(n, 1000)`` with ``n`` overridable is not refused, and a small feed runs."""
    nodes = [h.make_node("Mul", ["a", "b"], ["n"]), h.make_node("Range", ["z", "n", "one"], ["r"])]
    nodes += _reduced("r", "y", "x")
    inits = [_c("a", np.int64(BIG)), _c("b", np.int64(1000)), _c("z", np.int64(0)), _c("one", np.int64(1))]
    model = _model(nodes, [_vi("x", T.INT64, []), _vi("a", T.INT64, [])], T.INT64, inits)
    feeds = {"x": np.array(1), "a": np.array(3)}
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for engine in ENGINES:
        got = dmlshim.InferenceSession(model, engine=engine).run(None, feeds)
        assert got[0].tolist() == want[0].tolist() == 2999 + 1
