"""Naming the culprit when onnxruntime refuses a model: an operator no one defines, or indices of a type
the gather/scatter op does not take."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from ..errors import BadModelError
from ..graph import node_path, subgraph_prefix, subgraphs, walk_nodes
from .graph_columns import flat_ops

# The exception types an onnxruntime call raises.
ORT_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError)
try:  # onnxruntime's own exception types do not derive from RuntimeError.
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state_module

    ORT_ERRORS = (
        *ORT_ERRORS,
        *(
            getattr(ort_state_module, n)
            for n in (
                "Fail",
                "InvalidArgument",
                "RuntimeException",
                "InvalidGraph",
                "NotImplemented",
                "NoSuchFile",
                "EPFail",
                "InvalidProtobuf",
                "ModelLoaded",
                "NoModel",
                "EngineError",
            )
            if hasattr(ort_state_module, n)
        ),
    )
except ImportError:  # pragma: no cover - onnxruntime always ships it
    pass

__all__ = [
    "GATHER_SCATTER_INDEX_TYPES",
    "UnknownOperator",
    "ort_load_error",
    "type_name",
    "unknown_operators",
]

# Domains whose operators onnxruntime implements without an onnx schema being registered in Python.
_ORT_DOMAINS = ("com.microsoft", "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc")

GATHER_SCATTER_INDEX_TYPES: dict[str, tuple[int, ...]] = {
    "Gather": (TensorProto.INT32, TensorProto.INT64),
    "GatherElements": (TensorProto.INT32, TensorProto.INT64),
    "Scatter": (TensorProto.INT32, TensorProto.INT64),
    "ScatterElements": (TensorProto.INT32, TensorProto.INT64),
    "GatherND": (TensorProto.INT64,),
    "ScatterND": (TensorProto.INT64,),
}


@dataclass(frozen=True)
class UnknownOperator:
    """A node whose (domain, op_type) neither ONNX, onnxruntime nor a model-local function defines."""

    node: str
    domain: str
    op_type: str

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


def unknown_operators(model: onnx.ModelProto) -> list[UnknownOperator]:
    """Nodes whose operator is defined nowhere dmlshim or onnxruntime can find it, in graph order."""
    # a local function of the ONNX domain defines nothing to onnxruntime (see model/inline.py)
    local = {(f.domain, f.name) for f in model.functions if f.domain not in ("", "ai.onnx")}
    known: dict[tuple[str, str], bool] = {}
    found: list[UnknownOperator] = []
    ops = flat_ops(model.graph)
    if ops is not None and len(ops[0]) * len(ops[1]) <= _PAIRS_MAX:
        # One graph: every node's (domain, op) is among these pairs; all defined, none is unknown.
        op_types, domains = ops
        pairs = {("" if d == "ai.onnx" else d, op) for d in domains for op in op_types}
        if all(_known(key, local) for key in pairs):
            return found

    def visit(graph: onnx.GraphProto, prefix: str) -> None:
        # Names are spelled out only for unknown operators and for the owners of subgraphs.
        for index, node in enumerate(graph.node):
            domain = "" if node.domain == "ai.onnx" else node.domain
            key = (domain, node.op_type)
            defined = known.get(key)
            if defined is None:
                defined = known[key] = _known(key, local)
            if not defined:
                found.append(UnknownOperator(node_path(prefix, node, index), domain, node.op_type))
            if node.attribute:
                for attr_name, sub in subgraphs(node):
                    visit(sub, subgraph_prefix(node_path(prefix, node, index), attr_name))

    visit(model.graph, "")
    return found


_PAIRS_MAX = 256
"""Most (domain, op) pairs :func:`unknown_operators` looks up before it walks the nodes instead."""


def _known(key: tuple[str, str], local: set[tuple[str, str]]) -> bool:
    return key in local or key[0] in _ORT_DOMAINS or _defined(*key) or key in _ort_schemas()


@functools.cache
def _ort_schemas() -> frozenset[tuple[str, str]]:
    """The (domain, op) pairs onnxruntime registers schemas for beyond onnx's: in the ONNX domain itself
    too, e.g. ``SimplifiedLayerNormalization``, which onnxruntime-genai's model builder writes there, and
    the operators ONNX removed that onnxruntime still runs (``Affine``, ``Crop``, ``Scale`` ...)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state

        schemas = state.get_all_operator_schema()
    except Exception:  # a build without the schema export: onnx's registry and the domains above
        return frozenset()
    return frozenset(("" if s.domain == "ai.onnx" else s.domain, s.name) for s in schemas)


def _defined(domain: str, op_type: str) -> bool:
    try:
        return bool(onnx.defs.has(op_type, domain))
    except Exception:  # onnx's binding raises on strange strings; treat as unknown
        return False


def _value_types(graph: onnx.GraphProto) -> dict[str, int]:
    types: dict[str, int] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type:
            types[vi.name] = int(vi.type.tensor_type.elem_type)
    for t in graph.initializer:
        types[t.name] = int(t.data_type)
    return types


def type_name(elem_type: int) -> str:
    try:
        return f"tensor({str(TensorProto.DataType.Name(elem_type)).lower()})"
    except ValueError:
        return f"element type {elem_type}"


