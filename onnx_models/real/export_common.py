"""What the corpus modules share: the export description (:class:`Built`, :class:`Spec`) and seeded
sample makers. Part of ``export_real.py``'s export tooling; needs torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - only for people regenerating the files
    raise SystemExit("the corpus export needs torch and onnxscript: pip install '.[export]'") from exc

Inputs = dict[str, "torch.Tensor"]


@dataclass(frozen=True)
class Built:
    """A module ready to export: its inputs (in forward-argument order) and how its shapes vary."""

    module: nn.Module
    inputs: Inputs
    output_names: Sequence[str]
    #: dynamo: ``dynamic_shapes`` keyed by forward argument name (None: all static).
    dynamo_shapes: dict[str, Any] | None = None
    #: legacy: ``dynamic_axes`` keyed by input/output name.
    legacy_axes: dict[str, dict[int, str]] | None = None
    #: A second sample with other symbolic sizes, checked in onnxruntime against PyTorch.
    other_inputs: Inputs | None = None


@dataclass(frozen=True)
class Spec:
    """One network of the corpus; each exporter in ``exporters`` writes ``<name>_<exporter>.onnx``."""

    name: str
    group: str  # "transformers", "torch" or "torchvision": the library it needs
    architecture: str
    description: str
    build: Callable[[], Built]
    exporters: Sequence[str] = ("dynamo", "torchscript")
    dtype: str = "float32"
    rtol: float = 1e-4
    atol: float = 1e-5
    notes: Sequence[str] = field(default_factory=tuple)


def seed(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def eager_attention(model: nn.Module) -> nn.Module:
    """Switch a transformers model to its eager attention: with SDPA, dynamo's decomposition views a
    non-contiguous attention output under symbolic sizes and fails (T5, Swin)."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
    return model


def ids(rng: np.random.Generator, vocab: int, *shape: int) -> torch.Tensor:
    return torch.from_numpy(rng.integers(0, vocab, size=shape, dtype=np.int64))


def randn(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> torch.Tensor:
    return torch.from_numpy(rng.standard_normal(shape).astype(dtype))
