"""dmlshim.InferenceSession (partitioned engine) on generated models, compared bit for bit with
onnxruntime CPU (single-threaded), and the per-run record checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from dmlshim import BadInputError, IndexOutOfRangeError, InferenceSession
from tests.oracle import IR_VERSION, ort_run

OPSET = 16
GATHER_SCATTER = {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}


def single_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def session(model: onnx.ModelProto | str, **kwargs: object) -> InferenceSession:
    return InferenceSession(model, sess_options=single_thread(), **kwargs)  # type: ignore[arg-type]


def assert_bitwise(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"output {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        assert g.tobytes() == w.tobytes(), f"output {k}: values differ"


def special_floats(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Random float32 data salted with NaN, -NaN with a payload, +-Inf and -0.0."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32)
    payload_nan = np.array([0x7FC01234], dtype=np.uint32).view(np.float32)
    picks = rng.choice(flat.size, size=min(4, flat.size), replace=False)
    for p, v in zip(picks, [*specials[:3], payload_nan[0]], strict=False):
        flat[p] = v
    return x


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, tuple[int, Sequence[int | str | None]]],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "generated",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    return model


def check_against_ort(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], **kwargs: object
) -> InferenceSession:
    sess = session(model, **kwargs)
    copies = {k: v.copy() for k, v in feeds.items()}
    got = sess.run(None, dict(feeds))
    assert_bitwise(got, ort_run(model, feeds))
    for k, v in feeds.items():
        assert v.tobytes() == copies[k].tobytes(), f"feed {k} was modified"
    return sess


def gather_scatter_names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node if n.op_type in GATHER_SCATTER]


# --- A random generator of models mixing the six ops with elementwise ops. ------------------------


@dataclass
class _Builder:
    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inputs: dict[str, tuple[int, list[int]]] = field(default_factory=dict)
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    pool: dict[str, tuple[int, ...]] = field(default_factory=dict)
    count: int = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def index_tensor(self, values: np.ndarray, as_initializer: bool) -> str:
        name = self.fresh("idx")
        if as_initializer:
            self.inits[name] = values
        else:
            self.inputs[name] = (TensorProto.INT64, list(values.shape))
            self.feeds[name] = values
        return name

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs: object) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"n_{out}", **attrs))
        self.pool[out] = shape
        return out

    def step(self) -> None:
        rng = self.rng
        name = str(rng.choice(sorted(self.pool)))
        shape = self.pool[name]
        rank = len(shape)
        as_init = bool(rng.integers(2))
        op = str(
            rng.choice(
                ["elementwise", "Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"]
            )
        )
        if op == "elementwise":
            same = [n for n, s in self.pool.items() if s == shape and n != name]
            if same and rng.integers(2):
                other = str(rng.choice(same))
                self.add(str(rng.choice(["Add", "Mul", "Sub"])), [name, other], shape)
            else:
                self.add(str(rng.choice(["Relu", "Neg", "Abs"])), [name], shape)
        elif op == "Gather":
            axis = int(rng.integers(-rank, rank))
            dim = shape[axis]
            q_shape = tuple(int(d) for d in rng.integers(1, 3, size=int(rng.integers(0, 3))))
            if rank + len(q_shape) - 1 > 5 or rank + len(q_shape) - 1 < 1:
                q_shape = (2,)
            idx = rng.integers(-dim, dim, size=q_shape).astype(np.int64)
            out_shape = shape[: axis % rank] + q_shape + shape[axis % rank + 1 :]
            self.add("Gather", [name, self.index_tensor(idx, as_init)], out_shape, axis=axis)
        elif op == "GatherElements":
            axis = int(rng.integers(-rank, rank))
            idx = rng.integers(-shape[axis], shape[axis], size=shape).astype(np.int64)
            self.add("GatherElements", [name, self.index_tensor(idx, as_init)], shape, axis=axis)
        elif op == "GatherND":
            m = int(rng.integers(1, rank + 1))
            k = int(rng.integers(1, 4))
            idx = np.stack([rng.integers(0, shape[j], size=k) for j in range(m)], axis=-1).astype(np.int64)
            out_shape = (k, *shape[m:])
            if not out_shape or len(out_shape) < 1:
                return
            self.add("GatherND", [name, self.index_tensor(idx, as_init)], out_shape)
        elif op == "ScatterElements":
            axis = int(rng.integers(-rank, rank))
            # Distinct positions along the axis (a permutation), so no two writes collide.
            idx = np.argsort(rng.random(shape), axis=axis)[
                tuple(
                    slice(0, max(1, s // 2)) if j == axis % rank else slice(None) for j, s in enumerate(shape)
                )
            ].astype(np.int64)
            upd = self.fresh("upd")
            self.inputs[upd] = (TensorProto.FLOAT, list(idx.shape))
            self.feeds[upd] = special_floats(rng, idx.shape)
            self.add("ScatterElements", [name, self.index_tensor(idx, as_init), upd], shape, axis=axis)
        else:
            m = int(rng.integers(1, rank + 1))
            total = int(np.prod(shape[:m]))
            k = int(rng.integers(1, min(total, 4) + 1))
            flat = rng.choice(total, size=k, replace=False)
            idx = np.stack(np.unravel_index(flat, shape[:m]), axis=-1).astype(np.int64)
            upd_shape = (k, *shape[m:])
            upd = self.fresh("upd")
            self.inputs[upd] = (TensorProto.FLOAT, list(upd_shape))
            self.feeds[upd] = special_floats(rng, upd_shape)
            self.add("ScatterND", [name, self.index_tensor(idx, as_init), upd], shape)


def random_model(seed: int, steps: int = 10) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    b = _Builder(rng)
    for k in range(2):
        shape = tuple(int(d) for d in rng.integers(2, 5, size=int(rng.integers(1, 4))))
        b.inputs[f"x{k}"] = (TensorProto.FLOAT, list(shape))
        b.feeds[f"x{k}"] = special_floats(rng, shape)
        b.pool[f"x{k}"] = shape
    for _ in range(steps):
        b.step()
    produced = [o for n in b.nodes for o in n.output]
    consumed = {i for n in b.nodes for i in n.input}
    outs = [o for o in produced if o not in consumed]
    # Some intermediate values (read by later nodes) are graph outputs too.
    outs += [o for o in produced if o in consumed and rng.random() < 0.3]
    model = make_model(b.nodes, b.inputs, outs, b.inits)
    return model, b.feeds


@pytest.mark.parametrize("seed", range(12))
def test_random_models_match_onnxruntime_bit_for_bit(seed: int) -> None:
    model, feeds = random_model(seed)
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None
    expected = gather_scatter_names(model)
    assert [n.name for n in record.nodes] == expected
    assert all(n.placement == "dml" and n.status == "dml" and n.operator for n in record.nodes)


# --- Hand-built structures. -----------------------------------------------------------------------


def chain_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Add -> Gather -> Mul -> Relu -> ScatterND -> Add."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add0"),
        helper.make_node("Gather", ["a", "gidx"], ["g"], name="gather", axis=0),
        helper.make_node("Mul", ["g", "g"], ["m"], name="mul"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("ScatterND", ["r", "sidx", "upd"], ["s"], name="scatter"),
        helper.make_node("Add", ["s", "s"], ["y"], name="add1"),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [4, 3]), "upd": (TensorProto.FLOAT, [2, 3])},
        ["y"],
        {"gidx": np.array([3, 0, 2], dtype=np.int64), "sidx": np.array([[2], [0]], dtype=np.int64)},
    )
    feeds = {"x": special_floats(rng, (4, 3)), "upd": special_floats(rng, (2, 3))}
    return model, feeds


def test_chain_uses_few_cpu_partitions() -> None:
    model, feeds = chain_model()
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None
    assert 2 <= record.cpu_partitions <= 3
    assert [(n.name, n.placement, n.operator) for n in record.nodes] == [
        ("gather", "dml", "DML_OPERATOR_GATHER"),
        ("scatter", "dml", "DML_OPERATOR_SCATTER_ND"),
    ]


def test_diamond_with_shared_inputs_and_intermediate_outputs() -> None:
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["left"], name="left", axis=1),
        helper.make_node("GatherElements", ["x", "ei"], ["right"], name="right", axis=0),
        helper.make_node("Neg", ["right"], ["right_neg"], name="neg"),
        helper.make_node("Gather", ["right_neg", "i"], ["right_g"], name="right_g", axis=1),
        helper.make_node("Add", ["left", "right_g"], ["sum"], name="sum"),
        helper.make_node("ScatterElements", ["sum", "si", "sum"], ["y"], name="scatter", axis=1),
    ]
    ei = rng.integers(0, 4, size=(4, 5)).astype(np.int64)
    si = np.tile(np.array([[1, 0]], dtype=np.int64), (4, 1))
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [4, 5]), "i": (TensorProto.INT64, [2])},
        ["y", "left", "right_neg", "sum"],
        {"ei": ei, "si": si},
    )
    feeds = {"x": special_floats(rng, (4, 5)), "i": np.array([4, -5], dtype=np.int64)}
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None
    assert {n.name for n in record.emulated} == {"left", "right", "right_g", "scatter"}
    assert any(n.negative_indices for n in record.nodes if n.name == "left")
    # A subset of outputs, in another order.
    got = sess.run(["sum", "y"], feeds)
    want = ort_run(model, feeds)
    assert_bitwise(got, [want[3], want[0]])


def test_output_straight_from_gather() -> None:
    rng = np.random.default_rng(3)
    model = make_model(
        [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd", batch_dims=1)],
        {"x": (TensorProto.FLOAT, [2, 3, 4]), "i": (TensorProto.INT64, [2, 1])},
        ["y"],
    )
    feeds = {"x": special_floats(rng, (2, 3, 4)), "i": np.array([[2], [0]], dtype=np.int64)}
    sess = check_against_ort(model, feeds)
    assert sess.last_run_record is not None
    assert sess.last_run_record.cpu_partitions == 0
    assert [n.operator for n in sess.last_run_record.nodes] == ["DML_OPERATOR_GATHER_ND1"]


def test_model_without_gather_scatter_runs_in_one_session() -> None:
    rng = np.random.default_rng(4)
    model = make_model(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        {"x": (TensorProto.FLOAT, [3, 3])},
        ["y", "a"],
    )
    sess = check_against_ort(model, {"x": special_floats(rng, (3, 3))})
    record = sess.last_run_record
    assert record is not None and record.nodes == () and record.cpu_partitions == 1


def test_graph_output_that_is_a_graph_input_and_an_initializer() -> None:
    model = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        {"x": (TensorProto.FLOAT, [3]), "i": (TensorProto.INT64, [2])},
        ["y", "x", "c"],
        {"c": np.array([1.5, np.nan], dtype=np.float32)},
    )
    feeds = {"x": np.array([1, 2, np.nan], dtype=np.float32), "i": np.array([2, 0], dtype=np.int64)}
    sess = check_against_ort(model, feeds)
    out = sess.run(None, feeds)
    out[1][0] = 42.0  # the caller owns what run returns
    assert feeds["x"][0] == 1


def test_integer_and_bool_data() -> None:
    nodes = [
        helper.make_node("Gather", ["b", "i"], ["bg"], name="gb", axis=0),
        helper.make_node("ScatterElements", ["n", "j", "u"], ["ns"], name="sn", axis=0),
        helper.make_node("Cast", ["ns"], ["nf"], to=TensorProto.FLOAT),
    ]
    model = make_model(
        nodes,
        {
            "b": (TensorProto.BOOL, [4]),
            "i": (TensorProto.INT32, [3]),
            "n": (TensorProto.INT64, [5]),
            "j": (TensorProto.INT32, [2]),
            "u": (TensorProto.INT64, [2]),
        },
        ["bg", "ns", "nf"],
    )
    feeds = {
        "b": np.array([True, False, True, True]),
        "i": np.array([1, -1, 0], dtype=np.int32),
        "n": np.array([2**62, -(2**40), 3, 4, 5], dtype=np.int64),
        "j": np.array([4, 0], dtype=np.int32),
        "u": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    }
    sess = check_against_ort(model, feeds)
    assert sess.last_run_record is not None
    assert len(sess.last_run_record.emulated) == 2


def test_optional_empty_name_input_in_cpu_node() -> None:
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
        helper.make_node("Gather", ["c", "i"], ["y"], name="g", axis=1),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [2, 4]), "i": (TensorProto.INT64, [1])},
        ["y"],
        {"hi": np.array(0.5, dtype=np.float32)},
    )
    check_against_ort(model, {"x": special_floats(rng, (2, 4)), "i": np.array([3], dtype=np.int64)})


def test_symbolic_batch_translations_are_cached() -> None:
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("GatherElements", ["r", "i"], ["g"], name="ge", axis=1),
        helper.make_node("Add", ["g", "g"], ["y"], name="add"),
    ]
    model = make_model(
        nodes, {"x": (TensorProto.FLOAT, ["batch", 3]), "i": (TensorProto.INT64, ["batch", 3])}, ["y"]
    )
    sess = session(model)
    computed = []
    for batch in (2, 5, 2, 5):
        feeds = {
            "x": special_floats(rng, (batch, 3)),
            "i": rng.integers(-3, 3, size=(batch, 3)).astype(np.int64),
        }
        assert_bitwise(sess.run(None, feeds), ort_run(model, feeds))
        record = sess.last_run_record
        assert record is not None and record.emulated[0].name == "ge"
        computed.append(record.translations_computed)
    assert computed == [1, 1, 0, 0]


def test_empty_tensor_at_run_time_falls_back_to_cpu() -> None:
    model = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        {"x": (TensorProto.FLOAT, [3, 2]), "i": (TensorProto.INT64, ["n"])},
        ["y"],
    )
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    sess = check_against_ort(model, {"x": x, "i": np.zeros((0,), dtype=np.int64)})
    (node,) = sess.last_run_record.nodes  # type: ignore[union-attr]
    assert node.placement == "onnxruntime-cpu"
    assert "runtime_fallback" in [c for c, _ in node.reasons]
    sess.run(None, {"x": x, "i": np.array([1], dtype=np.int64)})
    assert sess.last_run_record.nodes[0].placement == "dml"  # type: ignore[union-attr]


def test_static_fallback_is_merged_into_cpu_partitions() -> None:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("ScatterND", ["a", "i", "u"], ["s"], name="scatter_add", reduction="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [4]), "u": (TensorProto.FLOAT, [2])},
        ["y"],
        {"i": np.array([[1], [1]], dtype=np.int64)},
    )
    feeds = {"x": np.array([1, 2, np.nan, 4], dtype=np.float32), "u": np.array([0.5, 0.25], dtype=np.float32)}
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None and record.cpu_partitions == 1
    (node,) = record.nodes
    assert (node.placement, node.status) == ("onnxruntime-cpu", "fallback")
    assert node.reasons


def test_shape_computation_gather_stays_on_cpu_like_the_dml_provider() -> None:
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="shape_gather", axis=0),
        helper.make_node("Concat", ["batch", "minus_one"], ["new_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["flat"], name="reshape"),
        helper.make_node("Gather", ["flat", "cols"], ["y"], name="data_gather", axis=1),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, ["b", 2, 3]), "cols": (TensorProto.INT64, [2])},
        ["y"],
        {"zero": np.array([0], dtype=np.int64), "minus_one": np.array([-1], dtype=np.int64)},
    )
    feeds = {"x": special_floats(rng, (3, 2, 3)), "cols": np.array([5, 0], dtype=np.int64)}
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None
    placement = {n.name: (n.placement, [c for c, _ in n.reasons]) for n in record.nodes}
    assert placement["shape_gather"] == ("onnxruntime-cpu", ["ort_cpu_preferred"])
    assert placement["data_gather"][0] == "dml"


def loop_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Loop whose body scatters one row per iteration, followed by a top-level Gather."""
    body = helper.make_graph(
        [
            helper.make_node("Unsqueeze", ["iter", "axes"], ["it2"], name="unsq"),
            helper.make_node("Unsqueeze", ["it2", "axes"], ["pos"], name="unsq2"),
            helper.make_node("Gather", ["rows", "iter"], ["row"], name="gather_row", axis=0),
            helper.make_node("Unsqueeze", ["row", "axes"], ["row2"], name="unsq3"),
            helper.make_node("ScatterND", ["acc_in", "pos", "row2"], ["acc_out"], name="scatter_row"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3, 4]),
        ],
        initializer=[numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")],
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["rows"], name="neg"),
        helper.make_node("Loop", ["trip", "cond", "acc0"], ["acc"], name="loop", body=body),
        helper.make_node("Gather", ["acc", "gi"], ["y"], name="gather_after", axis=1),
    ]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, [3, 4]), "acc0": (TensorProto.FLOAT, [3, 4])},
        ["y", "acc"],
        {
            "trip": np.array(3, dtype=np.int64),
            "cond": np.array(True),
            "gi": np.array([3, 1], dtype=np.int64),
        },
    )
    rng = np.random.default_rng(8)
    return model, {"x": special_floats(rng, (3, 4)), "acc0": np.zeros((3, 4), dtype=np.float32)}


