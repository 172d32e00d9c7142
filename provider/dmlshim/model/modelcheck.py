"""The one model check every command runs (:func:`check_model`), turning hostile or broken files into
clear errors before any weight is read.

* damaged protos (:func:`check_well_formed`), unknown ir_version / opset versions, duplicate node names,
  negative dims, initializers that disagree with their declared input;
* external data checked in full without reading it (:mod:`dmlshim.fileio.external_data`);
* onnx.checker on the shape-inferred model, every onnx/protobuf exception turned into BadModelError;
* when onnxruntime refuses a model, the culprit is named (:mod:`dmlshim.model.ort_errors`).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable

import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto

from ..errors import BadModelError
from ..fileio.external_data import (
    EXTERNAL_DATA_RULE,
    ExternalRef,
    check_external_data,
    load_external_data,
)
from ..graph import all_tensors, node_path, subgraph_prefix, subgraphs
from .duplicate_initializers import has_duplicates, keep_onnxruntimes
from .last_inference import infer_shapes
from .ort_acceptance import Acceptance, ort_refusal, probe_for, start_ort_acceptance
from .ort_errors import (
    UnknownOperator,
    ort_load_error,
    type_name,
    unknown_operators,
)
from .ort_outputs import OrtOutputs, outputs_need_onnxruntime
from .weightless import without_weights
from .wellformed import RAW_ITEMSIZE, check_well_formed

__all__ = [
    "EXTERNAL_DATA_RULE",
    "UnknownOperator",
    "all_tensors",
    "check_model",
    "check_well_formed",
    "load_external_data",
    "ort_load_error",
    "unknown_operators",
]

logger = logging.getLogger(__name__)


# onnx's C++ checker and shape inference raise their own errors, and also ValueError (UnicodeDecodeError
# on names that are not UTF-8, a model above 2 GiB), TypeError, RuntimeError, or protobuf's DecodeError
# (nesting deeper than protobuf's limit of 100, e.g. If inside If 32 deep) on damaged or extreme protos.
ONNX_ERRORS: tuple[type[Exception], ...] = (
    onnx.checker.ValidationError,
    onnx.shape_inference.InferenceError,
    ValueError,
    TypeError,
    RuntimeError,
    RecursionError,
    DecodeError,
    EncodeError,
)


IR_VERSION_RULE = "the model's ir_version must be one onnx and onnxruntime implement"
OPSET_RULE = "every opset the model imports must exist"


def _check_versions(model: onnx.ModelProto, path: str | None) -> None:
    """An ir_version or ai.onnx opset newer than the installed onnx knows (the remedy is added by
    :func:`_version_remedy`, once onnxruntime's own verdict is known)."""
    if model.ir_version > onnx.IR_VERSION:
        raise BadModelError(
            f"ir_version {model.ir_version} is newer than any this onnx ({onnx.__version__}) knows "
            f"(at most {onnx.IR_VERSION})",
            path=path,
            value=int(model.ir_version),
            rule=IR_VERSION_RULE,
        )
    newest = {"": onnx.defs.onnx_opset_version()}
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        if domain == "" and o.version > newest[""]:
            raise BadModelError(
                f"opset_import ai.onnx version {o.version} is newer than any this onnx ({onnx.__version__}) "
                f"defines (at most {newest['']})",
                path=path,
                value=int(o.version),
                rule=OPSET_RULE,
            )


def _version_remedy(own: BadModelError, theirs: BaseException | None) -> None:
    """Ends a version refusal with what would load the model: a newer onnx alone when the installed
    onnxruntime accepts it, else a newer onnxruntime too, with onnxruntime's own last sentence (on the
    floors, onnx 1.20 and onnxruntime 1.24.4 both stop at opset 25 and IR 13)."""
    if own.rule not in (IR_VERSION_RULE, OPSET_RULE):
        return
    if theirs is None:
        own.message += "; pip install -U onnx if a newer onnx defines it"
    else:
        import onnxruntime as ort

        text = " ".join(str(theirs).split())
        if "onnxruntime::" in text:  # past the C++ source location and function signature it quotes
            text = text.rpartition(") ")[2]
        sentences = [s for s in text.split(". ") if s.strip()]
        said = f" ({sentences[-1].rstrip('.')})" if sentences else ""
        own.message += (
            f"; onnxruntime {ort.__version__} refuses it too{said}: a newer onnxruntime, with an onnx "
            "that defines it, may load it"
        )
    own.args = (own.message,)


def _check_names(graph: onnx.GraphProto, prefix: str, path: str | None) -> None:
    """Node names unique within a graph (ai.onnx ``Constant`` nodes aside, as in onnxruntime); initializers
    that agree with the graph input they feed (a negative declared dimension is left alone: onnxruntime
    reads it as a free one)."""
    seen: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        # onnxruntime makes each ai.onnx Constant node an initializer before it checks the names, so a
        # Constant may share its name with any node (optimum's merged decoders have such pairs)
        constant = node.op_type == "Constant" and node.domain in ("", "ai.onnx")
        if node.name and not constant:
            if node.name in seen:
                raise BadModelError(
                    f"two nodes are named {node.name!r} (nodes {seen[node.name]} and {i}"
                    f"{' of ' + prefix if prefix else ''})",
                    node=node.name,
                    op_type=node.op_type,
                    path=path,
                    value=node.name,
                    rule="node names are unique within a graph (onnxruntime refuses duplicates)",
                )
            seen[node.name] = i
        for attr_name, sub in subgraphs(node):
            _check_names(sub, subgraph_prefix(node_path(prefix, node, i), attr_name), path)
    declared = {vi.name: vi for vi in graph.input}
    for t in graph.initializer:
        vi = declared.get(t.name)
        if vi is None or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if tt.elem_type and tt.elem_type != t.data_type:
            raise BadModelError(
                f"initializer {t.name!r} is {type_name(t.data_type)} but the graph input it feeds is "
                f"declared {type_name(tt.elem_type)}",
                tensor=t.name,
                path=path,
                value=type_name(t.data_type),
                rule="an initializer has its graph input's element type",
            )
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            pairs = zip(dims, t.dims, strict=False)
            if len(dims) != len(t.dims) or any(d is not None and d != int(v) for d, v in pairs):
                raise BadModelError(
                    f"initializer {t.name!r} has shape {list(t.dims)} but the graph input it feeds is "
                    f"declared {['?' if d is None else d for d in dims]}",
                    tensor=t.name,
                    path=path,
                    value=list(t.dims),
                    rule="an initializer has its graph input's shape",
                )


def _checkable(model: onnx.ModelProto, external: bool = True) -> onnx.ModelProto:
    """What onnxruntime, onnx's checker and shape inference are given: ``model`` itself, or a copy in
    which large and external-data initializers are graph inputs of the same type and shape
    (:func:`dmlshim.model.weightless.without_weights`), so no weight is read or re-serialised for the check.
    ``external``: False when every external-data tensor ``model`` holds is known to be a top-level
    initializer (those become inputs: none is looked for in the copy).
    """
    from ..fileio.external_data import external_tensors

    if has_duplicates(model.graph):
        # onnxruntime reads one definition of a duplicated initializer; as graph inputs, two would be refused
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        keep_onnxruntimes(copy.graph)
        model = copy
    light = without_weights(model)  # large and external initializers as typed inputs: no weight copied
    if light is model:
        if not external or not external_tensors(model.graph):
            return model
        light = onnx.ModelProto()
        light.CopyFrom(model)
    if not external:
        return light
    # Inside subgraphs (and in attributes) a tensor cannot become an input: give the checker zeros of the
    # declared size instead (already checked against the memory limit by check_external_data).
    for t in external_tensors(light.graph):
        size = RAW_ITEMSIZE.get(t.data_type, 1) * math.prod(int(d) for d in t.dims)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        t.raw_data = bytes(size)
    return light


def _onnx_checker_findings(
    light: onnx.ModelProto, serialized: bytes | None = None, errors: list[str] | None = None
) -> str | None:
    """What onnx.checker finds on the shape-inferred model (None: nothing). ``serialized``: ``light``'s
    bytes, when already made (for onnxruntime's acceptance session). ``errors``: receives the error onnx's
    inference meets, if any (:func:`dmlshim.model.last_inference.infer_shapes`)."""
    try:
        # remembered: translation asks for the same pass (data_prop's base)
        inferred = infer_shapes(light, serialized=serialized, errors=errors)
        # onnx.checker insists on a typed, shaped ValueInfo for every graph output; onnxruntime does not
        # (e.g. a Loop output of unknown rank). Check the nodes, not that bookkeeping.
        keep = [o for o in inferred.graph.output if o.type.tensor_type.HasField("shape")]
        del inferred.graph.output[:]
        inferred.graph.output.extend(keep)
        onnx.checker.check_model(inferred)
    except ONNX_ERRORS as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, (DecodeError, RecursionError)):
            first = f"{first} (subgraphs nested deeper than protobuf allows)"
        return first
    return None


