"""Validate a model before it ships to DirectML: run it through dmlshim and through onnxruntime, compare.

:func:`validate_model` runs the model three times on the same feeds (:mod:`.references`): through the
partitioned engine (gather/scatter nodes from their DirectML descriptors), through the same partition with
onnxruntime running the gather/scatter nodes (the like-for-like reference that decides the verdict,
compared exactly), and through onnxruntime as a whole (information, with a tolerance fitting each dtype).
Every gather/scatter node's inputs and output are compared between the first two runs, so a difference is
pinned to the node whose inputs agreed and whose output did not (:mod:`.attribution`).

The report also lists, per gather/scatter node, the ``dmlshim inspect`` record plus where the node ran,
and warnings that matter on real DirectML: duplicate scatter indices (DirectML guarantees no winner),
negative indices below DML_FEATURE_LEVEL_3_0, nodes onnxruntime's DirectML provider would run on the CPU,
nodes that fell back, nodes inside control flow that were not emulated.
"""

from __future__ import annotations

from .references import (
    DEFAULT_OPTIMIZATION_LEVEL,
    OPTIMIZATION_LEVELS,
    reference_session,
)
from .results import (
    SCHEMA_VERSION,
    Comparison,
    Mismatch,
    NodeValidation,
    OutputComparison,
    ValidationReport,
    ValidationWarning,
    WholeModelComparison,
)
from .verdict import compare_arrays, validate_model

__all__ = [
    "DEFAULT_OPTIMIZATION_LEVEL",
    "OPTIMIZATION_LEVELS",
    "SCHEMA_VERSION",
    "Comparison",
    "Mismatch",
    "NodeValidation",
    "OutputComparison",
    "ValidationReport",
    "ValidationWarning",
    "WholeModelComparison",
    "compare_arrays",
    "reference_session",
    "validate_model",
]