def test_loop_with_scatternd_in_its_body() -> None:
    model, feeds = loop_model()
    sess = check_against_ort(model, feeds)
    record = sess.last_run_record
    assert record is not None
    by_name = {n.name: n for n in record.nodes}
    assert by_name["gather_after"].placement == "dml"
    for nested in ("loop/body/gather_row", "loop/body/scatter_row"):
        node = by_name[nested]
        assert (node.placement, node.status) == ("onnxruntime-cpu", "not_emulated")
        assert node.reasons[0][0] == "not_emulated" and "Loop" in node.reasons[0][1]
    assert [n.name for n in record.nodes] == ["loop/body/gather_row", "loop/body/scatter_row", "gather_after"]


# --- The drop-in API. -----------------------------------------------------------------------------


def test_inputs_outputs_meta_providers() -> None:
    model, feeds = chain_model()
    model.producer_name = "tests"
    helper.set_model_props(model, {"k": "v"})
    sess = InferenceSession(model.SerializeToString())
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, theirs in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
        assert [(a.name, list(a.shape), a.type) for a in ours] == [
            (a.name, list(a.shape), a.type) for a in theirs
        ]
    meta = sess.get_modelmeta()
    assert meta.producer_name == "tests" and meta.custom_metadata_map == {"k": "v"}
    assert sess.get_providers() == ["DmlExecutionProvider", "CPUExecutionProvider"]
    assert sess.last_run_record is None
    assert_bitwise(sess.run(None, feeds, ort.RunOptions()), ort_run(model, feeds))


