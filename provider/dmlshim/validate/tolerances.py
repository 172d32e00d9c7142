"""Tolerances per output (``--atol NAME:VALUE``), and the verdict re-decided with them.

The policy, stated once: against the like-for-like reference the comparison is exact unless a tolerance is
given (the gather/scatter nodes copy values); against onnxruntime running the whole model, and against
reference outputs from a file (another framework computed those), a tolerance fitting each output's dtype
(:data:`dmlshim.comparison.DTYPE_TOLERANCE`) applies unless a tolerance is given. So it does against real
DirectML (``--engine directml``): its float math is the device's, not onnxruntime CPU's (the gathers and
scatters themselves copy bits: ``dmlshim compare --run-directml`` holds them to bit equality). Integer, bool
and string outputs are always compared exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import BadInputError
from .results import CAUSE_OTHER_NODES, CAUSE_UNEXPLAINED, OutputComparison, ValidationReport
from .statistics import error_statistics
from .value_kinds import fitting_tolerance, is_array
from .verdict import compare_arrays


@dataclass(frozen=True)
class Tolerances:
    """A default tolerance and per-output ones.

    Attributes:
        rtol, atol: the default (0, 0: exact against the like-for-like reference).
        given: whether the user gave a default (``--rtol``/``--atol`` without a name).
        per_output: ``name -> (rtol, atol)`` for outputs given their own tolerance.
    """

    rtol: float = 0.0
    atol: float = 0.0
    given: bool = False
    per_output: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def for_output(self, name: str) -> tuple[float, float]:
        """(rtol, atol) of one output."""
        return self.per_output.get(name, (self.rtol, self.atol))

    def has_own(self, name: str) -> bool:
        """Whether ``name`` was given a tolerance (its own, or the default)."""
        return self.given or name in self.per_output


def _value(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"{flag} {text!r}: not a number", value=text) from None
    if not (value >= 0 and math.isfinite(value)):
        raise BadInputError(f"{flag} {text!r}: a tolerance must be a finite number >= 0", value=text)
    return value


def parse_tolerances(rtols: Iterable[str] | None, atols: Iterable[str] | None) -> Tolerances:
    """``--rtol``/``--atol`` values: ``VALUE`` sets the default, ``NAME:VALUE`` one output's (split at
    the last colon, so output names may hold colons).

    Raises:
        BadInputError: a value that is not a finite number >= 0.
    """
    default = {"rtol": 0.0, "atol": 0.0}
    per: dict[str, dict[str, float]] = {}
    given = False
    for flag, values in (("rtol", rtols or ()), ("atol", atols or ())):
        for text in values:
            name, sep, number = str(text).rpartition(":")
            if not sep:
                default[flag] = _value(number, f"--{flag}")
                given = True
            else:
                if not name:
                    raise BadInputError(f"--{flag} {text!r}: the output name before ':' is empty", value=text)
                per.setdefault(name, {})[flag] = _value(number, f"--{flag}")
    per_output = {
        name: (pair.get("rtol", default["rtol"]), pair.get("atol", default["atol"]))
        for name, pair in per.items()
    }
    return Tolerances(default["rtol"], default["atol"], given, per_output)


def check_names(tolerances: Tolerances, outputs: Iterable[str]) -> None:
    """Per-output tolerances must name outputs of the model.

    Raises:
        BadInputError: a name that is no output, with the outputs listed.
    """
    known = list(outputs)
    unknown = sorted(set(tolerances.per_output) - set(known))
    if unknown:
        raise BadInputError(
            f"--atol/--rtol name(s) {unknown} are not outputs of the model (outputs: {', '.join(known)})",
            value=unknown[0],
        )


def recompare(o: OutputComparison, rtol: float, atol: float) -> OutputComparison:
    """``o`` compared again with the like-for-like reference under (rtol, atol), with statistics."""
    if o.dmlshim is None or o.reference is None or o.problem is not None:
        return o
    got, ref = o.dmlshim, o.reference
    c = compare_arrays(got, ref, rtol, atol, exact=rtol == 0 and atol == 0)
    whole = o.whole_model
    if c.match and whole is not None and whole.cause == CAUSE_UNEXPLAINED:
        # The whole-model cause was decided on the exact comparison; within this tolerance the output
        # agrees with the like-for-like reference, so what the whole model differs by is the other nodes'
        # (with --engine directml: DirectML's float math), not "unexplained".
        whole = dataclasses.replace(whole, cause=CAUSE_OTHER_NODES)
    return dataclasses.replace(
        o,
        whole_model=whole,
        match=c.match,
        mismatches=c.mismatches,
        max_abs_diff=c.max_abs_diff,
        first_mismatch=c.first_mismatch,
        statistics=error_statistics(got, ref, rtol, atol),
    )


def device_tolerances(report: ValidationReport, tolerances: Tolerances) -> Tolerances:
    """``tolerances`` with every float output the user gave no tolerance of its own compared within its
    dtype's tolerance (the policy above for real DirectML's outputs)."""
    if tolerances.given:
        return tolerances
    own = dict(tolerances.per_output)
    for o in report.outputs:
        if o.name in own or o.reference is None or not is_array(o.reference):
            continue
        reference = np.asarray(o.reference)
        if reference.dtype.kind in "fc":
            own[o.name] = fitting_tolerance(reference)
    return dataclasses.replace(tolerances, per_output=own)


def apply_tolerances(report: ValidationReport, tolerances: Tolerances) -> ValidationReport:
    """The report with every output compared under its own tolerance, statistics attached, and the
    verdict decided again."""
    check_names(tolerances, [o.name for o in report.outputs])
    outputs = []
    for o in report.outputs:
        rtol, atol = tolerances.for_output(o.name)
        if (rtol, atol) == (report.rtol, report.atol):
            stats = (
                None
                if o.dmlshim is None or o.reference is None
                else error_statistics(o.dmlshim, o.reference, rtol, atol)
            )
            outputs.append(dataclasses.replace(o, statistics=stats))
        else:
            outputs.append(recompare(o, rtol, atol))
    own = tuple((n, r, a) for n, (r, a) in tolerances.per_output.items())
    return dataclasses.replace(
        report,
        outputs=tuple(outputs),
        match=all(o.match for o in outputs),
        tolerances=own,
    )
