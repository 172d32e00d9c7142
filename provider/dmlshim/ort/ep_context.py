"""``ep.context_enable = 1`` for a model given as bytes: onnxruntime's verdict, asked of onnxruntime itself.

onnxruntime (1.24.4 and 1.32) names the EP-context model it would write after the model's file, or after
``ep.context_file_path``; a session of a model given as bytes with neither is refused when it is
initialised (``InvalidArgument``: "Both ep_context_path and model_path are empty."), even when no provider
compiles a node and nothing would be written. dmlshim's own onnxruntime sessions never carry the entry, so
before this module such a session was built. Now onnxruntime is asked once, on a model with no nodes given
as bytes and the caller's ``ep.context_*`` entries, and its refusal is the session's.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import BadInputError
from ..model.ort_errors import ORT_ERRORS
from ..runtime.options_copy import config_entry
from .cpu_fallback import nodeless_model

__all__ = ["refuse_context_model_as_onnxruntime"]

logger = logging.getLogger(__name__)

ENABLE_KEY = "ep.context_enable"
CONTEXT_KEYS = (ENABLE_KEY, "ep.context_file_path", "ep.context_embed_mode")
RULE = (
    "ep.context_enable=1: onnxruntime names the EP-context model after the model's file or "
    "ep.context_file_path; a model given as bytes needs ep.context_file_path"
)


def refuse_context_model_as_onnxruntime(source: Any, so: Any) -> None:
    """Refuse the session as onnxruntime refuses it when ``ep.context_enable`` is set for a model given as
    bytes (nothing for a model file, without the entry, or when onnxruntime builds the session).

    Args:
        source: the model as the caller gave it (a path, bytes or a ModelProto).
        so: the caller's SessionOptions (read, never changed).

    Raises:
        BadInputError: onnxruntime refuses these options for a model without a path (its class and words).
    """
    if isinstance(source, (str, os.PathLike)) or config_entry(so, ENABLE_KEY) is None:
        return
    from ..runtime.real import OrtInferenceSession, ort

    asked = ort.SessionOptions()
    asked.log_severity_level = 3
    for key in CONTEXT_KEYS:
        value = config_entry(so, key)
        if value is not None:
            asked.add_session_config_entry(key, value)
    try:
        OrtInferenceSession(nodeless_model(), asked, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        words = str(exc).strip()
        raise BadInputError(
            f"onnxruntime refuses these session options for a model given as bytes: {words}", rule=RULE
        ) from exc
    logger.debug("%s set: onnxruntime builds a session of a model given as bytes", ENABLE_KEY)
