"""hostile13: values added through ``SessionOptions.add_initializer``, read anew on every run, against
onnxruntime's CPU provider (``intra_op_num_threads=1``) run with the same options and the same updates.

Found: a bfloat16 initializer replaced by ``add_initializer`` was refused ("dmlshim cannot read such a
value back from onnxruntime") where onnxruntime runs it; its bytes are now read from the OrtValue. The
other cases held and are kept: the caller's numpy array changed in place under an OrtValue that aliases
it, one OrtValue added under two names, indices computed from an added value, and ``io_binding`` /
``run_with_ort_values``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlshim

from .added_initializers import both_sides, runs_with_added
from .oracle import IR_VERSION

ENGINES = ["partitioned", "customop", "cpu"]
DATA = np.arange(12, dtype=np.float32).reshape(4, 3)


def _model(nodes: list[Any], inputs: list[Any], inits: list[Any], outs: list[str]) -> bytes:
    graph = helper.make_graph(
        nodes, "live", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs], inits
    )
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    return model.SerializeToString()


def _outputs(session: Any, feeds: dict[str, np.ndarray], how: str) -> list[np.ndarray]:
    if how == "ortvalues":
        values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
        return [np.asarray(o.numpy()) for o in session.run_with_ort_values(None, values)]
    if how == "iobinding":
        binding = session.io_binding()
        for k, v in feeds.items():
            binding.bind_cpu_input(k, v)
        for o in session.get_outputs():
            binding.bind_output(o.name)
        session.run_with_iobinding(binding)
        return [np.asarray(o) for o in binding.copy_outputs_to_cpu()]
    return [np.asarray(o) for o in session.run(None, feeds)]


Updates = list[Callable[[dict[str, Any]], None]]


def _compare(
    model: bytes,
    added: Callable[[], dict[str, Any]],
    updates: Updates,
    feeds: dict[str, np.ndarray],
    engine: str,
    how: str = "run",
) -> list[Any]:
    want, got = both_sides(model, engine, added, updates, lambda s: _outputs(s, feeds, how))
    for w, g in zip(want, got, strict=True):
        if isinstance(w, Exception):
            assert isinstance(g, Exception), f"onnxruntime's run failed, dmlshim's returned {g}"
            continue
        assert not isinstance(g, Exception), f"dmlshim's run raised {g!r}"
        for a, b in zip(w, g, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (a, b)
    return want


def _gather_indices_added() -> bytes:
    return _model(
        [helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])],
        [numpy_helper.from_array(np.array([0, 1], np.int64), "i")],
        ["y"],
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_bfloat16_initializer_added_and_updated(engine: str) -> None:
    """Was refused at session creation; onnxruntime reads the added value, anew after update_inplace (the
    Cast of the initializer alone is folded at build and reads the model's own value)."""
    model = _model(
        [
            helper.make_node("Gather", ["d", "i"], ["g"], axis=0),
            helper.make_node("Cast", ["g"], ["y"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["d"], ["w"], to=TensorProto.FLOAT),
        ],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor("d", TensorProto.BFLOAT16, [4, 3], DATA.ravel().tolist())],
        ["y", "w"],
    )

    def added() -> dict[str, Any]:
        bits = (np.arange(12, dtype=np.uint16) + 0x4040).reshape(4, 3)
        return {"d": ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)}

    def update(values: dict[str, Any]) -> None:
        values["d"].update_inplace(np.full((4, 3), 0xC0A0, np.uint16))  # -5.0

    want = _compare(model, added, [update], {"i": np.array([0, 3], np.int64)}, engine)
    assert want[0][0][0].tolist() == [3.0, 3.015625, 3.03125] and want[1][0].ravel().tolist() == [-5.0] * 6


@pytest.mark.parametrize("engine", ENGINES)
def test_the_callers_numpy_array_changed_under_an_aliasing_ortvalue(engine: str) -> None:
    """``OrtValue.ortvalue_from_numpy`` of a CPU array uses the array's memory: writing into the array
    changes what the next run reads, out of range included."""
    arrays: dict[str, np.ndarray] = {}

    def added() -> dict[str, Any]:
        arrays["i"] = np.array([0, 1], np.int64)
        return {"i": ort.OrtValue.ortvalue_from_numpy(arrays["i"])}

    def wrap(values: dict[str, Any]) -> None:
        arrays["i"][:] = [3, -1]

    def out_of_range(values: dict[str, Any]) -> None:
        arrays["i"][:] = [3, 7]

    want = _compare(_gather_indices_added(), added, [wrap, out_of_range], {"d": DATA}, engine)
    assert want[1][0].tolist() == DATA[[3, -1]].tolist() and isinstance(want[2], Exception)


