"""The static size check's cost-only structure: the node a refused value comes from is looked up only when
a value is refused, and one size test serves every check (limits._need_over)."""

from __future__ import annotations

import pytest

from dmlshim.errors import TooLargeError
from dmlshim.limits import check_static_values, check_tensor

FLOAT = 1  # onnx.TensorProto.FLOAT: 4 bytes an element


def _never() -> dict[str, tuple[str, str]]:
    raise AssertionError("the producers were looked up though nothing was refused")


def test_producers_are_not_looked_up_when_everything_fits() -> None:
    shapes = {f"v{i}": ((10, 10), FLOAT) for i in range(100)}
    check_static_values(shapes, producers=_never, limit=400)  # 100 floats: 400 bytes, at the limit


def test_a_refusal_names_the_node_from_the_producers_function() -> None:
    calls: list[int] = []

    def producers() -> dict[str, tuple[str, str]]:
        calls.append(1)
        return {"big": ("make_big", "Expand")}

    shapes = {"small": ((10,), FLOAT), "big": ((101,), FLOAT)}
    with pytest.raises(TooLargeError) as caught:
        check_static_values(shapes, producers=producers, limit=400)
    assert calls == [1]
    assert caught.value.tensor == "big" and caught.value.value == 404
    assert "output 'big' of shape [101]" in str(caught.value)


def test_a_mapping_of_producers_and_check_tensor_give_the_same_refusal() -> None:
    with pytest.raises(TooLargeError) as by_values:
        check_static_values({"x": ((7, 8), FLOAT)}, producers={"x": ("n", "Tile")}, limit=100)
    with pytest.raises(TooLargeError) as by_tensor:
        check_tensor((7, 8), FLOAT, tensor="x", node="n", op_type="Tile", what="output", limit=100)
    assert str(by_values.value) == str(by_tensor.value)
    assert by_values.value.value == by_tensor.value.value == 7 * 8 * 4
