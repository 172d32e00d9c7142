"""dmlshim as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's backend test suite can run on it.

Usage, as with onnxruntime's backend module::

    import onnx.backend.test
    import dmlshim.backend

    backend_test = onnx.backend.test.BackendTest(dmlshim.backend, __name__)

The DirectML feature level comes from ``prepare(..., feature_level=...)`` or else the environment variable
``DMLSHIM_FEATURE_LEVEL`` (``3_0``, ``0x3000``, ``DML_FEATURE_LEVEL_3_0``), else DML_FEATURE_LEVEL_5_0.
Each prepared model keeps the record of its latest run (``rep.last_run_record``), so a conformance runner
can tell nodes that ran from their DirectML descriptors from fallbacks.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from .dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from .errors import BadInputError
from .execute.record import RunRecord
from .graph import node_path
from .ort.session import InferenceSession

logger = logging.getLogger(__name__)

FEATURE_LEVEL_ENV = "DMLSHIM_FEATURE_LEVEL"
"""Environment variable giving the feature level when ``prepare`` gets none."""

_SESSION_KWARGS = ("engine", "index_mode", "sess_options", "providers")

RUN_NODE_OPSET = 18
"""The ai.onnx opset of the one-node model ``run_node`` builds when the caller names none."""


def feature_level_from(value: FeatureLevel | str | int | None = None) -> FeatureLevel:
    """The feature level from an explicit value, else ``$DMLSHIM_FEATURE_LEVEL``, else the default.

    Raises:
        BadInputError: the value or the environment variable is not a known feature level.
    """
    if value is None:
        value = os.environ.get(FEATURE_LEVEL_ENV) or None
        source = f"${FEATURE_LEVEL_ENV}"
    else:
        source = "feature_level"
    if value is None:
        return DEFAULT_FEATURE_LEVEL
    if isinstance(value, FeatureLevel):
        return value
    try:
        return FeatureLevel.parse(value)
    except ValueError as exc:
        raise BadInputError(f"{source}: {exc}", value=value) from exc


@functools.cache
def _ort_backend_takes_scalars() -> bool:
    """Whether the installed onnxruntime's backend turns a numpy scalar input into a 0-d array (1.32
    does, ``_normalize_numpy_scalar``; 1.24 passes it on, and its ``run`` refuses it)."""
    try:
        from onnxruntime.backend import backend_rep
    except ImportError:  # pragma: no cover - onnxruntime always ships its backend module
        return False
    return hasattr(backend_rep, "_normalize_numpy_scalar")


def _scalar_as_array(value: Any) -> Any:
    """A numpy scalar (``np.float32(1.5)``) as a 0-d array where onnxruntime's backend makes it one."""
    return np.asarray(value) if isinstance(value, np.generic) and _ort_backend_takes_scalars() else value


class DmlShimBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs in graph output order.

    Attributes:
        session: the :class:`dmlshim.InferenceSession` behind it.
    """

    def __init__(self, session: InferenceSession) -> None:
        self.session = session
        self._input_names = [i.name for i in session.get_inputs()]

    @property
    def last_run_record(self) -> RunRecord | None:
        """The record of the latest ``run``: which nodes ran as DirectML operators, which fell back."""
        return self.session.last_run_record

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run the model.

        Args:
            inputs: a list of arrays in graph input order (initializers excluded), a mapping by input
                name, or one array for a single-input model.
            **kwargs: ignored (onnx's API passes backend-specific options here).

        Returns:
            Every graph output, in graph order, with onnxruntime-exact dtypes (a tuple, as onnx's
            ``BackendRep`` declares).
        """
        if kwargs:
            logger.debug("BackendRep.run: ignoring options %s", sorted(kwargs))
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        elif isinstance(inputs, (np.ndarray, np.generic)):
            feeds = {self._input_names[0]: _scalar_as_array(inputs)} if self._input_names else {}
        else:
            values = [_scalar_as_array(value) for value in inputs]
            if len(values) > len(self._input_names):
                raise BadInputError(
                    f"{len(values)} inputs given, the model takes {len(self._input_names)} "
                    f"({', '.join(self._input_names)})",
                    value=len(values),
                )
            feeds = dict(zip(self._input_names, values, strict=False))
        return tuple(self.session.run(None, feeds))


class DmlShimBackend(Backend):
    """The ONNX backend: models run through :class:`dmlshim.InferenceSession` on device ``CPU``."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only ``CPU``: emulated DirectML runs on the host."""
        return str(device).upper() == "CPU"

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> DmlShimBackendRep:
        """Build a session for a model (ModelProto, bytes or path).

        Keyword Args:
            feature_level: the DirectML feature level (else ``$DMLSHIM_FEATURE_LEVEL``, else 5_0).
            engine, index_mode, sess_options, providers: passed to :class:`dmlshim.InferenceSession`.
            Other keywords (e.g. tolerances from onnx's test runner) are ignored.

        Raises:
            BadInputError: the device is not ``CPU`` or the feature level is unknown.
        """
        if not cls.supports_device(device):
            raise BadInputError(f"dmlshim runs on device 'CPU' only, not {device!r}", value=device)
        level = feature_level_from(kwargs.pop("feature_level", None))
        options = {k: kwargs.pop(k) for k in _SESSION_KWARGS if k in kwargs}
        if kwargs:
            logger.debug("prepare: ignoring options %s", sorted(kwargs))
        return DmlShimBackendRep(InferenceSession(model, feature_level=level, **options))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        """Prepare and run a model once."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run one node by wrapping it in a one-node model.

        Args:
            node: the node; its inputs are fed from ``inputs`` in order (an empty name is an omitted
                optional input).
            inputs: arrays, one per non-empty node input.
            device: ``CPU``.
            outputs_info: unused (output types are inferred).
            **kwargs: ``opset_version`` (default 18) plus everything ``prepare`` takes.
        """
        opset = int(kwargs.pop("opset_version", RUN_NODE_OPSET))
        names = [n for n in node.input if n]
        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
        if len(arrays) != len(names):
            raise BadInputError(
                f"node {node_path('', node, 0)!r} has {len(names)} inputs, {len(arrays)} arrays given",
                value=len(arrays),
            )
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays, strict=False)
        ]
        graph = helper.make_graph(
            [node],
            f"{node.op_type}_node",
            graph_inputs,
            [onnx.ValueInfoProto(name=o) for o in node.output if o],
        )
        opsets = [helper.make_opsetid("", opset)]
        if node.domain not in ("", "ai.onnx"):
            opsets.append(helper.make_opsetid(node.domain, 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        return cls.prepare(model, device, **kwargs).run(dict(zip(names, arrays, strict=False)))


is_compatible = DmlShimBackend.is_compatible
prepare = DmlShimBackend.prepare
run_model = DmlShimBackend.run_model
run = DmlShimBackend.run_model
run_node = DmlShimBackend.run_node
supports_device = DmlShimBackend.supports_device

__all__ = [
    "FEATURE_LEVEL_ENV",
    "DmlShimBackend",
    "DmlShimBackendRep",
    "feature_level_from",
    "is_compatible",
    "prepare",
    "run",
    "run_model",
    "run_node",
    "supports_device",
]