def check_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str] | None = None,
    *,
    sess_options: object = None,
    read_below: int | None = None,
    defer_onnxruntime: bool = False,
    unknown_operators_allowed: bool = False,
    external_found: list[ExternalRef] | None = None,
    sorted_found: list[bool] | None = None,
) -> Callable[[], None]:
    """The one model check every command runs (inspect, validate, run, lower, export, InferenceSession).

    Refuses, as :class:`BadModelError` naming the file, node or tensor: damaged protos
    (:func:`check_well_formed`), unknown ir_version or opset versions, duplicate node names, initializers
    whose type or shape disagrees with their declared input, unsound external data (checked without
    reading it), and every model onnxruntime's own session creation refuses
    (:func:`start_ort_acceptance`, on the weightless copy: weights are never read or re-serialised for
    this). What onnx.checker finds on a
    model onnxruntime loads is logged as a warning only (IR-3 initializers not listed as inputs, inputs
    without a shape, unsorted nodes, ...); on a refused model it is added to the message.

    Args:
        model: the model, external data not loaded.
        path: the file it was read from (external data is found beside it).
        sess_options: the caller's ``onnxruntime.SessionOptions`` (``InferenceSession``): an operator that
            only a custom-op library it registers may define is then not refused here.
        read_below: the model is read without its weights: only external tensors smaller than this are
            read into it, and only they count against the memory and protobuf limits.
        defer_onnxruntime: return before onnxruntime has decided (its acceptance session goes on being
            built on another thread while the caller works): the caller must call the returned function,
            which waits for the verdict and raises the refusal, before it uses the model for anything
            that shows, and before it raises any error of its own (onnxruntime's refusal comes first).
            The model must not change structurally meanwhile (its initializers may).
        unknown_operators_allowed: a model onnxruntime refuses while it has nodes of operators nothing
            defines (a custom op whose library is not registered) is not refused here: ``inspect``, a
            static report, reads it and names those nodes; what else onnxruntime may refuse is then not
            known.
        external_found: given, receives the model's external-data entries as checked (none: the model
            keeps no data outside, and a loader need not look for any again).
        sorted_found: given, receives True when onnx.checker finds nothing on the model: its nodes, in
            every graph, are then in topological order (the checker refuses a node reading a value no
            earlier node, input or initializer gives), which a loader need not check again.

    Returns:
        The verdict: a function raising onnxruntime's refusal (a no-op when already decided; once).

    Raises:
        BadModelError: the model is not one onnxruntime would load.
        TooLargeError: its external data exceeds the memory limit.
    """
    where = os.fspath(path) if path is not None else None
    serialized: list[bytes] = []  # the model's bytes, where the UTF-8 check made them
    check_well_formed(model, where, serialized)
    try:
        _check_versions(model, where)
        _check_names(model.graph, "", where)
    except BadModelError as own:
        theirs = ort_refusal(probe_for(model, own))
        _version_remedy(own, theirs)
        if theirs is None:
            raise
        raise own from theirs  # onnxruntime's class and message first (dmlshim.runtime.exceptions)
    # no entry checked: no external-data tensor anywhere (the walk is not made twice)
    refs = check_external_data(model, where, read_below=read_below)
    if external_found is not None:
        external_found.extend(refs)
    # one entry per external tensor: more entries than external top-level initializers means one lies
    # in a subgraph, an attribute or a sparse initializer (the copy's walk for them is made only then)
    top = sum(1 for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    light = _checkable(model, external=len(refs) > top)
    findings: list[str | None] = [None]

    def refused_by_onnxruntime(refused: BadModelError) -> None:
        finding = findings[0]
        if (sess_options is not None or unknown_operators_allowed) and unknown_operators(model):
            # The caller's options may register the library that defines them (register_custom_ops_library),
            # which a new SessionOptions cannot copy: the engine's own sessions, built with those options,
            # decide.
            logger.info("%s; left to the session options' custom operators", refused)
            return
        if finding is not None:  # onnx's own words often say more about the same defect
            refused.message = f"{refused.message}; onnx.checker: {finding}"
            refused.args = (refused.message,)
        raise refused

    def accepted() -> None:
        finding = findings[0]
        if finding is not None:
            logger.warning(
                "%s: onnx.checker finds %s; onnxruntime loads the model, so dmlshim does too",
                where or "the model",
                finding,
            )

    try:
        # deferred, without the caller's options: started when the engine knows whether a session of the
        # whole model it builds anyway can stand for it (dmlshim.model.ort_witness)
        lazy = defer_onnxruntime and sess_options is None
        # ``light`` is the model itself when it holds no weight to leave out and no external data: the
        # checks since the UTF-8 check read it only, so its bytes are those (not serialized again)
        same = serialized[0] if serialized and light is model and not refs else None
        acceptance = start_ort_acceptance(light, model, where, sess_options, lazy=lazy, serialized=same)
    except BadModelError as refused:
        refused_by_onnxruntime(refused)
        return _DECIDED
    # Where onnx's inference cannot type the outputs as onnxruntime does, onnxruntime is asked (graph
    # optimizations off: its first resolve, ort_outputs): the model loaded on another thread, no session
    # initialized; the verdict is still left to the engine's session of the model (ort_witness).
    reason = outputs_need_onnxruntime(model) if lazy else None
    if reason is not None:
        logger.debug("onnxruntime's outputs asked for: %s", reason)
        acceptance.start_outputs()
    # onnxruntime builds its session on another thread (it releases the GIL): onnx's checker runs
    # meanwhile (its findings only add words to a refusal, or a warning).
    errors: list[str] = []
    findings[0] = _onnx_checker_findings(light, acceptance.serialized, errors if lazy else None)
    if sorted_found is not None and findings[0] is None:
        sorted_found.append(True)
    acceptance.serialized = None  # read once: not held for the session's life (its closure may hold it)
    if errors and reason is None:
        logger.debug("onnxruntime's outputs asked for: %s", errors[0])
        acceptance.start_outputs()

    def verdict() -> None:
        try:
            acceptance.verdict()
        except BadModelError as refused:
            refused_by_onnxruntime(refused)
            return
        accepted()

    deferred = _Deferred(verdict, acceptance)
    if not defer_onnxruntime:
        deferred()
    return deferred


class _Deferred:
    """A deferred verdict (``check_model(defer_onnxruntime=True)``): called, decides once; its
    acceptance may be witnessed or started meanwhile (:mod:`dmlshim.model.ort_witness`). Also what
    :func:`check_model` returns when it decided before returning (calling it again does nothing)."""

    __slots__ = ("_acceptance", "_once")

    def __init__(self, decide: Callable[[], None], acceptance: Acceptance) -> None:
        self._once, self._acceptance = _Once(decide), acceptance

    def __call__(self) -> None:
        self._once()

    def witnessed(self, model: onnx.ModelProto) -> None:
        self._acceptance.witnessed(model)

    def start(self) -> None:
        self._acceptance.start()

    @property
    def outputs(self) -> OrtOutputs | None:
        """onnxruntime's ``get_outputs()`` with graph optimizations off, once decided (None: its
        acceptance session was not built, :mod:`dmlshim.model.ort_outputs`)."""
        return self._acceptance.outputs


class _Once:
    """Calls ``decide`` the first time it is called, and never again."""

    __slots__ = ("_decide",)

    def __init__(self, decide: Callable[[], None]) -> None:
        self._decide: Callable[[], None] | None = decide

    def __call__(self) -> None:
        decide, self._decide = self._decide, None
        if decide is not None:
            decide()


def _decided() -> None:
    """The verdict of a model already checked: nothing left to wait for."""


_DECIDED: Callable[[], None] = _decided
