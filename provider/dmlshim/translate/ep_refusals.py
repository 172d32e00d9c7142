"""Models onnxruntime-directml refuses at session creation, as data: each row is a refusal seen on real
DirectML (``docs/directml-linux.md``), with the node form that causes it.

These are nodes of any op type (not only gather/scatter, and of the ``com.microsoft`` domain too) whose
valid form the DirectML provider accepts at partitioning and then fails to build a kernel for, so the whole
session fails, with or without CPU fallback. ``inspect``'s "onnxruntime-directml today" verdict is NO for
such a model and names the node; the ``directml`` engine on Linux refuses a model holding a form marked
``upfront`` before loading it (:func:`upfront_refusal_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import constant_node_value, op_types_among
from ..text import names_text


@dataclass(frozen=True)
class GraphScope:
    """The graph a node is in, as the matchers read it.

    Attributes:
        graph: the graph (the model's, or a subgraph).
        owner: the node whose attribute ``graph`` is (a Loop, If, Scan), None for the model's graph.
        constants: names to the values of the graph's initializers and Constant outputs.
        producers: names to the nodes of the graph computing them.
        consumers: names to the nodes of the graph reading them.
        owner_constants: the owner's inputs whose values are constants of the enclosing graphs (a feed
            cannot replace them: initializers that are also graph inputs are left out).
    """

    graph: onnx.GraphProto
    owner: onnx.NodeProto | None
    constants: Mapping[str, np.ndarray]
    producers: Mapping[str, onnx.NodeProto]
    consumers: Mapping[str, list[onnx.NodeProto]]
    owner_constants: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class EpRefusal:
    """One form of node the DirectML provider refuses.

    Attributes:
        code: reason code (``EP_REFUSES_*``).
        op_type: the ONNX op.
        since: the first ai.onnx opset the form exists in.
        form: the node form, in words.
        seen: what onnxruntime-directml said on real DirectML (version, message).
        when: ``"session creation"`` (the session fails) or ``"run"`` (the process dies running it).
        matches: ``(node, scope) -> bool``, ``scope`` the node's graph as a :class:`GraphScope`.
        domain: the op's domain (``""`` for ai.onnx); ``since`` is an opset of this domain.
        upfront: the form fails on every run whatever the shapes and values, so the ``directml`` engine
            on Linux (whose DirectML and onnxruntime versions are the ones it was seen on) refuses the
            model before loading it instead of starting the host to meet the same error.
    """

    code: str
    op_type: str
    since: int
    form: str
    seen: str
    matches: Callable[[onnx.NodeProto, GraphScope], bool]
    when: str = "session creation"
    domain: str = ""
    upfront: bool = False


def _attr_int(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _reshape_allowzero_minus_one(node: onnx.NodeProto, scope: GraphScope) -> bool:
    constants = scope.constants
    if _attr_int(node, "allowzero", 0) != 1 or len(node.input) < 2:
        return False
    shape = constants.get(node.input[1])
    if shape is not None:
        return bool((np.asarray(shape) == -1).any())
    # A shape computed by a Concat of which one piece is a constant holding -1 (torch.export's view()).
    concat = scope.producers.get(node.input[1])
    if concat is None or concat.op_type != "Concat":
        return False
    return any(i in constants and bool((np.asarray(constants[i]) == -1).any()) for i in concat.input)


def _scatter_nd_empty_index_tuple(node: onnx.NodeProto, scope: GraphScope) -> bool:
    indices = scope.constants.get(node.input[1]) if len(node.input) > 1 else None
    return indices is not None and np.asarray(indices).ndim >= 1 and np.asarray(indices).shape[-1] == 0


def _gemm_without_c_then_tanh(node: onnx.NodeProto, scope: GraphScope) -> bool:
    if len([i for i in node.input if i]) != 2 or not node.output:
        return False
    readers = scope.consumers.get(node.output[0], [])
    return len(readers) == 1 and readers[0].op_type == "Tanh"


def _static_dims(value: onnx.ValueInfoProto) -> bool:
    """Whether ``value`` is declared a tensor of known rank whose every dimension is a number."""
    tensor = value.type.tensor_type
    return (
        value.type.HasField("tensor_type")
        and tensor.HasField("shape")
        and all(d.HasField("dim_value") for d in tensor.shape.dim)
    )


def _concat_grows_static_loop_state(node: onnx.NodeProto, scope: GraphScope) -> bool:
    # Loop body: inputs (iteration, cond, state...), outputs (cond, state..., scan outputs...).
    if scope.owner is None or scope.owner.op_type != "Loop" or not node.output:
        return False
    # A constant trip count of 0 or 1: the state never grows twice; one iteration runs right on DirectML
    trips = scope.owner_constants.get(scope.owner.input[0]) if scope.owner.input else None
    if trips is not None and np.asarray(trips).size == 1 and int(np.asarray(trips).reshape(())) <= 1:
        return False
    body = scope.graph
    return any(
        state.name in node.input and _static_dims(state) and body.output[1 + k].name == node.output[0]
        for k, state in enumerate(body.input[2 : 1 + len(body.output)])
    )


def _input(node: onnx.NodeProto, index: int) -> str:
    return node.input[index] if len(node.input) > index else ""


def _gqa_packed_qkv(node: onnx.NodeProto, scope: GraphScope) -> bool:
    # GroupQueryAttention inputs: query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
    # cos_cache, sin_cache, ...; key and value left out: query holds Q, K and V packed on its last axis.
    return not (_input(node, 1) and _input(node, 2))


def _past_length_may_be_nonzero(scope: GraphScope, name: str) -> bool:
    """Whether the past tensor ``name`` ([batch, kv_num_heads, past_sequence_length, head_size]) may hold
    a position: its past length is not a declared or constant 0."""
    if name in scope.constants:
        shape = np.asarray(scope.constants[name]).shape
        return len(shape) < 3 or shape[2] != 0
    for value in (*scope.graph.input, *scope.graph.value_info):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            dims = value.type.tensor_type.shape.dim
            return len(dims) < 3 or not (dims[2].HasField("dim_value") and dims[2].dim_value == 0)
    return True


def _gqa_separate_past(node: onnx.NodeProto, scope: GraphScope) -> bool:
    past = _input(node, 3)
    return not _gqa_packed_qkv(node, scope) and bool(past) and _past_length_may_be_nonzero(scope, past)


def _gqa_separate_rotary(node: onnx.NodeProto, scope: GraphScope) -> bool:
    return not _gqa_packed_qkv(node, scope) and _attr_int(node, "do_rotary", 0) == 1


EP_REFUSALS: tuple[EpRefusal, ...] = (
    EpRefusal(
        code="EP_REFUSES_RESHAPE_ALLOWZERO",
        op_type="Reshape",
        since=14,
        form="Reshape with allowzero=1 and a -1 in its shape (a constant, or a Concat with a constant -1); "
        "valid "
        "ONNX (only 0 and -1 together are invalid), which onnxruntime CPU runs",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24: with static input shapes session creation fails "
        "(MLOperatorAuthorImpl.cpp(2853) 80070057, tiny_decoder_step); with dynamic ones the first run fails "
        "(MLOperatorAuthorImpl.cpp(2597) 8007023E, the torch.export models of onnx_models/real/); with or "
        "without CPU fallback",
        when="session creation or first run",
        matches=_reshape_allowzero_minus_one,
    ),
    EpRefusal(
        code="EP_CRASHES_SCATTERND_EMPTY_INDEX_TUPLE",
        op_type="ScatterND",
        since=11,
        form="ScatterND whose constant indices have a last dimension of 0 (each update replaces the whole "
        "data tensor; onnxruntime CPU runs it)",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24 (ScatterND placed on CPUExecutionProvider, the "
        "rest on "
        "DML): the session is created, then the first run kills the process with an integer division by "
        "zero inside onnxruntime.dll (onnx_models/ecosystem/hw_scatternd_empty_index.onnx)",
        matches=_scatter_nd_empty_index_tuple,
        when="run",
    ),
    EpRefusal(
        code="EP_REFUSES_GEMM_NO_C_TANH",
        op_type="Gemm",
        since=11,
        form="Gemm without its optional C input whose output goes only to a Tanh (BERT's pooler from "
        "torch.export): the provider fuses the two into DmlFusedGemm, whose schema needs C",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24: session creation fails, INVALID_GRAPH "
        '"(DmlFusedGemm) has input size 2 not in range [min=3, max=3]" (onnx_models/real/bert_dynamo.onnx)',
        matches=_gemm_without_c_then_tanh,
    ),
    EpRefusal(
        code="EP_FAILS_CONCAT_GROWING_STATIC_LOOP_STATE",
        op_type="Concat",
        since=1,
        form="Concat in a Loop body that reads a loop-carried input declared with a fully static shape (the "
        "shape of its initial value, e.g. [0,64,64]) and whose output is that state's next value, so the "
        "state grows past its declared shape (torchscript's list append); onnxruntime CPU runs it",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24, the Concat on DML (the Loop on CPU in maskrcnn): "
        "with another Concat input of dynamic shape the first run fails at the Loop's second iteration "
        "(MLOperatorAuthorImpl.cpp(2853) 80070057, Concat_1558 of onnx_models/real/maskrcnn_torchscript; "
        "the same with a non-empty initial state); with every input shape static the run succeeds with a "
        "wrong result, the state never grows (shape [1,4,4] where onnxruntime CPU gives [2,4,4] or [3,4,4] "
        "after two or three iterations); a Loop of one iteration runs right (a constant trip count of 0 "
        "or 1 is not matched); a state declared with symbolic dimensions runs right",
        matches=_concat_grows_static_loop_state,
        when="run",
    ),
    EpRefusal(
        code="EP_REFUSES_GQA_PACKED_QKV",
        op_type="GroupQueryAttention",
        domain="com.microsoft",
        since=1,
        form="com.microsoft GroupQueryAttention with packed QKV (its optional key and value inputs left "
        "out, query holding Q, K and V: onnxruntime-genai's CPU/CUDA builds); onnxruntime CPU runs it, the "
        "DirectML provider's kernel needs query, key and value as three 3-D tensors "
        "(DmlOperatorGroupQueryAttention.cpp)",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24: the session is created, the first run fails "
        "(MLOperatorAuthorImpl.cpp(2818) 80070057 Invalid parameter), also with static shapes, with or "
        "without do_rotary, for 1 or 3 new tokens and with CPU fallback on "
        "(onnx_models/ecosystem/genai_llama_gqa.onnx; one-node models in "
        "tests/test_genai_gqa_directml51.py); the same node with key and value given runs",
        matches=_gqa_packed_qkv,
        when="first run",
        upfront=True,
    ),
    EpRefusal(
        code="EP_IGNORES_GQA_SEPARATE_PAST",
        op_type="GroupQueryAttention",
        domain="com.microsoft",
        since=1,
        form="com.microsoft GroupQueryAttention with key and value given and a past_key input whose past "
        "length may be above 0: the DirectML provider's kernel does not read past_key/past_value (it "
        "expects them to share the present buffers, as onnxruntime-genai binds them on DirectML, and treats "
        "a step of more than one new token as having no past); onnxruntime CPU attends to the past",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24, one node, 4 past positions: the run succeeds "
        "with wrong values (output off by up to 3.4; present_key/present_value hold no past position of "
        "the fed past; with 1 new token its own position is right); with a past of length 0 it equals "
        "onnxruntime CPU (2.4e-7)",
        matches=_gqa_separate_past,
        when="run (wrong values, no error)",
    ),
    EpRefusal(
        code="EP_IGNORES_GQA_ROTARY",
        op_type="GroupQueryAttention",
        domain="com.microsoft",
        since=1,
        form="com.microsoft GroupQueryAttention with key and value given and do_rotary=1: the DirectML "
        "provider's kernel (DirectML's MULTIHEAD_ATTENTION1) does not apply the rotary embedding "
        "(onnxruntime-genai's builder leaves rotary out of GQA for DirectML); onnxruntime CPU applies it",
        seen="DirectML 1.15.4 / onnxruntime-directml 1.24, one node, no past: the run succeeds with wrong "
        "values for 3 new tokens (present_key off by up to 1.35, output by 0.39, present_value equal: "
        "the keys are not rotated); 1 new token at position 0 (where the rotation is the identity) equals "
        "onnxruntime CPU",
        matches=_gqa_separate_rotary,
        when="run (wrong values, no error)",
    ),
)
"""Every refusal seen on real DirectML (a sweep of onnx_models/ on DirectML 1.15.4)."""


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL and init.data_type != onnx.TensorProto.STRING:
            values[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        value = constant_node_value(node)
        if value is not None and value.dtype != object:
            values[node.output[0]] = value
    return values


def constant_value(enclosing: Sequence[onnx.GraphProto], name: str) -> np.ndarray | None:
    """The value of ``name`` as a constant of the innermost of ``enclosing`` (outermost first) that
    defines it; None when that graph computes it, takes it as an input, or it is in no graph."""
    for graph in reversed(enclosing):
        if any(v.name == name for v in graph.input) or any(name in n.output and n.op_type != "Constant"
                                                           for n in graph.node):  # fmt: skip
            return None
        for init in graph.initializer:
            if init.name == name:
                return _constants(onnx.GraphProto(initializer=[init])).get(name)
        for node in graph.node:
            if node.op_type == "Constant" and name in node.output:
                return _constants(onnx.GraphProto(node=[node])).get(name)
    return None


def constant_values(graph: onnx.GraphProto) -> Callable[[str], np.ndarray | None]:
    """``lambda name: constant_value((graph,), name)``, answered from tables made in one walk of the graph
    at the first question (each answer computed once), for a caller asking about many names: a graph
    input or the output of a node other than a Constant is None; else the first initializer of that name
    gives the value, else the first Constant giving it."""
    tables: list[Any] = []
    answers: dict[str, np.ndarray | None] = {}

    def value(name: str) -> np.ndarray | None:
        if name in answers:
            return answers[name]
        if not tables:
            tables.extend(_constant_tables(graph))
        computed, initializers, constants = tables
        answer = None
        if name not in computed:
            init = initializers.get(name)
            if init is not None:
                answer = _constants(onnx.GraphProto(initializer=[init])).get(name)
            elif name in constants:
                answer = _constants(onnx.GraphProto(node=[constants[name]])).get(name)
        answers[name] = answer
        return answer

    return value


def _constant_tables(
    graph: onnx.GraphProto,
) -> tuple[set[str], dict[str, onnx.TensorProto], dict[str, onnx.NodeProto]]:
    """The names a graph computes or takes as inputs, its first initializer and first Constant by name."""
    computed = {v.name for v in graph.input}
    constants: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        if node.op_type != "Constant":
            computed.update(node.output)
        else:
            for out in node.output:
                constants.setdefault(out, node)
    initializers: dict[str, onnx.TensorProto] = {}
    for init in graph.initializer:
        initializers.setdefault(init.name, init)
    return computed, initializers, constants


def _graphs(
    graph: onnx.GraphProto,
    path: str = "",
    owner: onnx.NodeProto | None = None,
    enclosing: tuple[onnx.GraphProto, ...] = (),
) -> Iterator[tuple[str, onnx.GraphProto, onnx.NodeProto | None, dict[str, np.ndarray]]]:
    """Every graph with its path, its owner, and the owner's constant inputs."""
    known = {}
    if owner is not None:
        known = {n: v for n in set(owner.input) if n and (v := constant_value(enclosing, n)) is not None}
    yield path, graph, owner, known
    for node in graph.node:
        if not node.attribute:
            continue
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                subs = [a.g]
            elif a.graphs:
                subs = list(a.graphs)
            else:
                continue
            for sub in subs:
                yield from _graphs(sub, f"{path}{node.name or node.op_type}/{a.name}/", node,
                                   (*enclosing, graph))  # fmt: skip


