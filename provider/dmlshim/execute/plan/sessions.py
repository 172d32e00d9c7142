"""onnxruntime plumbing shared by the engines: its exception types, CPU sessions, and its run errors
turned into dmlshim errors."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import onnx
import onnxruntime as ort

from ...errors import BadInputError, DmlShimError, IndexOutOfRangeError, NotSupportedError
from ...graph import is_gather_scatter
from ...model.modelcheck import ort_load_error
from ...model.ort_errors import ORT_ERRORS
from ...runtime.exceptions import with_onnxruntime_class
from ...runtime.real import OrtInferenceSession
from ..weights.shared import SharedWeights
from .fallback import for_onnxruntime

GATHER_SCATTER_OPS = frozenset(
    {"Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND"}
)

_RACY_OPS = frozenset({"ScatterND"})
"""Scatters whose onnxruntime CPU kernel writes from several threads: duplicate indices then race. Its
ScatterElements (and the deprecated Scatter, run by the same kernel) writes in one loop: 20 runs with two
threads on 4M updates over 1000 distinct indices equal the one-thread result (onnxruntime 1.24.4 and 1.32;
tests/test_ort_threads.py asks onnxruntime each time), so it keeps onnxruntime's threads."""


def has_scatter(graph: onnx.GraphProto, skip: frozenset[str] = frozenset()) -> bool:
    """A scatter node in ``graph`` or its subgraphs, other than those writing an output in ``skip``."""
    for node in graph.node:
        if node.op_type in _RACY_OPS and not (node.output and node.output[0] in skip):
            return True
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH and has_scatter(attr.g, skip):
                return True
            if attr.type == onnx.AttributeProto.GRAPHS and any(has_scatter(g, skip) for g in attr.graphs):
                return True
    return False


def default_options(
    graph: onnx.GraphProto, skip: frozenset[str] = frozenset(), make: Callable[[], Any] | None = None
) -> ort.SessionOptions:
    """The options of a session dmlshim builds when the caller gave none: onnxruntime's defaults, quiet
    (the raised DmlShimError already says what onnxruntime would log), and one intra-op thread when a
    scatter runs in it (onnxruntime's CPU ScatterND loses updates on duplicate indices with several
    threads; one thread makes it exact and deterministic). Scatters writing an output in ``skip`` are
    checked against their kernel instead and do not count. ``make`` gives dmlshim's own options to start
    from (``EngineConfig.own_options``) instead of onnxruntime's defaults."""
    options = make() if make is not None else ort.SessionOptions()
    options.log_severity_level = 4
    if has_scatter(graph, skip):
        options.intra_op_num_threads = 1
    return options


def cpu_session(
    model: onnx.ModelProto | bytes,
    sess_options: Any,
    what: str,
    shared: SharedWeights | None = None,
    make_options: Callable[[], Any] | None = None,
) -> ort.InferenceSession:
    """An onnxruntime CPU session for ``model``; ``what`` names it in the error when onnxruntime refuses it.

    Without ``sess_options``, onnxruntime's defaults apply, except that a model with a scatter runs with one
    intra-op thread (or ``make_options()`` when given); placeholders of ``shared`` initializers in
    ``model`` then get their arrays.
    """
    if isinstance(model, onnx.ModelProto):
        model = for_onnxruntime(model)  # deprecated Scatter as ScatterElements
    if sess_options is None:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
        sess_options = default_options(proto.graph, make=make_options)
        if shared is not None and isinstance(model, onnx.ModelProto):
            shared.attach(sess_options, model)
    separate_profile(sess_options)
    payload = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        return OrtInferenceSession(payload, sess_options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)
        raise ort_load_error(proto, what, exc) from exc


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")
_ORT_INDEX_PROBLEMS = ("out of data bounds", "out of range", "invalid ind", "out of bound")
_ORT_INDEX_VALUE = re.compile(r"(?:idx|index|indice)\s*=\s*(-?\d+)")


_TERMINATED = "terminate flag being set to true"


def terminated(run_options: Any) -> DmlShimError | None:
    """The error for a run whose ``RunOptions.terminate`` is set (onnxruntime's ``Fail``), or None: checked
    before a run starts and between its steps, as onnxruntime checks it between nodes."""
    if run_options is not None and getattr(run_options, "terminate", False):
        return DmlShimError(
            "Exiting due to terminate flag being set to true. (dmlshim: RunOptions.terminate is set)"
        )
    return None


