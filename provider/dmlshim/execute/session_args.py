"""The arguments of ``InferenceSession`` that are not onnxruntime objects: feature level, index mode,
onnxruntime's extra keyword arguments, and which engine runs the session."""

from __future__ import annotations

from typing import Any

from ..dml.enums import FeatureLevel
from ..errors import BadInputError, NotSupportedError
from ..kernels.options import IndexMode
from .providers import DML_EP, ProviderChoice

NO_MODEL_VERSION = 2**63 - 1
"""What onnxruntime reports as ``ModelMetadata.version`` when the model sets no ``model_version``."""

_ORT_KWARGS = ("enable_fallback", "read_config_from_model", "disabled_optimizers")


def parse_feature_level(value: FeatureLevel | str | int) -> FeatureLevel:
    if isinstance(value, FeatureLevel):
        return value
    try:
        return FeatureLevel.parse(value)
    except ValueError as exc:
        raise BadInputError(str(exc), value=value) from exc


def parse_index_mode(value: IndexMode | str) -> IndexMode:
    try:
        return IndexMode(value)
    except ValueError:
        raise BadInputError(f"index_mode must be 'error' or 'clamp', not {value!r}", value=value) from None


def fallback_flag(kwargs: dict[str, Any]) -> bool:
    """onnxruntime's keyword arguments: ``enable_fallback`` is kept; the others have no dmlshim meaning."""
    unknown = sorted(set(kwargs) - set(_ORT_KWARGS))
    if unknown:
        raise BadInputError(
            f"unknown keyword argument(s) {', '.join(unknown)}; InferenceSession takes onnxruntime's "
            "(path_or_bytes, sess_options, providers, provider_options, enable_fallback=) and dmlshim's "
            "feature_level=, engine=, index_mode=",
            value=unknown,
        )
    if kwargs.get("disabled_optimizers"):
        raise NotSupportedError(
            "disabled_optimizers is not supported; use the session config entry "
            "'optimization.disable_specified_optimizers' or graph_optimization_level on sess_options, "
            "which dmlshim passes to every onnxruntime session it builds"
        )
    return int(kwargs.get("enable_fallback", 1)) == 1


def resolve_engine(requested: str | None, choice: ProviderChoice) -> str:
    if requested is None:
        return "partitioned" if choice.emulates_dml else "cpu"
    if requested not in ("cpu", "directml") and not choice.emulates_dml:
        raise BadInputError(
            f"engine={requested!r} emulates DirectML, but providers {list(choice.names)} leave out "
            f"{DML_EP}; add it to providers, or drop engine= to run the whole model on the CPU",
            value=list(choice.names),
        )
    return requested
