"""``session.disable_cpu_ep_fallback = 1``: onnxruntime's verdict, asked of onnxruntime itself.

onnxruntime (1.24.4 and 1.32, CPU builds) decides when the session is initialised:

* the caller named ``CPUExecutionProvider`` among the providers: ``InvalidArgument`` ("Conflicting session
  configuration: explicitly added the CPU EP to the session, but also disabled fallback ...");
* else (default providers, or only providers this onnxruntime does not have, which it drops), a node left
  after its level-1 optimizations is placed on the CPU provider it adds itself: ``Fail`` ("This session
  contains graph nodes that are assigned to the default CPU EP, but fallback to CPU EP has been explicitly
  disabled by the user."); a model with no node left (none at all, or all constant-folded) loads.

dmlshim's own onnxruntime sessions name the CPU provider, so before this module every such session was
refused with ``InvalidArgument``, whatever the caller's providers. Now the verdict is asked of onnxruntime
once, with the caller's options and providers as they name the CPU provider (:func:`refuse_as_onnxruntime`),
and refused with its class and words; a session it accepts is built, dmlshim's own sessions then taking
onnxruntime's default providers under that entry (:func:`dmlshim.runtime.real.OrtInferenceSession`), as
the caller's session would.
"""

from __future__ import annotations

import logging
from typing import Any

import onnx
from onnx import helper

from ..errors import BadInputError, BadModelError
from ..model.ort_errors import ORT_ERRORS
from ..runtime.options_copy import config_entry

__all__ = ["FALLBACK_KEY", "fallback_disabled", "nodeless_model", "refuse_as_onnxruntime"]

logger = logging.getLogger(__name__)

FALLBACK_KEY = "session.disable_cpu_ep_fallback"
CPU_EP = "CPUExecutionProvider"
RULE = (
    "session.disable_cpu_ep_fallback=1: every node must run on a provider other than the CPU's, and the CPU "
    "provider must not be named (onnxruntime's CPU build has no other provider for a node)"
)


def fallback_disabled(so: Any) -> bool:
    """Whether ``so`` (a SessionOptions or None) sets ``session.disable_cpu_ep_fallback`` to ``1``."""
    return so is not None and config_entry(so, FALLBACK_KEY) == "1"


def _names_cpu(providers: Any) -> bool:
    """Whether the caller's ``providers`` name the CPU provider (a name, or a ``(name, options)`` pair)."""
    if providers is None or isinstance(providers, (str, bytes)):
        return False
    try:
        items = list(providers)
    except TypeError:
        return False
    return any((p if isinstance(p, str) else (p[0] if isinstance(p, (tuple, list)) and p else None)) == CPU_EP
               for p in items)  # fmt: skip


def nodeless_model() -> bytes:
    """A model with no nodes (one initializer as its output), for asking onnxruntime about options."""
    graph = helper.make_graph(
        [],
        "dmlshim_cpu_fallback_probe",
        [],
        [helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [0])],
        [helper.make_tensor("v", onnx.TensorProto.FLOAT, [0], [])],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def refuse_as_onnxruntime(source: Any, model: onnx.ModelProto, so: Any, providers: Any) -> None:
    """Refuse the session as onnxruntime refuses it under ``session.disable_cpu_ep_fallback = 1`` (nothing
    when the entry is not set, or onnxruntime builds the session).

    Args:
        source: the model as the caller gave it (a path, bytes or a ModelProto), handed to onnxruntime.
        model: the loaded model (its main graph's nodes are counted: none left, nothing to place).
        so: the caller's SessionOptions (restored as they were; no file is written).
        providers: the caller's ``providers`` argument, as given.

    Raises:
        BadInputError: the caller names the CPU provider (onnxruntime's ``InvalidArgument`` and words).
        BadModelError: a node is left for the CPU provider (onnxruntime's ``Fail`` and words).
    """
    if not fallback_disabled(so):
        return
    from ..execute.weights.added_initializers import quiet_options
    from ..runtime.real import OrtInferenceSession

    named = _names_cpu(providers)
    if not named and not len(model.graph.node):
        return  # no node to place: onnxruntime builds it
    probe: Any = nodeless_model() if named else source
    if isinstance(probe, onnx.ModelProto):
        probe = probe.SerializeToString()
    try:
        with quiet_options(so):
            OrtInferenceSession(probe, so, providers=[CPU_EP] if named else None, cpu_fallback_asked=True)
    except ORT_ERRORS as exc:
        words = str(exc).strip()
        if named:
            raise BadInputError(
                f"onnxruntime refuses these session options with the providers given: {words}", rule=RULE
            ) from exc
        raise BadModelError(
            f"onnxruntime refuses the model with these session options: {words}", rule=RULE
        ) from exc
    logger.info("session.disable_cpu_ep_fallback=1: onnxruntime places no node of the model on the CPU")
