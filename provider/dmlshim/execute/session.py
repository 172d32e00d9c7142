"""``dmlshim.InferenceSession``: a drop-in for ``onnxruntime.InferenceSession`` that runs gather/scatter
nodes as DirectML executes them and records, per run, what ran where."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import BadInputError, BadModelError, DmlShimError
from ..kernels.options import IndexMode
from ..limits import check_model_inputs
from ..modelcheck import check_well_formed, load_external_data
from .engine import Engine, EngineConfig, get_engine_factory
from .feeds import FeedValidator, ModelMetadata, NodeArg, node_arg
from .record import RunRecord

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
"""A model file path, serialized model bytes, or a ``ModelProto``."""


@dataclass(frozen=True)
class LoadedModel:
    """A model and the file it came from (None for bytes or a ModelProto)."""

    proto: onnx.ModelProto
    path: str | None


def load_model(model: ModelSource) -> LoadedModel:
    """Read a model from a path, bytes or a ModelProto, with external data kept inside the model's folder.

    Raises:
        BadModelError: the file is missing, empty, is not an ONNX model, is truncated, or has external data
            whose location leaves the model's folder.
        TooLargeError: a graph input has a static shape that cannot fit in this machine's memory.
    """
    if isinstance(model, onnx.ModelProto):
        loaded = LoadedModel(model, None)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            loaded = LoadedModel(onnx.load_from_string(bytes(model)), None)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise BadModelError(f"the bytes are not a serialized ONNX model: {exc}") from exc
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise BadModelError(
                "model file not found" if not path.exists() else "not a regular file", path=str(path)
            )
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError) as exc:
            raise BadModelError(f"not a readable ONNX model: {exc}", path=str(path)) from exc
        _require_graph(proto, str(path))
        load_external_data(proto, path)
        loaded = LoadedModel(proto, str(path))
    else:
        raise BadModelError(
            f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}",
            value=type(model).__name__,
        )
    _require_graph(loaded.proto, loaded.path)
    check_well_formed(loaded.proto, loaded.path)
    check_model_inputs(loaded.proto, path=loaded.path)
    return loaded


def _require_graph(proto: onnx.ModelProto, path: str | None) -> None:
    # An empty file parses as an empty ModelProto; say so instead of letting onnxruntime say "no graph".
    if not proto.HasField("graph") or not proto.opset_import:
        raise BadModelError(
            "not an ONNX model (empty, or no graph or no opset_import)",
            path=path,
            rule="an ONNX model has a graph and at least one opset_import",
        )


def _typed_outputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph outputs, with types from shape inference for those declared without one."""
    outputs = list(model.graph.output)
    if all(o.type.WhichOneof("value") is not None for o in outputs):
        return outputs
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except (
        onnx.shape_inference.InferenceError,
        onnx.checker.ValidationError,
        ValueError,
        RuntimeError,
    ) as exc:
        logger.debug("shape inference failed, output types stay unknown: %s", exc)
        return outputs
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    return [o if o.type.WhichOneof("value") is not None else known.get(o.name, o) for o in outputs]


def _parse_feature_level(value: FeatureLevel | str | int) -> FeatureLevel:
    if isinstance(value, FeatureLevel):
        return value
    try:
        return FeatureLevel.parse(value)
    except ValueError as exc:
        raise BadInputError(str(exc), value=value) from exc


def _parse_index_mode(value: IndexMode | str) -> IndexMode:
    try:
        return IndexMode(value)
    except ValueError:
        raise BadInputError(f"index_mode must be 'error' or 'clamp', not {value!r}", value=value) from None


