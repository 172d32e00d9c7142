"""Which way the partitioned engine answers a run: the whole-model check or the partitioned steps, chosen
per session by measuring both on the first runs.

The whole-model check (:mod:`dmlshim.execute.engines.whole_model`) saves the onnxruntime calls and the lost
fusions at every boundary, but computes every emulated node twice (in onnxruntime and in the kernel) and
compares the results; with few segments and large emulated outputs (the KV-cache ScatterND of a decoder
step) the partitioned steps are cheaper. Neither is right for every model, so the first runs alternate
between them (one untimed warm-up each: it builds sessions and fills caches, then
:data:`TIMED_RUNS` timed runs each) and every later run takes the cheaper one. Models with large weights
keep the check without a trial (:data:`TRIAL_MAX_WEIGHT_BYTES`), and so do sessions optimized beyond
basic: partition boundaries stop onnxruntime's extended fusions, whose float results differ in the last
bits, so only at disabled or basic optimization do both paths give onnxruntime's outputs bit for bit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import onnxruntime as ort

from ..engine import EngineConfig
from ..plan.checks import EmulatedIO
from ..proofs.gather_given import GIVEN_OPS
from ..record import PATH_CHECK, PATH_PARTITIONED

logger = logging.getLogger(__name__)


def gathers_given(emulated: Sequence[EmulatedIO], config: EngineConfig) -> bool:
    """Whether the whole-model check pays below two CPU segments
    (:data:`dmlshim.execute.engines.partitioned.MIN_SEGMENTS_FOR_CHECK`): every emulated node is a
    gather whose output the check takes from onnxruntime after its first proved runs
    (:mod:`dmlshim.execute.proofs.gather_given`), so that a run then costs one onnxruntime call and an
    index range proof per gather, where the partitioned steps run every gather's kernel (a one-node
    model's whole run). Not under ``full_check``, which computes every gather on every run anyway."""
    return bool(emulated) and not config.full_check and all(io.op_type in GIVEN_OPS for io in emulated)


TIMED_RUNS = 2
"""Timed runs of each path before the choice (after one warm-up run of each)."""

TRIAL_MAX_WEIGHT_BYTES = 64 * 2**20
"""Models whose initializers weigh more keep the check without a trial: trying the partitioned steps
builds every CPU segment's session, which costs a second copy of the weights in onnxruntime and, on a
650 MB decoder step, 17 s (measured, bench/realistic.py) -- more than the trial could ever win back."""


def chooser_for_check(config: EngineConfig, weight_bytes: int) -> PathChooser:
    """The chooser of a session that has the whole-model check: a trial of both paths only where both give
    onnxruntime's values bit for bit (optimization at most basic: partition boundaries stop onnxruntime's
    extended fusions, whose float results differ in the last bits) and the weights are light enough to
    be worth a second copy (:data:`TRIAL_MAX_WEIGHT_BYTES`)."""
    exact = partitions_exact(config.options_object())
    return PathChooser(trial=exact and weight_bytes <= TRIAL_MAX_WEIGHT_BYTES)


def partitions_exact(options: Any) -> bool:
    """Whether partitioned runs under ``options`` (None: onnxruntime's defaults) give onnxruntime's values
    bit for bit: optimization at most basic (partition boundaries stop onnxruntime's extended fusions)."""
    level = (
        options.graph_optimization_level if options is not None else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    return level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)


class PathChooser:
    """Alternates the two paths over the first runs, then keeps the faster (least time of its timed runs,
    the least disturbed by other processes).

    Args:
        clock: seconds, monotonic (tests give their own).
        trial: measure both paths; False keeps the whole-model check from the first run.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter, *, trial: bool = True) -> None:
        self.clock = clock
        self._schedule = [PATH_CHECK, PATH_PARTITIONED] * (1 + TIMED_RUNS)
        self._runs = 0
        self._times: dict[str, list[float]] = {PATH_CHECK: [], PATH_PARTITIONED: []}
        self._lock = threading.Lock()
        self.chosen: str | None = None if trial else PATH_CHECK
        """The path kept once the trial is over (None during it)."""

    def next_path(self) -> tuple[str, int]:
        """The path the next run should try, and the run's number (-1 once the choice is made)."""
        if self.chosen is not None:
            return self.chosen, -1
        with self._lock:
            run = self._runs
            self._runs += 1
            return self._schedule[min(run, len(self._schedule) - 1)], run

    def settle(self, path: str) -> None:
        """Keep ``path`` from now on (the check gave up, say)."""
        self.chosen = path

    def observe(self, tried: str, answered: str, seconds: float, run: int) -> str | None:
        """Note that run ``run`` (0-based, as :meth:`next_path` handed them out) tried ``tried`` and was
        answered by ``answered`` in ``seconds``; the path just chosen when this ends the trial, else None."""
        if self.chosen is not None or run < 0:
            return None
        with self._lock:
            if tried == answered and run >= 2:  # the first run of each path is its warm-up
                self._times[answered].append(seconds)
            if self._runs < len(self._schedule) or self.chosen is not None:
                return None
            check, parts = self._times[PATH_CHECK], self._times[PATH_PARTITIONED]
            if not check:
                self.chosen = PATH_PARTITIONED
            elif not parts:
                self.chosen = PATH_CHECK
            else:
                self.chosen = PATH_CHECK if min(check) <= min(parts) else PATH_PARTITIONED
            logger.info(
                "runs answered by the %s (whole-model check %s ms, partitioned %s ms)",
                self.chosen,
                [round(t * 1e3, 2) for t in check],
                [round(t * 1e3, 2) for t in parts],
            )
            return self.chosen

    @property
    def runs(self) -> int:
        """Runs handed a path during the trial."""
        return self._runs
