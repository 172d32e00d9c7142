"""The partitioned steps' run plans (execute/plan/step_fast.py), continued: the plans against the kernel
on random indices, a session's runs from several threads, and a model with nothing to emulate."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import dmlshim
from tests.oracle import assert_same_bits, ort_run
from tests.test_partitioned_run_plans import CASES, RNG, _case, _session


def _random_case(op: str, rng: np.random.Generator) -> tuple[onnx.NodeProto, int, list[np.ndarray], int]:
    """A random node of ``op`` with inputs, and the size the indices address (for their values)."""
    rank = int(rng.integers(1, 4)) if op == "Gather" else int(rng.integers(2, 4))
    shape = tuple(int(n) for n in rng.integers(1, 6, rank))
    data = rng.standard_normal(shape).astype(rng.choice([np.float32, np.float16, np.int64]))
    axis = int(rng.integers(-rank, rank))
    attrs: dict[str, Any] = {"axis": axis}
    dim = shape[axis]
    if op == "Gather":
        indices_shape: tuple[int, ...] = tuple(int(n) for n in rng.integers(1, 4, int(rng.integers(0, 3))))
    elif op == "GatherND":
        batch = int(rng.integers(0, rank - 1))
        t = int(rng.integers(1, rank - batch + 1))
        attrs = {"batch_dims": batch}
        indices_shape = (*shape[:batch], int(rng.integers(1, 4)), t)
        dim = min(shape[batch : batch + t])
    elif op == "ScatterND":
        t = int(rng.integers(1, rank + 1))
        attrs = {}
        indices_shape = (int(rng.integers(1, 5)), t)
        dim = min(shape[:t])
    else:  # the elementwise ones: indices no longer than the data on any axis
        indices_shape = tuple(int(rng.integers(1, n + 1)) for n in shape)
        if op == "GatherElements":
            indices_shape = tuple(
                n if k != axis % rank else int(rng.integers(1, 6)) for k, n in enumerate(shape)
            )
    indices = np.zeros(indices_shape, np.int64)
    inputs = [data, indices]
    if op == "ScatterND":
        inputs.append(rng.standard_normal(indices_shape[:-1] + shape[indices_shape[-1] :]).astype(data.dtype))
    elif op.startswith("Scatter"):
        inputs.append(rng.standard_normal(indices_shape).astype(data.dtype))
    node = helper.make_node(op, ["d", "i", "u"][: len(inputs)], ["y"], name="n", **attrs)
    return node, 10 if op == "Scatter" else 13, inputs, dim


@pytest.mark.parametrize("op", sorted(CASES))
def test_run_plans_against_the_kernel_on_random_indices(op: str) -> None:
    """A plan answers exactly what the kernel answers (output bits, duplicate writes, negative flag) or
    gives the run to it; it never answers a run the kernel refuses (out of range)."""
    from dmlshim.errors import IndexOutOfRangeError as KernelIndexError
    from dmlshim.execute.plan.step_fast import fast_run
    from dmlshim.kernels.indices import has_negative
    from dmlshim.translate import TensorInfo, run_translation, translate_node
    from dmlshim.translate.plan import elem_type_of

    rng = np.random.default_rng(sum(map(ord, op)))
    answered = refused = 0
    for _ in range(40):
        node, opset, inputs, dim = _random_case(op, rng)
        infos = [TensorInfo(a.shape, elem_type_of(a.dtype)) for a in inputs]
        translation = translate_node(node, opset, infos, dmlshim.FeatureLevel.FL_5_0)
        plan = fast_run(
            op, {a.name: helper.get_attribute_value(a) for a in node.attribute}, inputs, translation
        )
        if plan is None:
            continue
        for low, high in ((0, dim), (-dim, dim), (-dim - 2, dim + 2)):
            arrays = [inputs[0], rng.integers(low, high, inputs[1].shape), *inputs[2:]]
            if op == "GatherND" or op == "ScatterND":  # per component: its own dimension
                arrays[1] = np.clip(arrays[1], -dim - 1, dim)
            done = plan(arrays)
            try:
                result = run_translation(translation, arrays)
            except KernelIndexError:
                assert done is None
                refused += 1
                continue
            if done is None:
                continue
            output, duplicates, negative = done
            assert output.dtype == result.output.dtype and output.shape == result.output.shape
            assert output.tobytes() == result.output.tobytes()
            assert duplicates == result.duplicate_indices and negative == has_negative(arrays[1])
            answered += 1
    assert answered >= 20 and refused >= 5, (answered, refused)


def _plain_model(ir_version: int = 8, overridable: bool = False) -> onnx.ModelProto:
    """Reshape(x + bias, shape): nothing to emulate; a fed shape onnxruntime refuses fails at run time."""
    inputs = [
        helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n"]),
        helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [2]),
    ]
    bias = helper.make_tensor("bias", onnx.TensorProto.FLOAT, [1], [0.5])
    if overridable:
        inputs.append(helper.make_tensor_value_info("bias", onnx.TensorProto.FLOAT, [1]))
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["y"])],
        "plain",
        inputs,
        [onnx.ValueInfoProto(name="y")],
        [bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir_version)


@pytest.mark.parametrize("overridable", [False, True])
def test_a_model_with_nothing_to_emulate_after_steady_runs(overridable: bool) -> None:
    model = _plain_model(overridable=overridable)
    x = RNG.standard_normal(12).astype(np.float32)
    feeds = {"x": x, "shape": np.array([3, 4])}
    bad = {"x": x, "shape": np.array([5, 4])}
    with pytest.raises(Exception) as theirs:  # onnxruntime refuses it too
        ort_run(model, bad)
    with pytest.raises(dmlshim.DmlShimError) as fresh:
        dmlshim.InferenceSession(model.SerializeToString()).run(None, bad)
    session = dmlshim.InferenceSession(model.SerializeToString())
    first = None
    for _ in range(4):
        got = session.run(None, feeds)
        assert_same_bits(got, ort_run(model, feeds))
        assert session.last_run_record.path == "onnxruntime cpu"
        assert first is None or not np.shares_memory(got[0], first[0])
        first = got
    with pytest.raises(dmlshim.DmlShimError) as steady:
        session.run(None, bad)
    assert type(steady.value) is type(fresh.value) and str(steady.value) == str(fresh.value)
    assert "5" in str(theirs.value) and "Reshape" in str(steady.value)
    other = {"x": RNG.standard_normal(8).astype(np.float32), "shape": np.array([2, -1])}
    assert_same_bits(session.run(None, other), ort_run(model, other))
    if overridable:
        over = dict(feeds, bias=np.array([-2.0], np.float32))
        assert_same_bits(session.run(None, over), ort_run(model, over))
        assert_same_bits(session.run(None, feeds), ort_run(model, feeds))


def test_one_session_from_several_threads() -> None:
    """Threads running one session with feeds of other shapes and signs: each step's plan is its last
    key's, swapped between threads' runs; every run stays onnxruntime's, with its own record."""
    model, feeds = _case("GatherND")
    variants = [
        feeds,
        dict(feeds, indices=np.abs(feeds["indices"]) % 4),
        dict(feeds, data=np.concatenate([feeds["data"]] * 2, axis=2)),  # (4, 5, 12)
        dict(feeds, indices=feeds["indices"][:, :1].copy()),
    ]
    wants = [ort_run(model, v) for v in variants]
    session = _session(model)
    failures: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(60):
                k = int(rng.integers(len(variants)))
                got = session.run(None, variants[k])
                assert_same_bits(got, wants[k])
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch within runs, not only between them
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures[0]
    for variant, want in zip(variants, wants, strict=True):
        assert_same_bits(session.run(None, variant), want)
        negative = bool((variant["indices"] < 0).any())
        assert session.last_run_record.nodes[0].negative_indices == negative


@pytest.mark.parametrize("op", ["Gather", "GatherND", "ScatterElements", "ScatterND"])
def test_nan_payloads_and_signed_zeros_cross_a_plan_bit_for_bit(op: str) -> None:
    model, feeds = _case(op)
    bits = np.array([0x7FC12345, 0xFFA00001, 0x80000000, 0x7F800000], np.uint32)  # NaNs, -0.0, inf
    data = np.resize(bits, feeds["data"].size).view(np.float32).reshape(feeds["data"].shape)
    odd = dict(feeds, data=data)
    if "updates" in feeds:
        odd["updates"] = (
            np.resize(bits[::-1], feeds["updates"].size).view(np.float32).reshape(feeds["updates"].shape)
        )
    session = _session(model)
    for _ in range(3):  # the kernel's run, then the plan's
        assert_same_bits(session.run(None, odd), ort_run(model, odd))
