"""The arguments of ``InferenceSession`` that are not onnxruntime objects: feature level, index mode,
onnxruntime's extra keyword arguments, and which engine runs the session."""

from __future__ import annotations

import difflib
from typing import Any

from ..dml.enums import FeatureLevel
from ..errors import BadInputError
from ..kernels.options import IndexMode
from .providers import DML_EP, ProviderChoice, warn_caller

NO_MODEL_VERSION = 2**63 - 1
"""What onnxruntime reports as ``ModelMetadata.version`` when the model sets no ``model_version``."""

_ORT_KWARGS = ("enable_fallback", "read_config_from_model", "disabled_optimizers")
_DMLSHIM_KWARGS = ("feature_level", "engine", "index_mode")


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
    # onnxruntime ignores keyword arguments it does not know, so a program passing one runs there: it runs
    # here too, with a warning, unless the name is a misspelling of one of dmlshim's own.
    misspelt = [n for n in unknown if difflib.get_close_matches(n, _DMLSHIM_KWARGS, n=1, cutoff=0.75)]
    if misspelt:
        raise BadInputError(
            f"unknown keyword argument(s) {', '.join(misspelt)}; InferenceSession takes onnxruntime's "
            "(path_or_bytes, sess_options, providers, provider_options, enable_fallback=) and dmlshim's "
            "feature_level=, engine=, index_mode=",
            value=misspelt,
        )
    if unknown:
        warn_caller(
            f"InferenceSession ignores the keyword argument(s) {', '.join(unknown)}, as onnxruntime "
            "ignores keyword arguments it does not know"
        )
    return int(kwargs.get("enable_fallback", 1)) == 1


def disabled_optimizers(kwargs: dict[str, Any]) -> frozenset[str]:
    """onnxruntime's ``disabled_optimizers=`` keyword (``onnxruntime.transformers.optimizer`` passes it):
    the optimizers every onnxruntime session dmlshim builds for the session leaves out, as onnxruntime's
    own session would (:func:`dmlshim.ort.real.optimizers_disabled`)."""
    names = kwargs.get("disabled_optimizers")
    return frozenset(str(n) for n in names) if names else frozenset()


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
