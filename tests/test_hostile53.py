"""Hostile round 53 (issue 35, safety round 3): model forms, binding forms and CLI flags a user who never
read our tests tries. Every value is onnxruntime's (CPU, one thread), asked in the same test; the engines
are the default (partitioned), customop and cpu."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import dmlshim
from dmlshim.cli.main import main

ENGINES = [None, "customop", "cpu"]
X = helper.make_tensor_value_info
DATA = np.arange(12, dtype=np.float32).reshape(4, 3)


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    *,
    opset: int = 13,
    inits: Sequence[onnx.TensorProto] = (),
    functions: Sequence[onnx.FunctionProto] = (),
    domain: str = "",
    ir: int = 8,
) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(inits))
    opsets = [helper.make_opsetid(domain, opset)]
    if functions:
        opsets.append(helper.make_opsetid("local", 1))
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = ir
    return model


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def _same_in_every_engine(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    want = _ort(model, feeds)
    for engine in ENGINES:
        kwargs = {} if engine is None else {"engine": engine}
        got = dmlshim.InferenceSession(model.SerializeToString(), **kwargs).run(None, feeds)
        assert len(got) == len(want), engine
        for a, b in zip(want, got, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape, engine
            assert np.array_equal(a, b), (engine, a, b)


def _ref_attr(name: str, ref: str) -> AttributeProto:
    attr = AttributeProto()
    attr.name, attr.ref_attr_name, attr.type = name, ref, AttributeProto.INT
    return attr


# --- Model forms that held. --------------------------------------------------------------------------


def test_nested_model_local_functions_with_attribute_references() -> None:
    """Outer(bx=1) calls Inner(ax=bx), whose Gather's axis is ax: the gather runs on axis 1."""
    gather = helper.make_node("Gather", ["d", "i"], ["o"])
    gather.attribute.append(_ref_attr("axis", "ax"))
    inner = helper.make_function(
        "local", "Inner", ["d", "i"], ["o"], [gather], [helper.make_opsetid("", 18)], ["ax"]
    )
    call = helper.make_node("Inner", ["d", "i"], ["o"], domain="local")
    call.attribute.append(_ref_attr("ax", "bx"))
    ops = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
    outer = helper.make_function("local", "Outer", ["d", "i"], ["o"], [call], ops, ["bx"])
    model = _model(
        [helper.make_node("Outer", ["d", "i"], ["y"], domain="local", bx=1)],
        [X("d", TensorProto.FLOAT, [4, 3]), X("i", TensorProto.INT64, [2, 2])],
        [X("y", TensorProto.FLOAT, None)],
        opset=18,
        functions=[inner, outer],
    )
    _same_in_every_engine(model, {"d": DATA, "i": np.array([[0, -1], [2, 1]], np.int64)})


def test_function_attribute_default_reaches_its_scatter() -> None:
    """A FunctionProto attribute with a default (attribute_proto, axis 1) the call does not set."""
    scatter = helper.make_node("ScatterElements", ["d", "i", "u"], ["o"])
    scatter.attribute.append(_ref_attr("axis", "ax"))
    func = onnx.FunctionProto(domain="local", name="Sc", input=["d", "i", "u"], output=["o"], node=[scatter])
    func.opset_import.append(helper.make_opsetid("", 18))
    func.attribute_proto.append(helper.make_attribute("ax", 1))
    model = _model(
        [helper.make_node("Sc", ["d", "i", "u"], ["y"], domain="local")],
        [
            X("d", TensorProto.FLOAT, [4, 3]),
            X("i", TensorProto.INT64, [2, 2]),
            X("u", TensorProto.FLOAT, [2, 2]),
        ],
        [X("y", TensorProto.FLOAT, None)],
        opset=18,
        functions=[func],
    )
    feeds = {"d": DATA, "i": np.array([[0, 2], [1, 0]], np.int64), "u": np.full((2, 2), -1, np.float32)}
    _same_in_every_engine(model, feeds)


