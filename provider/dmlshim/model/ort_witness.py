"""One onnxruntime session per model: a session of the whole model that the engine builds anyway (the
whole-model check's, or the one session of a model with nothing to emulate) stands as onnxruntime's
acceptance of the model, instead of a session built only for the verdict.

A session built deferring onnxruntime's verdict (``check_model(defer_onnxruntime=True)``) sets the
pending acceptance for the duration of its build (:func:`acceptance_pending`). An engine that builds an
onnxruntime session of the very model with onnxruntime's default options reports it
(:func:`session_built`): the model is accepted. An engine that knows no such session is coming says so
(:func:`no_session_coming`): the acceptance's own session is then started, on another thread. Otherwise
the verdict builds it when asked, so that a model onnxruntime refuses is still refused with its class and
words (its own session's, built as before, decides every refusal).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Protocol

import onnx


class PendingAcceptance(Protocol):
    """onnxruntime's verdict on a model, not yet asked for."""

    def witnessed(self, model: onnx.ModelProto) -> None:
        """onnxruntime built a session of ``model`` (the checked model, outputs possibly added)."""

    def start(self) -> None:
        """Start the acceptance's own session on another thread (no witness is coming)."""


_PENDING: contextvars.ContextVar[PendingAcceptance | None] = contextvars.ContextVar(
    "dmlshim_pending_acceptance", default=None
)


@contextlib.contextmanager
def acceptance_pending(verdict: object) -> Iterator[None]:
    """While building a session: ``verdict`` (``LoadedModel.acceptance``) is the pending acceptance when
    it can be witnessed (a deferred verdict), else nothing is pending."""
    pending = verdict if hasattr(verdict, "witnessed") and hasattr(verdict, "start") else None
    token = _PENDING.set(pending)  # type: ignore[arg-type]
    try:
        yield
    finally:
        _PENDING.reset(token)


def session_built(model: onnx.ModelProto) -> None:
    """An onnxruntime CPU session of ``model`` with onnxruntime's default options was built."""
    pending = _PENDING.get()
    if pending is not None:
        pending.witnessed(model)


def no_session_coming() -> None:
    """The engine builds no session of the whole model: onnxruntime's acceptance session starts now."""
    pending = _PENDING.get()
    if pending is not None:
        pending.start()


def same_nodes(checked: onnx.ModelProto, built: onnx.ModelProto) -> bool:
    """Whether ``built`` has ``checked``'s inputs and top-level nodes, in order, and at least its outputs
    (a session of a changed graph accepts nothing about the checked one)."""
    if checked is built:  # the engine's model is the checked one (the usual case): the same nodes
        return True
    a, b = checked.graph, built.graph
    if len(a.node) != len(b.node) or [v.name for v in a.input] != [v.name for v in b.input]:
        return False
    if not {o.name for o in a.output} <= {o.name for o in b.output}:
        return False
    return all(
        x.op_type == y.op_type and x.domain == y.domain and x.input == y.input and x.output == y.output
        for x, y in zip(a.node, b.node, strict=True)
    )
