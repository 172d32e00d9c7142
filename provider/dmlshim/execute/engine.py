"""The interface every execution engine implements (partitioned, custom-op, directml)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from ..dml.enums import FeatureLevel
from ..errors import EngineUnavailableError
from ..kernels.options import IndexMode
from .record import RunRecord


class Engine(Protocol):
    """Runs a prepared model. Built once per session; ``run`` may be called many times."""

    name: str

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray], *, run_options: Any = None
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Compute the named graph outputs from validated feeds; return them and the run's record.

        ``run_options`` is the onnxruntime ``RunOptions`` the caller passed to ``InferenceSession.run``
        (or None); engines hand it to the onnxruntime sessions they run.
        """
        ...

    def get_providers(self) -> list[str]:
        """The execution providers this engine runs nodes on, most preferred first."""
        ...


@dataclass(frozen=True)
class EngineConfig:
    """What every engine is built with (besides the model).

    Attributes:
        feature_level: the DirectML feature level emulated (or required of the real device).
        index_mode: the kernels' out-of-range policy (``"error"`` or ``"clamp"``).
        sess_options: onnxruntime ``SessionOptions`` for every onnxruntime session the engine creates, or
            None for onnxruntime's defaults.
        providers: the ``providers`` argument the caller gave ``InferenceSession``, if any.
        model_path: the model file, when the model came from one (for messages).
        whole_model_check: let the partitioned engine answer a run from one whole-model onnxruntime run
            when every emulated node's kernel reproduces onnxruntime's value bit for bit (see
            ``dmlshim.execute.engines.whole_model``); False always walks the partitions.
        own_options: makes the options of each onnxruntime session the engine builds when
            ``sess_options`` is None (validate: one thread at its optimization level), in place of
            onnxruntime's defaults; the options are dmlshim's own, so large weights are still read from the
            model's files rather than serialized into each session.
        fresh_options: makes a new options object equal to ``sess_options`` (dmlshim's own copy of the
            caller's) for a session that must add to it: the whole-model check then hands its large
            weights through ``add_external_initializers`` instead of serializing them (None: the options are
            the caller's own object, or None).
        full_check: the whole-model check proves every element of every verified scatter's output on
            every run (validate; ``DMLSHIM_FULL_CHECK=1``); False proves the elements a scatter does not
            write on its first runs only (``dmlshim.execute.plan.steps.PROVE_RUNS``).
        profiling: the session is profiled: a run the whole-model check answers runs (and the profile
            times) every emulated node's kernel, none taken from onnxruntime unrun (no lean gathers, no
            lean check, every scatter verified on every run), as under ``full_check``.
    """

    feature_level: FeatureLevel
    index_mode: IndexMode = IndexMode.ERROR
    sess_options: Any = None
    providers: tuple[Any, ...] | None = None
    model_path: str | None = None
    whole_model_check: bool = True
    own_options: Callable[[], Any] | None = None
    fresh_options: Callable[[], Any] | None = None
    full_check: bool = field(default_factory=lambda: os.environ.get("DMLSHIM_FULL_CHECK", "") == "1")
    profiling: bool = False

    def options_object(self) -> Any:
        """The options every session of the engine starts from: the caller's, dmlshim's own, or None
        (onnxruntime's defaults)."""
        if self.sess_options is not None:
            return self.sess_options
        return self.own_options() if self.own_options is not None else None


class EngineFactory(Protocol):
    """Builds an engine for a model; called once per ``InferenceSession``."""

    def __call__(self, model: onnx.ModelProto, config: EngineConfig) -> Engine: ...


_BUILTIN_ENGINES: dict[str, str] = {
    "partitioned": "dmlshim.execute.engines.partitioned:PartitionedEngine",
    "directml": "dmlshim.directml.engine:create_engine",
    "customop": "dmlshim.execute.engines.custom_op:create_engine",
    "cpu": "dmlshim.execute.engines.cpu:create_engine",
}
"""Engines shipped with dmlshim: name -> ``module:factory``, imported on first use."""

_ENGINES: dict[str, EngineFactory] = {}


def register_engine(name: str, factory: EngineFactory | str) -> None:
    """Make an engine available to ``InferenceSession(engine=name)``.

    Args:
        name: the engine name.
        factory: a callable ``(model, config) -> Engine``, or ``"module:attribute"`` naming one (imported
            when first used, so registering costs nothing).
    """
    if isinstance(factory, str):
        _BUILTIN_ENGINES[name] = factory
        _ENGINES.pop(name, None)
    else:
        _ENGINES[name] = factory


def engine_names() -> tuple[str, ...]:
    """The names ``InferenceSession(engine=...)`` accepts."""
    return tuple(sorted(set(_BUILTIN_ENGINES) | set(_ENGINES)))


def get_engine_factory(name: str) -> EngineFactory:
    """The factory registered under ``name``.

    Raises:
        EngineUnavailableError: no engine has that name.
    """
    factory = _ENGINES.get(name)
    if factory is not None:
        return factory
    target = _BUILTIN_ENGINES.get(name)
    if target is None:
        raise EngineUnavailableError(
            f"unknown engine {name!r}; available engines: {', '.join(engine_names())}", value=name
        )
    module_name, _, attr = target.partition(":")
    loaded: EngineFactory = getattr(importlib.import_module(module_name), attr)
    _ENGINES[name] = loaded
    return loaded