def test_sparse_initializer_as_gather_data() -> None:
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "sd")
    sparse = helper.make_sparse_tensor(
        values, numpy_helper.from_array(np.array([1, 10], np.int64), ""), [4, 3]
    )
    graph = helper.make_graph(
        [helper.make_node("Gather", ["sd", "i"], ["y"], axis=0)],
        "g",
        [X("i", TensorProto.INT64, [2, 2])],
        [X("y", TensorProto.FLOAT, None)],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    _same_in_every_engine(model, {"i": np.array([[0, -1], [3, 2]], np.int64)})


@pytest.mark.parametrize("branch", [True, False])
@pytest.mark.parametrize("fed", [True, False])
def test_overridable_outer_initializer_read_in_if_branches_one_shadowing_it(branch: bool, fed: bool) -> None:
    """The then-branch holds its own initializer ``tbl`` (shadowing the outer one), the else-branch reads
    the outer ``tbl``, which is also a graph input the caller may feed."""
    then_g = helper.make_graph(
        [helper.make_node("Gather", ["tbl", "i"], ["t"], axis=0)],
        "then",
        [],
        [X("t", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(DATA * 100, "tbl")],
    )
    else_g = helper.make_graph(
        [helper.make_node("Gather", ["tbl", "i"], ["e"], axis=0)],
        "else",
        [],
        [X("e", TensorProto.FLOAT, None)],
    )
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [X("c", TensorProto.BOOL, []), X("i", TensorProto.INT64, [2]), X("tbl", TensorProto.FLOAT, [4, 3])],
        [X("y", TensorProto.FLOAT, None)],
        inits=[numpy_helper.from_array(DATA, "tbl")],
    )
    feeds = {"c": np.array(branch), "i": np.array([1, -1], np.int64)}
    if fed:
        feeds["tbl"] = DATA + 0.5
    _same_in_every_engine(model, feeds)


def test_scan_body_input_shadowing_an_outer_initializer() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["tbl", "x"], ["s"], axis=0),
            helper.make_node("Identity", ["tbl"], ["st"]),
        ],
        "body",
        [X("tbl", TensorProto.FLOAT, [4, 3]), X("x", TensorProto.INT64, [2])],
        [X("st", TensorProto.FLOAT, [4, 3]), X("s", TensorProto.FLOAT, None)],
    )
    model = _model(
        [helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=body, num_scan_inputs=1)],
        [X("s0", TensorProto.FLOAT, [4, 3]), X("xs", TensorProto.INT64, [3, 2])],
        [X("sf", TensorProto.FLOAT, None), X("ys", TensorProto.FLOAT, None)],
        inits=[numpy_helper.from_array(DATA, "tbl")],
    )
    _same_in_every_engine(model, {"s0": -DATA, "xs": np.array([[0, 1], [-1, 2], [3, -4]], np.int64)})


def test_loop_body_carried_value_shadowing_the_outer_input() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["g1"], axis=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("ScatterElements", ["d", "si", "upd"], ["d_out"], axis=0),
        ],
        "body",
        [X("n", TensorProto.INT64, []), X("cond", TensorProto.BOOL, []), X("d", TensorProto.FLOAT, [4, 3])],
        [
            X("cond_out", TensorProto.BOOL, []),
            X("d_out", TensorProto.FLOAT, [4, 3]),
            X("g1", TensorProto.FLOAT, None),
        ],
    )
    model = _model(
        [helper.make_node("Loop", ["M", "", "d"], ["dfin", "gs"], body=body)],
        [
            X("M", TensorProto.INT64, []),
            X("d", TensorProto.FLOAT, [4, 3]),
            X("i", TensorProto.INT64, [2]),
            X("si", TensorProto.INT64, [1, 3]),
            X("upd", TensorProto.FLOAT, [1, 3]),
        ],
        [X("dfin", TensorProto.FLOAT, None), X("gs", TensorProto.FLOAT, None)],
    )
    feeds = {
        "M": np.array(3, np.int64),
        "d": DATA,
        "i": np.array([0, -1], np.int64),
        "si": np.array([[3, 0, -4]], np.int64),
        "upd": np.full((1, 3), -1, np.float32),
    }
    _same_in_every_engine(model, feeds)


@pytest.mark.parametrize("opset", [1, 9, 11])
def test_old_opset_gather_with_ir_version_3(opset: int) -> None:
    model = _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=1)],
        [X("d", TensorProto.FLOAT, [4, 3]), X("i", TensorProto.INT64, [2, 2])],
        [X("y", TensorProto.FLOAT, None)],
        opset=opset,
        ir=3,
    )
    _same_in_every_engine(model, {"d": DATA, "i": np.array([[0, 2], [1, 0]], np.int64)})


