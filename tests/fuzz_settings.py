"""Shared settings and helpers of the error-path and fuzz tests (no tests here).

Hypothesis profiles (pick one with ``HYPOTHESIS_PROFILE``; the default is ``ci``)::

    ci    ~60 examples per property, derandomized: the same examples every run, a few seconds each
    long  2000 examples per property, random: for a soak run
    dev   10 examples, derandomized: quick local iteration

The byte-mutation fuzzer reads ``DMLSHIM_FUZZ_MUTANTS`` (default 200 mutants in total) and
``DMLSHIM_FUZZ_SEED`` (default 0). A long run::

    HYPOTHESIS_PROFILE=long DMLSHIM_FUZZ_MUTANTS=5000 DMLSHIM_FUZZ_SEED=$RANDOM \\
        python -m pytest -q -p no:cacheprovider tests/test_fuzz_properties.py tests/test_fuzz_model_bytes.py
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from hypothesis import HealthCheck, settings
from onnx import helper

from tests.oracle import IR_VERSION

_COMMON: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=60, derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=2000, derandomize=False, **_COMMON)
settings.register_profile("dev", max_examples=10, derandomize=True, **_COMMON)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
FUZZ = settings.get_profile(PROFILE if PROFILE in ("ci", "long", "dev") else "ci")
"""Decorate a ``@given`` test with ``@FUZZ`` to apply the chosen profile to it alone."""

FUZZ_MUTANTS = int(os.environ.get("DMLSHIM_FUZZ_MUTANTS", "200"))
FUZZ_SEED = int(os.environ.get("DMLSHIM_FUZZ_SEED", "0"))

GATHER_SCATTER_OPS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*argv: object) -> CliResult:
    """``dmlshim ARGV`` in-process, stdout and stderr captured; SystemExit (argparse) becomes its code."""
    from dmlshim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    root = logging.getLogger()
    handlers = list(root.handlers)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        finally:
            # main() calls logging.basicConfig; keep the test process's logging as it was.
            root.handlers[:] = handlers
    return CliResult(int(code), out.getvalue(), err.getvalue())


def assert_cli_error(code_got: int, err: str, *needles: str, code: int = 2) -> None:
    """Exit ``code``, one ``dmlshim CMD: error: ...`` paragraph holding every needle, no traceback."""
    assert code_got == code, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if re.match(r"dmlshim \w+: error: ", line)]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], (needle, err)


def one_node_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 13,
    *,
    name: str = "node0",
    output_shape: Sequence[int | str | None] | None = None,
) -> onnx.ModelProto:
    """One named node fed by graph inputs of these arrays' static shapes and types."""
    graph_inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in inputs.items()
    ]
    node = helper.make_node(op_type, list(inputs), ["y"], name=name, **dict(attrs or {}))
    elem = graph_inputs[0].type.tensor_type.elem_type
    out = (
        helper.make_tensor_value_info("y", elem, list(output_shape))
        if output_shape is not None
        else onnx.ValueInfoProto(name="y")
    )
    graph = helper.make_graph([node], f"{op_type}_case", graph_inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def opset_for(op_type: str) -> int:
    """Scatter was removed at opset 11; everything else is tested at 13 (ScatterND reductions at 16+)."""
    return 10 if op_type == "Scatter" else 13