REGISTER_HOW = "in Python, SessionOptions.register_custom_ops_library(PATH) given to dmlshim.InferenceSession"
"""How a custom op's library is registered (the command line registers none)."""

REGISTER_HINT = (
    f"; a custom operator needs the library that defines it registered with onnxruntime: {REGISTER_HOW} "
    "(the command line registers none; dmlshim inspect without --inputs reports on the model as it is)"
)
"""The end of the error for an operator nothing defines."""


LOWERED_HOW = (
    "it looks like a model `dmlshim lower` wrote: run the source model with --engine customop "
    "(Python: engine='customop'), or create the onnxruntime session with "
    "dmlshim.execute.engines.custom_op.session_options_with_custom_ops() (docs/engines.md)"
)
"""What to do with a model ``dmlshim lower`` wrote, whose custom ops only dmlshim registers."""


def is_lowered_op(domain: str, op_type: str) -> bool:
    """Whether ``domain.op_type`` is one of the custom ops ``dmlshim lower`` writes."""
    from ..execute.custom_ops.types import CUSTOM_DOMAIN

    return domain == CUSTOM_DOMAIN and op_type.startswith("Dml")


def _lowered_hint(domain: str, op_type: str) -> str:
    return f"; {LOWERED_HOW}" if is_lowered_op(domain, op_type) else REGISTER_HINT


def ort_load_error(
    model: onnx.ModelProto, what: str, exc: BaseException, *, path: str | None = None
) -> BadModelError:
    """The BadModelError for onnxruntime refusing to load ``model``, naming the culprit node if it can.

    Args:
        model: the model onnxruntime was given.
        what: how to call it in the message ("the model", "CPU partition 0 ...").
        exc: onnxruntime's exception.
    """
    ort_text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    unknown = unknown_operators(model)
    if unknown:
        u = unknown[0]
        others = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        return BadModelError(
            f"operator {u.qualified} of domain {u.domain or 'ai.onnx'!r} is not defined by ONNX, onnxruntime "
            f"or a function of the model{others}, so onnxruntime cannot load {what} ({ort_text})"
            f"{_lowered_hint(u.domain, u.op_type)}",
            node=u.node,
            op_type=u.qualified,
            value=u.domain,
            path=path,
            rule="every operator must come from ai.onnx, ai.onnx.ml, com.microsoft or a model-local function",
        )
    types = _value_types(model.graph)
    for name, node in walk_nodes(model.graph):
        allowed = GATHER_SCATTER_INDEX_TYPES.get(node.op_type)
        if allowed is None or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        elem = types.get(node.input[1])
        if elem is not None and elem not in allowed:
            want = " or ".join(type_name(a) for a in allowed)
            return BadModelError(
                f"indices {node.input[1]!r} are {type_name(elem)}; ONNX {node.op_type} takes {want}, so "
                f"onnxruntime cannot load {what} ({ort_text})",
                node=name,
                op_type=node.op_type,
                tensor=node.input[1],
                value=type_name(elem),
                path=path,
                rule=f"{node.op_type} indices must be {want}",
            )
    return _refusal(model, what, exc, path)


# onnxruntime names the node it refuses as ``In Node, ("name", OpType, "domain", since_version)``.
_ORT_NODE = re.compile(r'In Node, \("(?P<name>[^"]*)", (?P<op>[^,]+), "(?P<domain>[^"]*)", -?\d+\)')
_DEPRECATED = re.compile(r"Op registered for (?P<op>\S+) is deprecated in domain_version of (?P<v>\d+)")


def _one_paragraph(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _refusal(model: onnx.ModelProto, what: str, exc: BaseException, path: str | None) -> BadModelError:
    """onnxruntime's refusal as one paragraph, naming the node (as dmlshim reports it) and the rule."""
    text = _one_paragraph(exc)
    found = _ORT_NODE.search(text)
    node: str | None = None
    op: str | None = None
    if found is not None:
        op = found["op"].strip()
        wanted = found["name"]
        for name, candidate in walk_nodes(model.graph):
            if candidate.op_type == op and (not wanted or candidate.name == wanted):
                node = name
                break
    deprecated = _DEPRECATED.search(text)
    if deprecated is not None:
        op = deprecated["op"]
        rule = (
            f"an operator ONNX deprecated is refused from the opset that deprecates it ({op} is gone from "
            f"opset {deprecated['v']} on{'; use ScatterElements' if op == 'Scatter' else ''})"
        )
        named = re.search(r"Name: (\S*) OpType: " + re.escape(op), text)
        node = next(
            (
                name
                for name, n in walk_nodes(model.graph)
                if n.op_type == op and (named is None or n.name == named[1])
            ),
            node,
        )
        return BadModelError(
            f"onnxruntime cannot load {what}: {op} does not exist at ai.onnx opset "
            f"{deprecated['v']} ({text})",
            node=node,
            op_type=op,
            value=int(deprecated["v"]),
            path=path,
            rule=rule,
        )
    return BadModelError(
        f"onnxruntime cannot load {what}: {text}",
        node=node,
        op_type=op,
        path=path,
        rule="a model loads exactly when onnxruntime's own session creation accepts it",
    )