@pytest.mark.parametrize("engine", ENGINES)
def test_one_ortvalue_added_under_two_names(engine: str) -> None:
    model = _model(
        [
            helper.make_node("Gather", ["d", "i"], ["y"], axis=0),
            helper.make_node("Gather", ["d", "j"], ["z"], axis=0),
        ],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])],
        [numpy_helper.from_array(np.array([0, 1], np.int64), n) for n in ("i", "j")],
        ["y", "z"],
    )

    def added() -> dict[str, Any]:
        value = ort.OrtValue.ortvalue_from_numpy(np.array([1, 2], np.int64))
        return {"i": value, "j": value}

    def update(values: dict[str, Any]) -> None:
        values["i"].update_inplace(np.array([3, 0], np.int64))

    want = _compare(model, added, [update], {"d": DATA}, engine)
    assert want[1][1].tolist() == DATA[[3, 0]].tolist()


@pytest.mark.parametrize("how", ["ortvalues", "iobinding"])
def test_indices_computed_from_an_added_value_through_other_run_calls(how: str) -> None:
    """The Gather's indices are ``k + one``, ``k`` fed and ``one`` added: read anew in every run call, so
    the updated ``one`` makes the indices negative (wrapped)."""
    model = _model(
        [helper.make_node("Add", ["k", "one"], ["i"]), helper.make_node("Gather", ["d", "i"], ["y"], axis=0)],
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [2]),
        ],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
        ["y"],
    )

    def added() -> dict[str, Any]:
        return {"one": ort.OrtValue.ortvalue_from_numpy(np.array(1, np.int64))}

    def update(values: dict[str, Any]) -> None:
        values["one"].update_inplace(np.array(-3, np.int64))

    feeds = {"d": DATA, "k": np.array([0, 2], np.int64)}
    want = _compare(model, added, [update, update], feeds, "partitioned", how)
    assert want[0][0].tolist() == DATA[[1, 3]].tolist() and want[1][0].tolist() == DATA[[-3, -1]].tolist()


def _external_bfloat16_model(folder: Any) -> str:
    tensor = onnx.TensorProto(name="d", data_type=TensorProto.BFLOAT16, dims=[4, 3])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "24")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["d", "i"], ["g"], axis=0),
            helper.make_node("Cast", ["g"], ["y"], to=TensorProto.FLOAT),
        ],
        "external_bf16",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_value_info("y", onnx.TypeProto())],
        [tensor],
    )
    path = str(folder / "m.onnx")
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("way", ["files_in_memory", "external_initializers"])
def test_external_bfloat16_weights_given_through_the_options(tmp_path: Any, way: str) -> None:
    """Was refused: a file held in memory as a BadModelError "cannot read the external data" (numpy has
    no bfloat16), an added external initializer as "cannot read such a value back"."""
    path = _external_bfloat16_model(tmp_path)
    bits = np.arange(12, dtype=np.uint16) + 0x3F80
    buffer = bits.tobytes()  # onnxruntime keeps a pointer to it: it must outlive the sessions
    kept: list[Any] = []  # and the added OrtValues

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        if way == "files_in_memory":
            so.add_external_initializers_from_files_in_memory(["w.bin"], [buffer], [len(buffer)])
        else:
            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                bits.reshape(4, 3) + 1, TensorProto.BFLOAT16
            )
            so.add_external_initializers(["d"], [value])
            kept.append(value)
        return so

    feeds = {"i": np.array([0, 3], np.int64)}
    want = ort.InferenceSession(path, options(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = dmlshim.InferenceSession(path, options()).run(None, feeds)[0]
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert want[0, 0] == (1.0 if way == "files_in_memory" else 1.0078125)


def _conv_batchnorm(scale_read_too: bool = False) -> bytes:
    """Conv then BatchNormalization (fused by onnxruntime at build from the model's scale), then a Gather
    of the flattened result; ``scale_read_too``: a Gather of the scale itself as well (it reads the added
    value, anew on every run, while the fused Conv keeps the model's)."""
    w = np.array([[[[0.5]]], [[[-1.5]]]], np.float32)
    stats = [("sc", [1.0, 2.0]), ("bi", [0.0, 1.0]), ("mu", [0.0, 0.0]), ("var", [1.0, 1.0])]
    return _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("BatchNormalization", ["c", "sc", "bi", "mu", "var"], ["b"]),
            helper.make_node("Flatten", ["b"], ["f"], axis=0),
            helper.make_node("Gather", ["f", "i"], ["y"], axis=1),
            *([helper.make_node("Gather", ["sc", "i0"], ["z"], axis=0)] if scale_read_too else []),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [
            numpy_helper.from_array(w, "w"),
            *(numpy_helper.from_array(np.array(v, np.float32), n) for n, v in stats),
            numpy_helper.from_array(np.array([0, 7], np.int64), "i"),
            numpy_helper.from_array(np.array([1, 0], np.int64), "i0"),
        ],
        ["y", "z"] if scale_read_too else ["y"],
    )


def _matmul_scale() -> bytes:
    """``Mul(MatMul(x, W), s)``: onnxruntime's MatMulScaleFusion folds the model's ``s`` into the MatMul."""
    return _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Mul", ["m", "s"], ["ms"]),
            helper.make_node("Gather", ["ms", "i"], ["y"], axis=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            numpy_helper.from_array(np.ones((3, 4), np.float32), "w"),
            numpy_helper.from_array(np.array(2, np.float32), "s"),
            numpy_helper.from_array(np.array([0, 3], np.int64), "i"),
        ],
        ["y"],
    )


