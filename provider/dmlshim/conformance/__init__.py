"""Conformance suites from sources outside dmlshim, run through dmlshim's descriptors and kernels."""

from __future__ import annotations

from .backend_suite import CaseOutcome, SuiteResult, run_suite

__all__ = ["CaseOutcome", "SuiteResult", "run_suite"]