def _scope(
    graph: onnx.GraphProto, owner: onnx.NodeProto | None, owner_constants: dict[str, np.ndarray]
) -> GraphScope:
    producers = {out: n for n in graph.node for out in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for reader in graph.node:
        for name in reader.input:
            consumers.setdefault(name, []).append(reader)
    return GraphScope(graph, owner, _constants(graph), producers, consumers, owner_constants)


def session_refusals(model: onnx.ModelProto) -> tuple[tuple[str, EpRefusal], ...]:
    """``(node name, refusal)`` for every node of ``model`` (subgraphs included) in a refused form."""
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    found = []
    by_op: dict[str, list[EpRefusal]] = {}
    for refusal in EP_REFUSALS:
        if opsets.get(refusal.domain, 0) >= refusal.since:
            by_op.setdefault(refusal.op_type, []).append(refusal)
    if not op_types_among(model.graph, tuple(by_op)):
        return ()  # no node of a refused form's op in any graph (found from the graph's bytes: no walk)
    for path, graph, owner, owner_constants in _graphs(model.graph):
        scope: GraphScope | None = None
        for node in graph.node:
            candidates = by_op.get(node.op_type)
            if not candidates:
                continue
            domain = "" if node.domain == "ai.onnx" else node.domain
            for refusal in candidates:
                if refusal.domain != domain:
                    continue
                if scope is None:  # built only for a graph holding a node of a refused form's op
                    scope = _scope(graph, owner, owner_constants)
                if refusal.matches(node, scope):
                    found.append((path + (node.name or node.op_type), refusal))
    return tuple(found)


#: How many node names a grouped refusal lists before "and N more".
NAMED_NODES = 3


def describe_refusals(found: Sequence[tuple[str, str, str]]) -> str:
    """``(node, code, form)`` triples as one phrase per refusal form: a decoder export holds the same
    refused Reshape in every attention block, and naming the form once per node buried the nodes."""
    groups: dict[tuple[str, str], list[str]] = {}
    for node, code, form in found:
        groups.setdefault((code, form), []).append(node)
    phrases = []
    for (code, form), nodes in groups.items():
        if len(nodes) == 1:
            where = f"node {nodes[0]!r}"
        else:
            where = f"{len(nodes)} nodes ({names_text(nodes, NAMED_NODES, quote=True)})"
        phrases.append(f"{where}: {form} ({code})")
    return "; ".join(phrases)


def upfront_refusal_error(model: onnx.ModelProto) -> str | None:
    """The message refusing ``model`` before it is loaded on real DirectML (Linux stack), naming each
    node in a form marked ``upfront``, its op and why; None when the model holds none."""
    found = [(name, r) for name, r in session_refusals(model) if r.upfront]
    if not found:
        return None
    what = describe_refusals([(name, r.code, f"{r.form}; seen on {r.seen}") for name, r in found])
    return f"onnxruntime-directml cannot run this model, so it is not sent to real DirectML: {what}"
