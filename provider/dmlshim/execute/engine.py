"""The interface every execution engine implements (partitioned, custom-op, directml)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from .record import RunRecord


class Engine(Protocol):
    """Runs a prepared model. Built once per session; ``run`` may be called many times."""

    name: str

    def run(
        self, output_names: Sequence[str], feeds: Mapping[str, np.ndarray]
    ) -> tuple[list[np.ndarray], RunRecord]:
        """Compute the named graph outputs from validated feeds; return them and the run's record."""
        ...