@pytest.mark.parametrize("opset", [9, 10])
def test_deprecated_scatter_with_a_negative_index(opset: int) -> None:
    model = _model(
        [helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1)],
        [
            X("d", TensorProto.FLOAT, [4, 3]),
            X("i", TensorProto.INT64, [2, 2]),
            X("u", TensorProto.FLOAT, [2, 2]),
        ],
        [X("y", TensorProto.FLOAT, None)],
        opset=opset,
        ir=4,
    )
    feeds = {"d": DATA, "i": np.array([[0, -1], [1, 0]], np.int64), "u": np.full((2, 2), -1, np.float32)}
    _same_in_every_engine(model, feeds)


def test_domain_ai_onnx_spelled_out_in_node_and_opset() -> None:
    model = _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0, domain="ai.onnx")],
        [X("d", TensorProto.FLOAT, [4, 3]), X("i", TensorProto.INT64, [2, 2])],
        [X("y", TensorProto.FLOAT, None)],
        domain="ai.onnx",
    )
    _same_in_every_engine(model, {"d": DATA, "i": np.array([[0, -1], [3, 2]], np.int64)})


def test_string_scatternd_and_bool_gather_elements() -> None:
    model = _model(
        [
            helper.make_node("ScatterND", ["s", "j", "u"], ["y"]),
            helper.make_node("GatherElements", ["b", "k"], ["z"], axis=0),
        ],
        [
            X("s", TensorProto.STRING, [4]),
            X("j", TensorProto.INT64, [2, 1]),
            X("u", TensorProto.STRING, [2]),
            X("b", TensorProto.BOOL, [4, 3]),
            X("k", TensorProto.INT64, [2, 2]),
        ],
        [X("y", TensorProto.STRING, None), X("z", TensorProto.BOOL, None)],
    )
    feeds = {
        "s": np.array(["a", "bb", "", "dd\n"], dtype=object),
        "j": np.array([[1], [-1]], np.int64),
        "u": np.array(["x", "y\x1b"], dtype=object),
        "b": DATA > 4,
        "k": np.array([[0, 1], [3, -1]], np.int64),
    }
    _same_in_every_engine(model, feeds)


# --- Binding forms that held. ------------------------------------------------------------------------


def _two_node_model() -> bytes:
    model = _model(
        [
            helper.make_node("Gather", ["d", "i"], ["y"], axis=1),
            helper.make_node("ScatterND", ["d", "j", "u"], ["z"]),
        ],
        [
            X("d", TensorProto.FLOAT, ["N", 6]),
            X("i", TensorProto.INT64, ["a"]),
            X("j", TensorProto.INT64, ["b", 1]),
            X("u", TensorProto.FLOAT, ["b", 6]),
        ],
        [X("y", TensorProto.FLOAT, None), X("z", TensorProto.FLOAT, None)],
    )
    return model.SerializeToString()


def _feeds(d: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "d": d,
        "i": np.array([0, -1, 5], np.int64),
        "j": np.array([[3], [-4]], np.int64),
        "u": -np.ones((2, 6), np.float32),
    }


def test_non_contiguous_feeds_and_ortvalues() -> None:
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(_two_node_model(), so, providers=["CPUExecutionProvider"])
    ours = dmlshim.InferenceSession(_two_node_model())
    for d in (np.asfortranarray(data), data[:, ::-1], data[::-1, ::2].repeat(2, axis=1)):
        want = ref.run(None, _feeds(d))
        for got in (
            ours.run(None, _feeds(d)),
            [
                v.numpy()
                for v in ours.run_with_ort_values(
                    ["y", "z"],
                    {
                        k: ort.OrtValue.ortvalue_from_numpy(v)
                        for k, v in _feeds(np.ascontiguousarray(d)).items()
                    },
                )
            ],
        ):
            for a, b in zip(want, got, strict=True):
                assert np.array_equal(a, b)


