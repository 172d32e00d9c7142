"""Conformance suites from sources outside dmlshim, run through dmlshim's descriptors and kernels."""
