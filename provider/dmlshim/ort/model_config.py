"""Session options a model carries in its metadata, read as onnxruntime reads them.

With ``ORT_LOAD_CONFIG_FROM_MODEL=1`` in the environment (or onnxruntime's ``read_config_from_model=1``
keyword), onnxruntime takes the ``session_options`` of the JSON the model keeps under the metadata key
``ort_config`` (thread counts, execution mode, optimization level, profiling) over the caller's, and
``get_session_options()`` reports the result. dmlshim asks onnxruntime itself: a model with no nodes that
carries the same metadata is opened with the caller's options, and the options onnxruntime finalised for
it become the session's, so every value and every refusal is onnxruntime's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from ..errors import BadModelError
from ..model.ort_errors import ORT_ERRORS
from ..runtime.exceptions import with_onnxruntime_class
from ..runtime.real import OrtInferenceSession, options_held, ort

logger = logging.getLogger(__name__)

ORT_CONFIG_KEY = "ort_config"
"""The metadata key under which onnxruntime looks for a model's session configuration (JSON)."""
ENV_VAR = "ORT_LOAD_CONFIG_FROM_MODEL"
"""onnxruntime's environment switch: ``1`` reads the configuration from the model."""

__all__ = ["ENV_VAR", "ORT_CONFIG_KEY", "options_from_model", "reads_config_from_model"]


def reads_config_from_model(kwargs: Mapping[str, Any]) -> bool:
    """Whether onnxruntime would read the model's configuration: its ``read_config_from_model`` keyword
    when given, else the environment variable, as onnxruntime's Python session decides."""
    if "read_config_from_model" in kwargs:
        return int(kwargs["read_config_from_model"]) == 1
    return os.environ.get(ENV_VAR) == "1"


def options_from_model(model: onnx.ModelProto, sess_options: Any) -> Any:
    """The session options onnxruntime uses for ``model`` when it reads the model's configuration:
    ``sess_options`` itself when the model carries none, else onnxruntime's finalised copy.

    Raises:
        BadModelError: onnxruntime refuses the model's configuration (with onnxruntime's class).
    """
    config = [p for p in model.metadata_props if p.key == ORT_CONFIG_KEY]
    if not config:
        return sess_options
    so = sess_options if sess_options is not None else ort.SessionOptions()
    anchor = helper.make_tensor("dmlshim.config.anchor", onnx.TensorProto.FLOAT, [0], [])
    graph = helper.make_graph(
        [],
        "dmlshim_config_probe",
        [],
        [helper.make_tensor_value_info(anchor.name, anchor.data_type, [0])],
        [anchor],
    )
    probe = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    probe.metadata_props.extend(config)
    with options_held(so):  # no other thread's session reads the path while it is off
        optimized = so.optimized_model_filepath
        so.optimized_model_filepath = ""  # the probe is never written anywhere
        try:
            with tempfile.TemporaryDirectory(prefix="dmlshim-config-") as tmp:
                path = Path(tmp) / "config_probe.onnx"
                onnx.save(probe, str(path))
                session = OrtInferenceSession(
                    str(path), so, providers=["CPUExecutionProvider"], read_config_from_model=1
                )
        except ORT_ERRORS as exc:
            error = BadModelError(
                f"onnxruntime refuses the session options in the model's {ORT_CONFIG_KEY!r} metadata: "
                f"{' '.join(str(exc).split())}",
                value=config[0].value,
                rule=f"with {ENV_VAR}=1 the model's {ORT_CONFIG_KEY} must hold options onnxruntime accepts",
            )
            raise with_onnxruntime_class(error, type(exc)) from exc
        finally:
            so.optimized_model_filepath = optimized
    finalized = session._sess.session_options
    finalized.optimized_model_filepath = optimized
    if finalized.enable_profiling:  # the probe's own profile is not the caller's
        with contextlib.suppress(FileNotFoundError):
            os.remove(session.end_profiling())
    logger.info("session options read from the model's %s metadata", ORT_CONFIG_KEY)
    return finalized