def test_iobinding_outputs_kept_across_runs_change_as_onnxruntime_s() -> None:
    """onnxruntime writes a binding's second run into the outputs its first run allocated: an OrtValue
    kept from ``get_outputs()`` shows the second run's values; so does dmlshim's."""
    seen = []
    for sess in (
        ort.InferenceSession(_two_node_model(), providers=["CPUExecutionProvider"]),
        dmlshim.InferenceSession(_two_node_model()),
    ):
        binding = sess.io_binding()
        first = _feeds(np.full((4, 6), 10, np.float32))
        for name, value in first.items():
            binding.bind_cpu_input(name, value)
        binding.bind_output("y")
        binding.bind_output("z")
        sess.run_with_iobinding(binding)
        kept = binding.get_outputs()[0]
        second = _feeds(np.full((4, 6), 11, np.float32))
        for name, value in second.items():
            binding.bind_cpu_input(name, value)
        sess.run_with_iobinding(binding)
        seen.append((kept.numpy().copy(), binding.copy_outputs_to_cpu()))
    (ort_kept, ort_now), (our_kept, our_now) = seen
    assert np.array_equal(ort_kept, our_kept)
    assert all(np.array_equal(a, b) for a, b in zip(ort_now, our_now, strict=True))


# --- import dmlshim as ort: every onnxruntime module name a script reads. -----------------------------


def test_onnxruntime_module_names_dmlshim_does_not_define_are_onnxruntimes() -> None:
    """Before: ``ort.capi``, ``ort.OrtArenaCfg``, ``ort.set_default_logger_callback``, ... raised
    AttributeError after ``import dmlshim as ort``, where install()'s stand-in module gives them."""
    public = [n for n in dir(ort) if not n.startswith("_")]
    missing = [n for n in public if not hasattr(dmlshim, n)]
    assert not missing
    assert dmlshim.OrtArenaCfg is ort.OrtArenaCfg
    assert dmlshim.capi is ort.capi
    with pytest.raises(AttributeError, match="no attribute 'not_an_onnxruntime_name'"):
        dmlshim.not_an_onnxruntime_name  # noqa: B018
    assert dmlshim.InferenceSession is not ort.InferenceSession
    # a script catching onnxruntime's class through the module it imported as ort
    sess = dmlshim.InferenceSession(_two_node_model())
    with pytest.raises(dmlshim.capi.onnxruntime_pybind11_state.InvalidArgument):
        sess.run(None, {**_feeds(np.zeros((4, 6), np.float32)), "i": np.array([6], np.int64)})


# --- CLI: --input-shape sizes no ONNX dimension holds. -----------------------------------------------