def test_model_from_path(tmp_path: object) -> None:
    model, feeds = chain_model()
    path = f"{tmp_path}/chain.onnx"
    onnx.save(model, path)
    sess = session(path)
    assert sess.model_path == path
    assert_bitwise(sess.run(None, feeds), ort_run(model, feeds))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda f: f.pop("x"), "missing feed for graph input 'x'"),
        (lambda f: f.update(extra=np.zeros(1, np.float32)), "'extra' is not an input"),
        (lambda f: f.update(x=f["x"].astype(np.float64)), "expects tensor(float)"),
        # onnxruntime's sentences first (tests/test_ort_acceptance_h34.py compares them with onnxruntime's)
        (lambda f: f.update(x=f["x"][None]), "Invalid rank for input: x Got: 3 Expected: 2"),
        (lambda f: f.update(x=np.zeros((5, 3), np.float32)), "index: 0 Got: 5 Expected: 4"),
    ],
)
def test_feed_validation_names_the_input(change: object, fragment: str) -> None:
    model, feeds = chain_model()
    sess = session(model)
    change(feeds)  # type: ignore[operator]
    with pytest.raises(BadInputError) as err:
        sess.run(None, feeds)
    assert fragment in str(err.value)


def test_unknown_output_name() -> None:
    model, feeds = chain_model()
    with pytest.raises(BadInputError, match="'nope' is not an output"):
        session(model).run(["nope"], feeds)