@pytest.mark.parametrize("engine", ["partitioned", "cpu"])
@pytest.mark.parametrize("level", [None, ort.GraphOptimizationLevel.ORT_DISABLE_ALL])
@pytest.mark.parametrize("case", ["conv_batchnorm", "matmul_scale", "conv_batchnorm_scale_read"])
def test_an_added_value_onnxruntimes_fusions_consume_at_build(engine: str, level: Any, case: str) -> None:
    """Was a silent difference: dmlshim used the added scale, onnxruntime's fused node the model's own (its
    fusions run before added values are applied, and leave no node reading the name); with optimizations
    off onnxruntime reads the added value, and anew after update_inplace."""
    model, name, feeds, added, updated = {
        "conv_batchnorm": (
            _conv_batchnorm(),
            "sc",
            {"x": np.ones((1, 1, 2, 2), np.float32)},
            [3, 4],
            [-1, 5],
        ),
        "matmul_scale": (_matmul_scale(), "s", {"x": np.ones((2, 3), np.float32)}, 3, -1),
        "conv_batchnorm_scale_read": (
            _conv_batchnorm(True),
            "sc",
            {"x": np.ones((1, 1, 2, 2), np.float32)},
            [3, 4],
            [-1, 5],
        ),
    }[case]

    def values() -> dict[str, Any]:
        return {name: ort.OrtValue.ortvalue_from_numpy(np.array(added, np.float32))}

    def update(held: dict[str, Any]) -> None:
        held[name].update_inplace(np.array(updated, np.float32))

    def make(library: Any) -> Callable[[Any], Any]:
        def build(so: Any) -> Any:
            if level is not None:
                so.graph_optimization_level = level
            if library is ort:
                return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            return dmlshim.InferenceSession(model, so, engine=engine)

        return build

    def outputs(session: Any) -> list[Any]:
        return list(session.run(None, feeds))

    want = runs_with_added(make(ort), values, [update], outputs)
    got = runs_with_added(make(dmlshim), values, [update], outputs)
    for w, g in zip(want, got, strict=True):
        assert [a.tobytes() for a in w] == [b.tobytes() for b in g], (w, g)
    assert (want[0][0].tobytes() == want[1][0].tobytes()) == (level is None)  # fused: the update is unseen


@pytest.mark.parametrize("name", ["w", "bias"])
def test_matmul_and_add_fused_into_a_gemm_read_the_added_values(name: str) -> None:
    """onnxruntime's Gemm made of MatMul+Add reads both added values by name (its weight packed with the
    value added at build): no fused node computed with the model's own."""
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["mm"]),
            helper.make_node("Add", ["mm", "bias"], ["a"]),
            helper.make_node("Gather", ["a", "i"], ["y"], axis=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            numpy_helper.from_array(np.ones((3, 4), np.float32), "w"),
            numpy_helper.from_array(np.arange(4, dtype=np.float32), "bias"),
            numpy_helper.from_array(np.array([0, 3], np.int64), "i"),
        ],
        ["y"],
    )
    shape = (3, 4) if name == "w" else (4,)

    def added() -> dict[str, Any]:
        return {name: ort.OrtValue.ortvalue_from_numpy(np.full(shape, 2, np.float32))}

    def update(values: dict[str, Any]) -> None:
        values[name].update_inplace(np.full(shape, -1, np.float32))

    want = _compare(model, added, [update], {"x": np.ones((2, 3), np.float32)}, "partitioned")
    assert want[0][0].tolist() == ([[6.0, 9.0]] * 2 if name == "w" else [[5.0, 5.0]] * 2)