def ort_run_error(
    exc: BaseException,
    what: str,
    *,
    node: str | None = None,
    op_type: str | None = None,
    indices: Mapping[str, str] | None = None,
    paths: Mapping[str, str] | None = None,
) -> DmlShimError:
    """onnxruntime's run failure as a dmlshim error: IndexOutOfRangeError when onnxruntime rejected an
    index of a gather/scatter node (it names the node and often the value), NotSupportedError when
    onnxruntime has no implementation for what it was asked (status NOT_IMPLEMENTED: a kernel lacking a
    data type; the feeds are fine), BadInputError otherwise.

    Raises:
        UnicodeDecodeError: ``exc`` is one (a string value that is no UTF-8 came out of onnxruntime): raised
            here, as onnxruntime's ``run`` raises it (:func:`undecodable_string`).
        UnicodeEncodeError: ``exc`` is one (a string feed holding a lone surrogate, which onnxruntime's
            ``run`` cannot encode as UTF-8): raised here, as onnxruntime raises it."""
    if isinstance(exc, UnicodeDecodeError):
        raise undecodable_string(exc, what) from None
    if isinstance(exc, UnicodeEncodeError):  # a string feed UTF-8 cannot hold (a lone surrogate)
        raise UnicodeEncodeError(
            exc.encoding, exc.object, exc.start, exc.end, f"{exc.reason} (dmlshim: {what})"
        ) from None
    text = str(exc)
    if _TERMINATED in text:
        # RunOptions.terminate set while the run was under way: not the inputs' fault (onnxruntime: Fail)
        return DmlShimError(f"{what}: the run was stopped: RunOptions.terminate was set to true")
    # the innermost node: a failure inside a Loop/If/Scan body names the body's node last
    found = next(reversed(list(_ORT_NODE.finditer(text))), None)
    if found is not None:
        op_type, node = found.group(1), found.group(2) or node
    lowered = text.lower()
    if op_type in GATHER_SCATTER_OPS and any(p in lowered for p in _ORT_INDEX_PROBLEMS):
        value = _ORT_INDEX_VALUE.search(text)
        error = IndexOutOfRangeError(
            f"{what}: an index is out of range ({text.strip().splitlines()[0]})",
            rule="ONNX: every index must lie within the dimension it addresses",
            value=int(value.group(1)) if value else None,
            node=node,
            op_type=op_type,
            tensor=(indices or {}).get(node or ""),
        )
        if node is not None and paths and node in paths:
            error.node = paths[node]
        return error
    if "NOT_IMPLEMENTED" in text or type(exc).__name__ == "NotImplemented":
        return NotSupportedError(
            f"{what}: onnxruntime has no implementation for this ({text.strip().splitlines()[0]})",
            node=node,
            op_type=op_type,
        )
    error = BadInputError(f"{what}: {text}", node=node, op_type=op_type)
    if type(exc) in (RuntimeError, TypeError):  # raised by onnxruntime's Python layer (e.g. a map feed's key)
        with_onnxruntime_class(error, type(exc))
    return error


def undecodable_string(exc: UnicodeDecodeError, what: str) -> UnicodeDecodeError:
    """onnxruntime's own error for a string value that is no UTF-8 reaching Python (a string initializer
    or Constant whose bytes are none, selected into an output): ``UnicodeDecodeError``, its class and
    words, with what dmlshim was doing after them. onnxruntime builds such a session and raises only when
    the bytes reach an output (1.24.4 and 1.32); the CLI says it in one line (exit 2)."""
    return UnicodeDecodeError(
        exc.encoding,
        exc.object,
        exc.start,
        exc.end,
        f"{exc.reason} (dmlshim: {what}: a string value holds bytes that are no UTF-8, which onnxruntime's "
        "run refuses to return)",
    )


def name_index_error(exc: DmlShimError, indices: Mapping[str, str], paths: Mapping[str, str]) -> None:
    """Complete an IndexOutOfRangeError onnxruntime raised (found by :func:`ort_run_error` without the
    model at hand): the node's indices tensor and, for a subgraph's node, its path."""
    if not isinstance(exc, IndexOutOfRangeError) or exc.node is None:
        return
    own = exc.node
    if exc.tensor is None and own in indices:
        exc.tensor = indices[own]
    if own in paths:
        exc.node = paths[own]


def subgraph_paths(nested: Iterable[Any]) -> dict[str, str]:
    """A subgraph node's own name (as onnxruntime names it) -> its path (``loop/body/scatter``), for the
    :func:`~dmlshim.execute.plan.partition.nested_gather_scatter` nodes whose name is theirs alone."""
    own = [n.node.name for n in nested]
    return {n.node.name: n.path for n in nested if n.node.name and own.count(n.node.name) == 1}


def indices_tensors(nodes: Iterable[onnx.NodeProto]) -> dict[str, str]:
    """The indices tensor of every named gather/scatter node among ``nodes`` (as onnxruntime names a
    failing node: by its own name, in a subgraph too)."""
    return {n.name: n.input[1] for n in nodes if n.name and is_gather_scatter(n) and len(n.input) > 1}


_SESSION_NUMBERS = itertools.count()
_SESSION_SUFFIX = re.compile(r"_s\d+$")


def separate_profile(so: Any) -> None:
    """Give the next onnxruntime session built with ``so`` a profile file of its own.

    onnxruntime opens the profile file when the session starts, named by prefix and start time to the
    millisecond; two partitions started in the same millisecond would share (and truncate) one file.
    """
    if so is not None and so.enable_profiling:
        base = _SESSION_SUFFIX.sub("", so.profile_file_prefix)
        so.profile_file_prefix = f"{base}_s{next(_SESSION_NUMBERS)}"
