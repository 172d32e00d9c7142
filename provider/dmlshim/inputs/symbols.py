"""The dimensions of a model's graph inputs: static sizes, symbols, and sizes derived from symbols.

A graph input's dimension is one of

* a static size (``dim_value``);
* a symbol (``dim_param`` such as ``batch`` or ``past_sequence_length``): every dimension with the same name
  gets the same size;
* an expression over symbols (``dim_param`` such as ``past_sequence_length + sequence_length`` or
  ``s0 + s1``, as exporters write for derived sizes): computed from the symbols it names;
* unknown (neither field): a symbol of its own, shown as ``INPUT[axis]``.

A caller fixes sizes by input name (the whole shape) or by symbol name (one size); the rest is chosen by
:mod:`dmlshim.inputs.search`.
"""

from __future__ import annotations

import ast
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from ..errors import BadInputError, InputsNotGeneratedError

__all__ = [
    "Dim",
    "InputDims",
    "ModelDims",
    "fix_symbols",
    "model_dims",
    "resolve_input_shapes",
    "shapes_for",
    "split_given",
]

logger = logging.getLogger(__name__)

_BINARY: Mapping[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


@dataclass(frozen=True)
class Dim:
    """One dimension of a graph input.

    Attributes:
        text: as declared: ``"7"``, ``"batch"``, ``"past + seq"``, or ``"?"`` when unknown.
        value: the static size, or None.
        symbol: the symbol this dimension *is* (a plain ``dim_param`` or ``INPUT[axis]`` for an unknown
            dimension), or None for static sizes and expressions.
        names: the symbols an expression uses (empty otherwise).
    """

    text: str
    value: int | None = None
    symbol: str | None = None
    names: tuple[str, ...] = ()
    _expr: ast.expr | None = None

    def size(self, values: Mapping[str, int]) -> int | None:
        """The size under the given symbol values (None if a symbol it needs has no value)."""
        if self.value is not None:
            return self.value
        if self.symbol is not None:
            return values.get(self.symbol)
        if self._expr is not None and all(n in values for n in self.names):
            try:
                return _evaluate(self._expr, values)
            except (ZeroDivisionError, ValueError):
                return None
        return None


@dataclass(frozen=True)
class InputDims:
    """A graph input's name, element type and dimensions (None: no declared shape)."""

    name: str
    elem_type: int
    dims: tuple[Dim, ...] | None


@dataclass(frozen=True)
class ModelDims:
    """Every graph input's dimensions and the symbols they use, in order of first appearance."""

    inputs: tuple[InputDims, ...]
    symbols: tuple[str, ...]

    def shapes(self, values: Mapping[str, int]) -> dict[str, tuple[int, ...]] | None:
        """Every input's shape under the symbol values; None when a derived size is negative or unknown."""
        out: dict[str, tuple[int, ...]] = {}
        for spec in self.inputs:
            if spec.dims is None:
                out[spec.name] = ()
                continue
            dims: list[int] = []
            for d in spec.dims:
                size = d.size(values)
                if size is None or size < 0:
                    return None
                dims.append(size)
            out[spec.name] = tuple(dims)
        return out

    @property
    def named_symbols(self) -> tuple[str, ...]:
        """The symbols that are ``dim_param`` names (not ``INPUT[axis]`` stand-ins for unknown dims)."""
        return tuple(s for s in self.symbols if not s.endswith("]"))


def _evaluate(node: ast.expr, values: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return int(node.value)
    if isinstance(node, ast.Name):
        return int(values[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    raise ValueError("unsupported expression")


def _parse_expression(text: str) -> tuple[ast.expr, tuple[str, ...]] | None:
    """An arithmetic ``dim_param`` (``a + b``, ``2*s0 - 1``) and the names it uses; None otherwise."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(tree, ast.Name):
        return None  # a plain symbol
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in names:
                names.append(node.id)
        elif not isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.USub, ast.Load, *_BINARY)) or (
            isinstance(node, ast.Constant) and not isinstance(node.value, int)
        ):
            return None
    return tree, tuple(names)


def _dim(proto: onnx.TensorShapeProto.Dimension, input_name: str, axis: int) -> Dim:
    if proto.HasField("dim_value") and proto.dim_value >= 0:
        return Dim(str(proto.dim_value), value=int(proto.dim_value))
    if proto.HasField("dim_param") and proto.dim_param.strip():
        text = proto.dim_param
        parsed = _parse_expression(text)
        if parsed is not None:
            expr, names = parsed
            if not names:
                # A constant written as a string ("3" or "2*2"): a static size in disguise.
                try:
                    return Dim(text, value=_evaluate(expr, {}))
                except (ZeroDivisionError, ValueError):
                    pass
            else:
                return Dim(text, names=names, _expr=expr)
        return Dim(text, symbol=text)
    name = f"{input_name}[{axis}]"
    return Dim("?", symbol=name)


def model_dims(model: onnx.ModelProto) -> ModelDims:
    """The dimensions of every graph input that is not also an initializer.

    Raises:
        BadInputError: a graph input is not a tensor (sequences, maps and optionals cannot be generated).
    """
    initializers = {t.name for t in model.graph.initializer}
    inputs: list[InputDims] = []
    symbols: list[str] = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            raise InputsNotGeneratedError(
                f"graph input {vi.name!r} is not a tensor: cannot generate it", tensor=vi.name
            )
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            inputs.append(InputDims(vi.name, int(tt.elem_type), None))
            continue
        dims = tuple(_dim(d, vi.name, axis) for axis, d in enumerate(tt.shape.dim))
        for d in dims:
            for s in (d.symbol, *d.names):
                if s is not None and s not in symbols:
                    symbols.append(s)
        inputs.append(InputDims(vi.name, int(tt.elem_type), dims))
    return ModelDims(tuple(inputs), tuple(symbols))


def _as_shape(value: Sequence[int] | int) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, int) else tuple(int(d) for d in value)


def split_given(
    dims: ModelDims, given: Mapping[str, Sequence[int] | int] | None
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Split ``--input-shape`` style sizes into whole input shapes and symbol values.

    A name is taken as a graph input first, then as a symbol. An input's shape also fixes the symbols its
    dimensions name (``input_ids=1,5`` sets ``batch=1`` and ``sequence=5`` wherever they appear).

    Raises:
        BadInputError: a name is neither an input nor a symbol; a shape has the wrong rank or disagrees
            with a static dimension; a symbol gets a list of sizes; two given sizes disagree.
    """
    by_name = {spec.name: spec for spec in dims.inputs}
    shapes: dict[str, tuple[int, ...]] = {}
    symbols: dict[str, int] = {}
    unknown: list[str] = []
    for name, value in (given or {}).items():
        if name in by_name:
            shapes[name] = _as_shape(value)
        elif name in dims.symbols:
            sizes = _as_shape(value)
            if len(sizes) != 1:
                raise BadInputError(
                    f"symbolic dimension {name!r} takes one size (NAME=N), got {list(sizes)}",
                    value=list(sizes),
                )
            symbols[name] = sizes[0]
        else:
            unknown.append(name)
    if unknown:
        inputs = ", ".join(s.name for s in dims.inputs) or "none"
        symbols_text = ", ".join(dims.named_symbols) or "none"
        raise BadInputError(
            f"input shapes given for {', '.join(map(repr, sorted(unknown)))}: not a graph input and not a "
            f"symbolic dimension of the model (inputs: {inputs}; symbols: {symbols_text})",
            value=sorted(unknown),
        )
    from_inputs: dict[str, tuple[int, str]] = {}
    for name, shape in shapes.items():
        declared = by_name[name].dims
        if declared is None:
            continue
        if len(declared) != len(shape):
            raise BadInputError(
                f"shape {list(shape)} given for input {name!r} has rank {len(shape)}, the model declares "
                f"rank {len(declared)} ({_declared(declared)})",
                tensor=name,
                value=list(shape),
            )
        for axis, (d, size) in enumerate(zip(declared, shape, strict=True)):
            if d.value is not None and d.value != size:
                raise BadInputError(
                    f"shape {list(shape)} given for input {name!r} differs from the declared dimension "
                    f"{axis} = {d.value} ({_declared(declared)})",
                    tensor=name,
                    value=list(shape),
                )
            if d.symbol is None:
                continue
            if d.symbol in symbols and symbols[d.symbol] != size and d.symbol not in from_inputs:
                raise BadInputError(
                    f"input {name!r} of shape {list(shape)} sets {d.symbol}={size}, but {d.symbol}="
                    f"{symbols[d.symbol]} was given",
                    tensor=name,
                    value=list(shape),
                )
            if d.symbol in from_inputs and from_inputs[d.symbol][0] != size:
                other = from_inputs[d.symbol][1]
                logger.warning(
                    "inputs %r and %r give symbol %r different sizes (%d, %d)",
                    other, name, d.symbol, from_inputs[d.symbol][0], size,
                )  # fmt: skip
                continue
            from_inputs.setdefault(d.symbol, (size, name))
            symbols.setdefault(d.symbol, size)
    return shapes, symbols


def _declared(dims: Sequence[Dim]) -> str:
    return "declared [" + ", ".join(d.text for d in dims) + "]"


def resolve_input_shapes(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int] | int] | None = None,
    default_dim: int = 2,
) -> dict[str, tuple[int, ...]]:
    """Concrete shapes for every graph input (inputs that are also initializers excluded).

    Every symbol not fixed by ``input_shapes`` gets ``default_dim``; no search (see
    :func:`dmlshim.inputs.search.choose_shapes` for shapes that onnxruntime accepts).

    Args:
        model: the model.
        input_shapes: an input name -> its full shape, or a symbol (``dim_param``) -> its size.
        default_dim: the size of every symbol still free.

    Raises:
        BadInputError: see :func:`split_given`; or a derived size comes out negative.
    """
    dims = model_dims(model)
    fixed, values = split_given(dims, input_shapes)
    for s in dims.symbols:
        values.setdefault(s, default_dim)
    shapes = shapes_for(dims, values, fixed)
    if shapes is None:
        raise BadInputError(
            f"the symbol sizes {values} give an input a negative or undefined size", value=dict(values)
        )
    return shapes


def shapes_for(
    dims: ModelDims, values: Mapping[str, int], fixed: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]] | None:
    """Every input's shape: ``fixed`` ones as given, the others from the symbol values."""
    free = ModelDims(tuple(i for i in dims.inputs if i.name not in fixed), dims.symbols)
    shapes = free.shapes(values)
    if shapes is None:
        return None
    return {i.name: fixed[i.name] if i.name in fixed else shapes[i.name] for i in dims.inputs}


def fix_symbols(
    model: onnx.ModelProto, sizes: Mapping[str, Sequence[int] | int]
) -> dict[str, tuple[int, ...]]:
    """Apply ``--input-shape`` sizes to a model in place: every graph-input dimension whose symbol (or
    expression over symbols) is given becomes static; return the whole input shapes among ``sizes``.

    ``input_ids=1,5`` fixes ``batch`` and ``sequence`` in the other inputs too. Used by the commands that
    keep the other dimensions symbolic (inspect, lower); the returned shapes go to shape inference.

    Raises:
        BadInputError: see :func:`split_given`.
    """
    dims = model_dims(model)
    shapes, values = split_given(dims, sizes)
    if not values:
        return shapes
    by_name = {spec.name: spec for spec in dims.inputs}
    for vi in model.graph.input:
        spec = by_name.get(vi.name)
        if spec is None or spec.dims is None or vi.name in shapes:
            continue
        for proto, d in zip(vi.type.tensor_type.shape.dim, spec.dims, strict=True):
            if d.value is None and (size := d.size(values)) is not None and size >= 0:
                proto.dim_value = size  # clears dim_param (a oneof)
    return shapes
