"""Fetching around onnxruntime-directml's empty-output read-back (docs/directml-linux.md, "Empty outputs").

When one of the outputs a run fetches is computed on the DirectML provider and holds no element (a
Gather of zero indices, a detection head that found nothing at one level), onnxruntime-directml reads
back none of that run's DirectML outputs: its batched GPU-to-CPU copy gives up at the empty tensor, and
every other DirectML output comes back with the right shape and whatever the CPU buffer held before
(zeros, pointer-like integers, floats around 1e11). Seen with onnxruntime 1.24 and DirectML 1.15.4 on a
3-node model and on Keypoint R-CNN. An empty value needs no read-back (its shape and dtype are its whole
value), so the other outputs are fetched again without the empty ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)


def _empty(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.size == 0


def fetch_around_empty(
    run: Callable[[list[str]], list[np.ndarray]], names: Sequence[str]
) -> list[np.ndarray]:
    """``run(names)``'s values, made safe from the empty-output read-back fault.

    ``run`` fetches the named outputs in one run. When some of them come back empty and others not, the
    non-empty ones are fetched again in a run that asks for no empty output, until a run returns no
    empty value among several (each round fetches fewer, so it ends); the empty values are kept from the
    run that returned them.
    """
    wanted = list(names)
    values: list[np.ndarray | None] = [None] * len(wanted)
    pending = list(range(len(wanted)))
    while pending:
        got = run([wanted[i] for i in pending])
        empty = [i for i, v in zip(pending, got, strict=True) if _empty(v)]
        if not empty or len(empty) == len(pending):
            for i, v in zip(pending, got, strict=True):
                values[i] = v
            break
        for i, v in zip(pending, got, strict=True):
            if _empty(v):
                values[i] = v
        pending = [i for i in pending if not _empty(values[i])]
        logger.info(
            "real DirectML: %d fetched output(s) came back empty (first: %s); fetching the other %d again "
            "without them (onnxruntime-directml reads back no DirectML output of a run that fetches an "
            "empty one)",
            len(empty),
            wanted[empty[0]],
            len(pending),
        )
    return values  # type: ignore[return-value]