class InferenceSession:
    """Runs an ONNX model with its gather/scatter nodes executed as DirectML executes them.

    A drop-in for ``onnxruntime.InferenceSession``: ``run``, ``get_inputs``, ``get_outputs``,
    ``get_modelmeta`` and ``get_providers`` behave the same way. After each ``run``, ``last_run_record``
    says which gather/scatter nodes ran from their DirectML descriptors and which ran on onnxruntime's CPU
    provider, and why.

    Args:
        model: a model file path, serialized model bytes, or an ``onnx.ModelProto`` (not modified).
        feature_level: the DirectML feature level to emulate (``FeatureLevel`` or ``"5_0"``, ``"0x5000"``,
            ``"DML_FEATURE_LEVEL_5_0"``). Defaults to 5_0, what onnxruntime-directml requires.
        providers: accepted for compatibility with onnxruntime. The partitioned engine always runs
            non-emulated nodes on ``CPUExecutionProvider``; the directml engine passes them on.
        engine: ``"partitioned"`` (default: gather/scatter nodes run through dmlshim's DirectML kernels,
            everything else in onnxruntime CPU sessions), ``"directml"`` (the whole model on onnxruntime's
            real ``DmlExecutionProvider``, Windows only), or any name given to
            :func:`dmlshim.execute.engine.register_engine`.
        index_mode: ``"error"`` (an out-of-range index raises ``IndexOutOfRangeError``, as ONNX says) or
            ``"clamp"`` (clamped into range, a defined stand-in for DirectML's undefined results).
        sess_options: ``onnxruntime.SessionOptions`` used for every onnxruntime session the engine builds.

    Raises:
        BadModelError: the model cannot be read or onnxruntime rejects it.
        BadInputError: a bad feature level or index mode.
        EngineUnavailableError: the engine is unknown or cannot run on this machine.
    """

    def __init__(
        self,
        model: ModelSource,
        feature_level: FeatureLevel | str | int = DEFAULT_FEATURE_LEVEL,
        providers: Sequence[Any] | None = None,
        *,
        engine: str = "partitioned",
        index_mode: IndexMode | str = IndexMode.ERROR,
        sess_options: Any = None,
    ) -> None:
        self._feature_level = _parse_feature_level(feature_level)
        self._index_mode = _parse_index_mode(index_mode)
        factory = get_engine_factory(engine)
        loaded = load_model(model)
        self._model_path = loaded.path
        graph = loaded.proto.graph
        init_names = {t.name for t in graph.initializer}
        self._inputs = tuple(node_arg(v) for v in graph.input if v.name not in init_names)
        overridable = tuple(node_arg(v) for v in graph.input if v.name in init_names)
        self._outputs = tuple(node_arg(v) for v in _typed_outputs(loaded.proto))
        self._output_names = [o.name for o in self._outputs]
        self._known_outputs = frozenset(self._output_names)
        self._validator = FeedValidator(self._inputs, overridable)
        self._meta = ModelMetadata(
            producer_name=loaded.proto.producer_name,
            graph_name=graph.name,
            domain=loaded.proto.domain,
            description=loaded.proto.doc_string,
            graph_description=graph.doc_string,
            version=int(loaded.proto.model_version),
            custom_metadata_map={p.key: p.value for p in loaded.proto.metadata_props},
        )
        config = EngineConfig(
            feature_level=self._feature_level,
            index_mode=self._index_mode,
            sess_options=sess_options,
            providers=tuple(providers) if providers is not None else None,
            model_path=loaded.path,
        )
        try:
            self._engine: Engine = factory(loaded.proto, config)
        except DmlShimError as exc:
            if exc.path is None:
                exc.path = loaded.path
            raise
        self._last_run_record: RunRecord | None = None
        logger.debug("session for %s ready (engine %s)", loaded.path or "<in-memory model>", engine)

    @property
    def engine(self) -> Engine:
        """The engine that runs the model."""
        return self._engine

    @property
    def feature_level(self) -> FeatureLevel:
        """The DirectML feature level emulated."""
        return self._feature_level

    @property
    def index_mode(self) -> IndexMode:
        """The out-of-range index policy."""
        return self._index_mode

    @property
    def model_path(self) -> str | None:
        """The model file, when the session was built from a path."""
        return self._model_path

    @property
    def last_run_record(self) -> RunRecord | None:
        """The record of the latest ``run`` (None before the first run)."""
        return self._last_run_record

    def get_inputs(self) -> list[NodeArg]:
        """The graph inputs a caller feeds (initializers excluded), like onnxruntime's ``NodeArg`` list."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs, in graph order."""
        return list(self._outputs)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (producer, graph name, domain, description, version, custom map)."""
        return self._meta

    def get_providers(self) -> list[str]:
        """The providers nodes run on, e.g. ``["DmlShimExecutionProvider", "CPUExecutionProvider"]``."""
        return list(self._engine.get_providers())

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        """Compute graph outputs.

        Args:
            output_names: the outputs wanted, or None for all of them in graph order.
            input_feed: one array per graph input, by name. Arrays are never modified.
            run_options: an ``onnxruntime.RunOptions`` passed to the onnxruntime sessions, or None.

        Returns:
            The outputs, in the order asked for.

        Raises:
            BadInputError: a missing or unknown feed, a wrong dtype or shape, an unknown output name, or a
                failure of onnxruntime on these inputs.
            IndexOutOfRangeError: an index out of range in an emulated node (``index_mode="error"``).
        """
        if output_names is None:
            names: Sequence[str] = self._output_names
        else:
            names = list(output_names)
            for name in names:
                if name not in self._known_outputs:
                    raise BadInputError(
                        f"{name!r} is not an output of the model (outputs: {', '.join(self._output_names)})",
                        tensor=name,
                    )
        feeds = self._validator.validate(input_feed)
        outputs, record = self._engine.run(names, feeds, run_options=run_options)
        self._last_run_record = record
        return outputs
