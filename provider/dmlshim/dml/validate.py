"""Check a gather/scatter operator descriptor against every rule of the DirectML docs at a feature level.

``validate`` returns every violation at once, so a translator or a report can show them all. The rules
themselves are in ``rules`` (codes), ``rule_checks`` (the checks that describe violations) and
``fast_accept`` (the quick proof of validity tried first).
"""

from __future__ import annotations

from ..errors import InvalidDescriptorError
from .enums import FeatureLevel
from .fast_accept import accepted
from .operators import OperatorDesc
from .rule_checks import OPERATOR_CHECKS, find_violations
from .rules import RULES, Violation

__all__ = ["RULES", "Violation", "check", "min_feature_level", "validate"]


def validate(desc: OperatorDesc, feature_level: FeatureLevel) -> tuple[Violation, ...]:
    """Every DirectML rule ``desc`` breaks on a device of ``feature_level``.

    When the operator does not exist at ``feature_level`` only OPERATOR_UNAVAILABLE and the level-independent
    rules are reported: there is no support table to check the tensors against.

    Args:
        desc: one of the six gather/scatter descriptors.
        feature_level: the DML_FEATURE_LEVEL the descriptor is meant for.

    Returns:
        All violations, in a stable order (operator, each tensor, dimension counts, data types, fields,
        Sizes relations); empty when DirectML would accept the descriptor.

    Raises:
        TypeError: ``desc`` is not a gather/scatter operator descriptor.
    """
    if type(desc) not in OPERATOR_CHECKS:
        raise TypeError(f"not a DirectML gather/scatter operator descriptor: {type(desc).__name__}")
    fl = feature_level if type(feature_level) is FeatureLevel else FeatureLevel(feature_level)
    if accepted(desc, fl):
        return ()
    return find_violations(desc, fl)


def check(
    desc: OperatorDesc, feature_level: FeatureLevel, *, node: str | None = None, op_type: str | None = None
) -> None:
    """Raise if ``desc`` breaks any DirectML rule at ``feature_level``.

    Args:
        desc: one of the six gather/scatter descriptors.
        feature_level: the DML_FEATURE_LEVEL the descriptor is meant for.
        node: the ONNX node the descriptor was built for, if any (carried by the error).
        op_type: the ONNX op type, if any; defaults to the DirectML operator name.

    Raises:
        InvalidDescriptorError: with ``violations`` holding every broken rule and a message listing them all.
    """
    violations = validate(desc, feature_level)
    if not violations:
        return
    fl = FeatureLevel(feature_level)
    listed = "; ".join(f"({i}) {v}" for i, v in enumerate(violations, 1))
    message = (
        f"{desc.operator_type.dml_name} descriptor breaks {len(violations)} DirectML rule(s) at "
        f"{fl.dml_name}: {listed}"
    )
    first = violations[0]
    tensor = first.field.split(".", 1)[0] if "." in first.field else None
    raise InvalidDescriptorError(
        message,
        violations=violations,
        rule=first.rule,
        value=first.value,
        node=node,
        op_type=op_type or desc.operator_type.dml_name,
        tensor=tensor,
    )


def min_feature_level(desc: OperatorDesc) -> FeatureLevel | None:
    """The lowest feature level at which ``desc`` is valid, or None if no level accepts it.

    Args:
        desc: one of the six gather/scatter descriptors.
    """
    for fl in sorted(FeatureLevel):
        if not validate(desc, fl):
            return fl
    return None
