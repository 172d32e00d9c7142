"""Models, sessions and checks shared by the hostile given-scatter tests (test_scatter_given_hostile_h47.py,
test_scatter_given_sessions_h47.py): every case runs a default session and a DMLSHIM_FULL_CHECK=1 session
(the authority for the record) on the same feeds."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dmlshim
from dmlshim.execute.plan.steps import NOTE_UNTOUCHED_GIVEN
from dmlshim.execute.proofs.gather_given import NOTE_GATHER_GIVEN
from tests.oracle import IR_VERSION, ort_run
from tests.oracle import assert_same_bits as same_bits_as

TAKEN = frozenset((NOTE_GATHER_GIVEN, NOTE_UNTOUCHED_GIVEN))
H, L, D = 4, 256, 128  # a float32 [H, L, D] output is 512 KiB: the size the check verifies in place
NUMERIC = {
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.INT8,
    TensorProto.INT32,
    TensorProto.INT64,
}


def one_thread() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return so


def scatter_model(
    op: str,
    elem: int,
    shapes: Sequence[Sequence[int | str]],
    attrs: Mapping[str, Any] | None = None,
    *,
    opset: int = 18,
    index_elem: int = TensorProto.INT64,
    extra: Sequence[onnx.NodeProto] = (),
    extra_inputs: Sequence[onnx.ValueInfoProto] = (),
    outputs: Sequence[str] = ("present", "total"),
) -> onnx.ModelProto:
    """``data -> Neg (Identity for types Neg refuses) -> scatter -> Identity``: an onnxruntime node before
    the scatter, so that the whole-model check answers; the scatter's output is a graph output and read on."""
    data_shape, idx_shape, upd_shape = shapes
    first = "Neg" if elem in NUMERIC else "Identity"
    nodes = [
        helper.make_node(first, ["data"], ["past"], name="before"),
        helper.make_node(op, ["past", "idx", "upd"], ["present"], name="update", **dict(attrs or {})),
        helper.make_node("Identity", ["present"], ["total"], name="after"),
        *extra,
    ]
    graph = helper.make_graph(
        nodes,
        "hostile",
        [
            helper.make_tensor_value_info("data", elem, list(data_shape)),
            helper.make_tensor_value_info("idx", index_elem, list(idx_shape)),
            helper.make_tensor_value_info("upd", elem, list(upd_shape)),
            *extra_inputs,
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def session_pair(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[Any, Any]:
    """A default session and a DMLSHIM_FULL_CHECK=1 session of ``model``."""
    default = dmlshim.InferenceSession(model, sess_options=one_thread(), **kwargs)
    with monkeypatch.context() as m:
        m.setenv("DMLSHIM_FULL_CHECK", "1")
        full = dmlshim.InferenceSession(model, sess_options=one_thread(), **kwargs)
    return default, full


def untaken(record: Any) -> Any:
    nodes = tuple(
        dataclasses.replace(n, notes=tuple(x for x in n.notes if x[0] not in TAKEN)) for n in record.nodes
    )
    return dataclasses.replace(record, nodes=nodes)


def scatter_node(session: Any) -> Any:
    (node,) = [n for n in session.last_run_record.nodes if n.name == "update"]
    return node


def note_codes(node: Any) -> list[str]:
    return [code for code, _ in node.notes]


def run_pair(pair: tuple[Any, Any], model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> Any:
    """Both sessions on ``feeds``: outputs onnxruntime's bit for bit, the same path, records equal but for
    the taken-from-onnxruntime notes. The default session's scatter record."""
    want = ort_run(model, feeds)
    default, full = pair
    for session in pair:
        same_bits_as(session.run(None, dict(feeds)), want)
    assert default.last_run_record.path == full.last_run_record.path == "whole-model check"
    assert untaken(default.last_run_record) == untaken(full.last_run_record)
    assert not any(TAKEN & set(note_codes(n)) for n in full.last_run_record.nodes)
    return scatter_node(default)


def index_array(positions: Sequence[int], dtype: Any = np.int64) -> np.ndarray:
    """ScatterElements indices [H, len(positions), D] along axis 1 (a KV-cache update)."""
    line = np.asarray(positions, dtype)[None, :, None]
    return np.ascontiguousarray(np.broadcast_to(line, (H, len(positions), D)))


def cache_feeds(positions: Sequence[int], seed: int, length: int = L) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "data": rng.standard_normal((H, length, D)).astype(np.float32),
        "idx": index_array(positions),
        "upd": rng.standard_normal((H, len(positions), D)).astype(np.float32),
    }


# --- the proof itself: the indices decide exactly when the targets are distinct ----------------------


def targets_by_definition(op: str, data_shape: tuple[int, ...], idx: np.ndarray, axis: int) -> list[Any]:
    """Every write's target as the ONNX definition spells it (negative indices wrapped), one by one."""
    if op == "ScatterND":
        k = idx.shape[-1]
        tuples = idx.reshape(-1, k) if idx.size else np.zeros((int(np.prod(idx.shape[:-1])), k), np.int64)
        return [tuple(int(c) % data_shape[d] for d, c in enumerate(t)) for t in tuples]
    targets = []
    for where in itertools.product(*(range(n) for n in idx.shape)):
        at = list(where)
        at[axis] = int(idx[where]) % data_shape[axis]
        targets.append(tuple(at))
    return targets