def _identity_model(kind: str) -> bytes:
    """Indices ``k`` (added) through Identity nodes, which onnxruntime eliminates before it folds: the
    Gather reading ``Identity(k)`` reads the added value; ``Neg(Identity(k))`` is folded with the model's."""
    nodes = [helper.make_node("Identity", ["k"], ["kk"])]
    outs = ["y"]
    if kind == "chain":
        nodes += [
            helper.make_node("Identity", ["kk"], ["k3"]),
            helper.make_node("Gather", ["x", "k3"], ["y"], axis=0),
        ]
    else:  # folded and direct
        nodes += [
            helper.make_node("Neg", ["kk"], ["nk"]),
            helper.make_node("Gather", ["x", "nk"], ["y"], axis=0),
            helper.make_node("Gather", ["x", "kk"], ["z"], axis=0),
        ]
        outs.append("z")
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([0, 3], np.int64), "k")],
        outs,
    )


def _conv_then(op: str) -> bytes:
    """Conv then Add or Mul of a per-channel constant ``k`` (fused into the Conv with the model's ``k``)."""
    return _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node(op, ["c", "k"], ["b"]),
            helper.make_node("Flatten", ["b"], ["f"], axis=0),
            helper.make_node("Gather", ["f", "i"], ["y"], axis=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [
            numpy_helper.from_array(np.array([[[[0.5]]], [[[-1.5]]]], np.float32), "w"),
            numpy_helper.from_array(np.array([2, 3], np.float32).reshape(2, 1, 1), "k"),
            numpy_helper.from_array(np.array([0, 7], np.int64), "i"),
        ],
        ["y"],
    )


@pytest.mark.parametrize("case", ["identity_chain", "identity_folded_and_direct", "conv_add", "conv_mul"])
def test_values_read_through_eliminated_identities_and_fused_convolutions(case: str) -> None:
    """Were silent differences: dmlshim folded ``Identity(k)`` with the model's ``k`` (onnxruntime removes
    the Identity, so its reader gets the added value, anew each run), and used the added ``k`` of a
    Conv+Add/Mul onnxruntime fuses with the model's."""
    if case.startswith("identity"):
        model, feeds = _identity_model(case.removeprefix("identity_")), {"x": np.arange(4, dtype=np.float32)}
        first, then = np.array([1, 2], np.int64), np.array([3, 3], np.int64)
    else:
        model, feeds = (
            _conv_then(case.removeprefix("conv_").title()),
            {"x": np.ones((1, 1, 2, 2), np.float32)},
        )
        first, then = (
            np.array([5, 7], np.float32).reshape(2, 1, 1),
            np.array([-1, 1], np.float32).reshape(2, 1, 1),
        )

    def added() -> dict[str, Any]:
        return {"k": ort.OrtValue.ortvalue_from_numpy(first.copy())}

    def update(values: dict[str, Any]) -> None:
        values["k"].update_inplace(then.copy())

    want = _compare(model, added, [update], feeds, "partitioned")
    changed = want[0][-1].tobytes() != want[1][-1].tobytes()
    assert changed == case.startswith("identity")  # the fused Conv never sees the added value


@pytest.mark.parametrize("branch", [True, False])
def test_a_node_folded_inside_an_if_branch_reads_the_models_value(branch: bool) -> None:
    """onnxruntime folds ``Neg(k)`` inside the then-branch with the model's ``k`` (dmlshim folded only the
    main graph's nodes: the branch read the added value); the else-branch's Gather reads the added ``k``."""
    then = helper.make_graph(
        [helper.make_node("Neg", ["k"], ["nk"]), helper.make_node("Gather", ["x", "nk"], ["t"], axis=0)],
        "then",
        [],
        [helper.make_value_info("t", onnx.TypeProto())],
    )
    other = helper.make_graph(
        [helper.make_node("Gather", ["x", "k"], ["e"], axis=0)],
        "else",
        [],
        [helper.make_value_info("e", onnx.TypeProto())],
    )
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
        ],
        [numpy_helper.from_array(np.array([0, 3], np.int64), "k")],
        ["y"],
    )

    def added() -> dict[str, Any]:
        return {"k": ort.OrtValue.ortvalue_from_numpy(np.array([1, 2], np.int64))}

    def update(values: dict[str, Any]) -> None:
        values["k"].update_inplace(np.array([3, 3], np.int64))

    feeds = {"x": np.arange(4, dtype=np.float32), "c": np.array(branch)}
    want = _compare(model, added, [update], feeds, "partitioned")
    assert want[1][0].tolist() == ([0.0, 1.0] if branch else [3.0, 3.0])