@pytest.fixture
def dynamic_model(tmp_path: Path) -> Path:
    model = _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0, name="n")],
        [X("d", TensorProto.FLOAT, ["N", 3]), X("i", TensorProto.INT64, ["K"])],
        [X("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "dyn.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    "shape",
    ["N=18446744073709551616", "N=9223372036854775808", "d=9223372036854775808,3", "N=\u00b2", "N=1\u00b2"],
)
@pytest.mark.parametrize("command", ["inspect", "lower", "run", "validate", "export"])
def test_input_shape_past_int64_or_a_superscript_digit_is_a_usage_error(
    dynamic_model: Path, capsys: pytest.CaptureFixture[str], command: str, shape: str
) -> None:
    """Before: inspect and lower died with ``ValueError: Value out of range`` from protobuf (a size past
    2**63-1), and every command with ``ValueError: invalid literal for int()`` (``²``: ``str.isdigit``
    says yes); both tracebacks. Now one line naming the option and the size, exit 2."""
    out = dynamic_model.parent / "out"
    extra = {"lower": ["-o", str(out) + ".onnx"], "export": ["-o", str(out)]}.get(command, [])
    rc = main([command, str(dynamic_model), "-q", "--input-shape", shape, *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    assert f"--input-shape {shape!r}" in err
    assert not out.exists() and not Path(str(out) + ".onnx").exists()


def test_input_shape_at_the_int64_limit_still_reaches_the_model(
    dynamic_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["inspect", str(dynamic_model), "-q", "--input-shape", "N=9223372036854775807"])
    assert rc in (0, 1)
    assert "TOO_MANY_ELEMENTS" in capsys.readouterr().out


# --- opset_import listing ai.onnx twice: the last entry is the opset, as onnxruntime reads it. ---------


@pytest.mark.parametrize(
    "opsets",
    [[("", 13), ("", 9)], [("", 9), ("", 13)], [("", 16), ("ai.onnx", 18)], [("ai.onnx", 18), ("", 11)]],
    ids=str,
)
@pytest.mark.parametrize("op", ["Scatter", "ScatterElements"])
def test_ai_onnx_listed_twice_in_opset_import(opsets: list[tuple[str, int]], op: str) -> None:
    """Before: the cpu engine took the first entry (``[13, 9]`` with a deprecated Scatter: refused with
    "No Op registered for ScatterElements with domain_version of 9", where onnxruntime runs opset 9's
    Scatter)."""
    attrs = {"reduction": "max"} if op == "ScatterElements" else {}
    graph = helper.make_graph(
        [helper.make_node(op, ["d", "i", "u"], ["y"], axis=1, **attrs)],
        "g",
        [
            X("d", TensorProto.FLOAT, [4, 3]),
            X("i", TensorProto.INT64, [2, 2]),
            X("u", TensorProto.FLOAT, [2, 2]),
        ],
        [X("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    feeds = {"d": DATA, "i": np.array([[0, 2], [1, 0]], np.int64), "u": np.full((2, 2), 100, np.float32)}
    try:
        want = _ort(model, feeds)
    except (
        Exception
    ) as exc:  # onnxruntime refuses it (Scatter past opset 10, a reduction before 16): so do we
        for engine in ENGINES:
            with pytest.raises(type(exc)):
                dmlshim.InferenceSession(
                    model.SerializeToString(), **({} if engine is None else {"engine": engine})
                )
        return
    for engine in ENGINES:
        got = dmlshim.InferenceSession(
            model.SerializeToString(), **({} if engine is None else {"engine": engine})
        )
        assert np.array_equal(got.run(None, feeds)[0], want[0]), engine


# --- More model forms that held. ---------------------------------------------------------------------


def _gather_model(
    nodes: list[onnx.NodeProto], functions: list[onnx.FunctionProto], opsets: list[tuple[str, int]]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [X("d", TensorProto.FLOAT, [4, 3]), X("i", TensorProto.INT64, [2])],
        [X("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], functions=functions
    )
    model.ir_version = 10
    return model


def test_local_functions_named_gather_and_overloads_are_not_the_standard_gather() -> None:
    """A function ``local.Gather`` gathers on axis 1 and negates; overloads ``v1``/``v2`` of one function
    name: the node's ``overload`` picks the body."""
    feeds = {"d": DATA, "i": np.array([1, -1], np.int64)}
    body = [helper.make_node("Gather", ["a", "b"], ["t"], axis=1), helper.make_node("Neg", ["t"], ["o"])]
    ops = [helper.make_opsetid("", 13)]
    named = helper.make_function("local", "Gather", ["a", "b"], ["o"], body, ops)
    node = helper.make_node("Gather", ["d", "i"], ["y"], domain="local")
    _same_in_every_engine(_gather_model([node], [named], [("", 13), ("local", 1)]), feeds)
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25):
        return  # onnxruntime 1.24 ignores overloads (docs/semantics.md, "Function overloads ...")
    first = helper.make_function(
        "local", "F", ["a", "b"], ["o"], [helper.make_node("Gather", ["a", "b"], ["o"], axis=0)], ops
    )
    second = helper.make_function("local", "F", ["a", "b"], ["o"], body, ops)
    first.overload, second.overload = "v1", "v2"
    for overload in ("v1", "v2"):
        call = helper.make_node("F", ["d", "i"], ["y"], domain="local")
        call.overload = overload
        _same_in_every_engine(_gather_model([call], [first, second], [("", 13), ("local", 1)]), feeds)


@pytest.mark.parametrize(
    "names",
    [
        ("d:0", "i/1", "y;2"),
        (" ", "  ", "   "),
        ("d" * 100000, "i\u202e", "y"),
        ("\u65e5", "\u00e9", "[tensor x]"),
    ],
    ids=["punctuation", "spaces", "long-and-bidi", "unicode-and-brackets"],
)
def test_odd_value_names_in_values_and_errors(names: tuple[str, str, str]) -> None:
    d, i, y = names
    graph = helper.make_graph(
        [helper.make_node("Gather", [d, i], [y], axis=0, name=y + "node")],
        "g",
        [X(d, TensorProto.FLOAT, [4, 3]), X(i, TensorProto.INT64, [2])],
        [X(y, TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    _same_in_every_engine(model, {d: DATA, i: np.array([1, -1], np.int64)})
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
        _ort(model, {d: DATA, i: np.array([1, 9], np.int64)})
    for engine in ENGINES:
        sess = dmlshim.InferenceSession(
            model.SerializeToString(), **({} if engine is None else {"engine": engine})
        )
        with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="out of"):
            sess.run(None, {d: DATA, i: np.array([1, 9], np.int64)})


@pytest.mark.parametrize("rows", [4, 20000])
def test_an_initializer_with_a_segment_is_read_whole_as_onnxruntime_reads_it(
    tmp_path: Path, rows: int
) -> None:
    """Before: every engine died in onnx's ``to_array`` ("Currently not supporting loading segments", a bare
    ValueError) where onnxruntime ignores the segment."""
    table = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    tensor = numpy_helper.from_array(table, "w")
    tensor.segment.begin, tensor.segment.end = 0, 10
    model = _model(
        [helper.make_node("Gather", ["w", "i"], ["y"], axis=0)],
        [X("i", TensorProto.INT64, [2])],
        [X("y", TensorProto.FLOAT, None)],
        inits=[tensor],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    feeds = {"i": np.array([1, -1], np.int64)}
    want = _ort(model, feeds)
    for source in (str(path), model.SerializeToString()):
        for engine in ENGINES:
            got = dmlshim.InferenceSession(source, **({} if engine is None else {"engine": engine})).run(
                None, feeds
            )
            assert np.array_equal(got[0], want[0]), engine


# --- String feeds of bytes that are no UTF-8. -----------------------------------------------------------


def _string_gather() -> onnx.ModelProto:
    return _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        [X("d", TensorProto.STRING, [4]), X("i", TensorProto.INT64, [2])],
        [X("y", TensorProto.STRING, None)],
    )


@pytest.mark.parametrize("dtype", ["S3", "V3"])
def test_a_string_feed_of_bytes_that_are_no_utf8_raises_as_onnxruntime_raises(dtype: str) -> None:
    """Before: every engine decoded with errors='replace' and returned 'b\\ufffd' (silently another string
    than the caller fed) where onnxruntime's run raises UnicodeDecodeError."""
    model = _string_gather()
    bad = {"d": np.array([b"a", b"b\xff", b"", b"dd"], dtype=dtype), "i": np.array([1, -1], np.int64)}
    with pytest.raises(UnicodeDecodeError) as theirs:
        _ort(model, bad)
    good = {"d": np.array([b"a", "bé".encode(), b"", b"dd"], dtype=dtype), "i": np.array([1, -1], np.int64)}
    want = _ort(model, good)
    for engine in ENGINES:
        sess = dmlshim.InferenceSession(
            model.SerializeToString(), **({} if engine is None else {"engine": engine})
        )
        with pytest.raises(UnicodeDecodeError) as ours:
            sess.run(None, bad)
        assert str(ours.value) == str(theirs.value)
        got = sess.run(None, good)
        assert got[0].tolist() == want[0].tolist(), engine


def test_cli_inputs_of_bytes_that_are_no_utf8_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_string_gather(), str(path))
    np.savez(tmp_path / "in.npz", d=np.array([b"a", b"b\xff", b"", b"dd"]), i=np.array([1, -1], np.int64))
    for command in ("run", "validate"):
        assert main([command, str(path), "-q", "--inputs", str(tmp_path / "in.npz")]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "no UTF-8 at element 1" in err, err


@pytest.mark.parametrize("names", [[1], ["ConstantFolding", None]])
def test_disabled_optimizers_that_are_not_names_are_a_type_error_as_in_onnxruntime(
    names: list[object],
) -> None:
    """Before: str() made them names no optimizer has and the session was built; onnxruntime's binding
    raises TypeError."""
    model = _string_gather().SerializeToString()
    with pytest.raises(TypeError):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"], disabled_optimizers=names)
    with pytest.raises(TypeError, match="disabled_optimizers"):
        dmlshim.InferenceSession(model, disabled_optimizers=names)
    assert dmlshim.InferenceSession(
        model, disabled_optimizers="ConstantFolding"
    ).get_inputs()  # chars, as ort