def test_index_out_of_range_and_clamp() -> None:
    model = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="g", axis=0)],
        {"x": (TensorProto.FLOAT, [3]), "i": (TensorProto.INT64, [2])},
        ["y"],
    )
    feeds = {"x": np.array([1, 2, 3], dtype=np.float32), "i": np.array([0, 7], dtype=np.int64)}
    with pytest.raises(IndexOutOfRangeError):
        session(model).run(None, feeds)
    out = session(model, index_mode="clamp").run(None, feeds)
    assert out[0].tolist() == [1.0, 3.0]


def test_duplicate_scatter_writes_are_recorded() -> None:
    model = make_model(
        [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="s", axis=0)],
        {"x": (TensorProto.FLOAT, [4]), "i": (TensorProto.INT64, [3]), "u": (TensorProto.FLOAT, [3])},
        ["y"],
    )
    feeds = {
        "x": np.zeros(4, np.float32),
        "i": np.array([1, 1, 2], dtype=np.int64),
        "u": np.array([5, 6, 7], dtype=np.float32),
    }
    sess = check_against_ort(model, feeds)
    assert sess.last_run_record is not None
    assert sess.last_run_record.nodes[0].duplicate_indices == 1


def test_lower_feature_level_still_matches() -> None:
    model, feeds = chain_model()
    sess = check_against_ort(model, feeds, feature_level="2_1")
    record = sess.last_run_record
    assert record is not None and record.feature_level == "DML_FEATURE_LEVEL_2_1"


def test_bad_options() -> None:
    model, _ = chain_model()
    with pytest.raises(BadInputError, match="unknown DirectML feature level"):
        InferenceSession(model, feature_level="9_9")
    with pytest.raises(BadInputError, match="index_mode"):
        InferenceSession(model, index_mode="wrap")
