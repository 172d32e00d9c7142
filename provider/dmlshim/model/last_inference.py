"""onnx's shape inference, remembering its last answer.

Loading a model runs onnx's inference without data propagation for the checker's findings
(:mod:`dmlshim.model.modelcheck`); translating it runs the same pass on the same weightless graph again
(:mod:`dmlshim.model.data_prop`, when a data-propagating node reads a computed value). On a 20,000-node
chain that pass is a fifth of a second of CPU: the second asks for what the first computed, and gets it
back from here. The answer is kept as a copy of onnx's (each caller gets a fresh copy it may change), for
the last request without data propagation only, keyed by the model's serialized bytes and the flags:
nothing else can change onnx's answer. A copy, not the answer's bytes: serializing an inferred model costs
about five times what copying it does (T5's weightless graph with its types: 0.78 ms against 0.17 ms), and
the bytes were only ever parsed back.

A caller may also ask whether onnx's inference met an error on the way (``errors``): onnx's strict mode is
tried first, whose answer is the same model when it meets none, and the lenient pass is run only when it
does (an output or ``value_info`` the inference contradicts, an operator onnx has no schema for, ...).
"""

from __future__ import annotations

import threading

import onnx

__all__ = ["infer_shapes"]

_STRICT_ERRORS = (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError)

_lock = threading.Lock()
_last: tuple[tuple[bytes, bool, bool, bool], onnx.ModelProto, str | None] | None = None


def infer_shapes(
    model: onnx.ModelProto,
    *,
    check_type: bool = False,
    strict_mode: bool = False,
    data_prop: bool = False,
    remember: bool = True,
    serialized: bytes | None = None,
    errors: list[str] | None = None,
) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, check_type, strict_mode, data_prop)``: a new model the
    caller owns, the same as onnx gives (computed once for two requests in a row on the same model).
    ``remember=False``: a request no later one repeats (a remembered answer is still used, and kept).
    ``serialized``: ``model.SerializeToString()``, when the caller already made it (not made again).
    ``errors`` (a lenient request): receives the first line of strict mode's error when onnx's inference
    meets one (an answer remembered without knowing is then computed again).

    Raises:
        What ``onnx.shape_inference.infer_shapes`` raises (a failure is not remembered).
    """
    global _last
    data = serialized if serialized is not None else model.SerializeToString()
    key = (data, check_type, strict_mode, data_prop)
    with _lock:
        last = _last
    error: str | None = None
    if last is not None and last[0] == key and (errors is None or last[2] is not None):
        if errors is not None and last[2]:
            errors.append(last[2])
        return _copy(last[1])
    inferred: onnx.ModelProto | None = None
    if errors is not None and not strict_mode:
        try:
            inferred = onnx.shape_inference.infer_shapes(
                key[0], check_type=check_type, strict_mode=True, data_prop=data_prop
            )
            error = ""
        except _STRICT_ERRORS as exc:  # the lenient pass below says whether it fails too
            error = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
            errors.append(error)
    if inferred is None:
        inferred = onnx.shape_inference.infer_shapes(
            key[0], check_type=check_type, strict_mode=strict_mode, data_prop=data_prop
        )
    if not data_prop and remember:
        # Only this pass is asked for twice in a row (the model check's, then data propagation's base);
        # the data-propagating passes each infer another cut copy, so their answers are not kept (keeping
        # one copies the whole inferred graph).
        kept = _copy(inferred)  # the caller may change the answer it is given
        with _lock:
            _last = (key, kept, error)
    return inferred


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out
