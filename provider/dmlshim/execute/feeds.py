"""Graph inputs and outputs as onnxruntime describes them, and feed validation.

``load_npz`` and ``save_npz`` live in :mod:`dmlshim.fileio.npz` (re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import BadInputError
from ..fileio.npz import load_npz as load_npz
from ..fileio.npz import save_npz as save_npz
from ..runtime.exceptions import check_failure_class, combined_class, with_onnxruntime_class

logger = logging.getLogger(__name__)

Dim = int | str | None
"""A dimension: a size, a symbolic name, or None when unknown (as onnxruntime's ``NodeArg.shape``)."""


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output, shaped like onnxruntime's ``NodeArg``.

    Attributes:
        name: the value name.
        dims: one entry per dimension (int, symbolic name or None); empty for a scalar and for a value
            whose rank is unknown (see ``rank_known``).
        type: onnxruntime's type string, e.g. ``tensor(float)`` or ``seq(tensor(int64))``.
        elem_type: the ONNX element type (``onnx.TensorProto.FLOAT`` ...) of a tensor; 0 otherwise.
        rank_known: whether the value has a declared shape.
    """

    name: str
    dims: tuple[Dim, ...]
    type: str
    elem_type: int = 0
    rank_known: bool = False

    @property
    def shape(self) -> list[Dim]:
        """The dimensions as a new list, as onnxruntime's ``NodeArg.shape`` gives them."""
        return list(self.dims)

    @property
    def is_tensor(self) -> bool:
        return self.type.startswith("tensor(")

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, shaped like onnxruntime's ``ModelMetadata``."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def type_string(tp: onnx.TypeProto) -> str:
    """onnxruntime's name of an ONNX type: ``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({_elem_name(tp.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({_elem_name(tp.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = _elem_name(tp.map_type.key_type)
        return f"map({key},{type_string(tp.map_type.value_type)})"
    return "unknown"


def _elem_name(elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return "undefined"


def node_arg(vi: onnx.ValueInfoProto) -> NodeArg:
    """The :class:`NodeArg` of a graph input or output."""
    tp = vi.type
    kind = tp.WhichOneof("value")
    if kind == "optional_type" and tp.optional_type.elem_type.WhichOneof("value") == "tensor_type":
        # onnxruntime reports an optional tensor's shape as the tensor's (its checks stay onnxruntime's)
        return NodeArg(vi.name, _dims(tp.optional_type.elem_type.tensor_type), type_string(tp))
    if kind != "tensor_type":
        return NodeArg(vi.name, (), type_string(tp))
    tt = tp.tensor_type
    return NodeArg(vi.name, _dims(tt), type_string(tp), int(tt.elem_type), tt.HasField("shape"))


def _dims(tt: onnx.TypeProto.Tensor) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
    return tuple(dims)


def numpy_dtype(elem_type: int) -> np.dtype | None:
    """The numpy dtype of an ONNX element type, or None when numpy has no exact equivalent."""
    if elem_type in (0, onnx.TensorProto.STRING):
        return None
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None
    # bfloat16 and the float8/4-bit types come back as ml_dtypes or plain-integer stand-ins; onnxruntime's
    # own check decides for those.
    return dt if dt.kind in "biufc" and dt.name == _elem_numpy_name(elem_type) else None


def _elem_numpy_name(elem_type: int) -> str:
    name = onnx.TensorProto.DataType.Name(elem_type).lower()
    return {"float": "float32", "double": "float64"}.get(name, name)


@dataclass(frozen=True)
class _InputCheck:
    name: str
    dtype: np.dtype | None
    type: str
    shape: tuple[Dim, ...] | None

    @property
    def quick(self) -> tuple[np.dtype, int, tuple[tuple[int, int], ...]] | None:
        """``(dtype, rank, ((axis, size), ...) of the static dimensions)`` when a numpy array can be
        accepted by comparing those alone, else None."""
        if self.dtype is None or self.shape is None or not self.type.startswith("tensor("):
            return None
        static = tuple((axis, dim) for axis, dim in enumerate(self.shape) if _fixed(dim))
        return self.dtype, len(self.shape), static


def feed_key(feeds: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a run's checks read of its feeds when every one is a plain numpy array: per feed, in order,
    its name, dtype and shape (None when a feed is anything else). Feeds with the key of feeds the
    validator accepted as they were are accepted again (their dtypes and shapes are all it reads)."""
    ndarray = np.ndarray
    key = tuple([(name, value.dtype, value.shape) for name, value in feeds.items() if type(value) is ndarray])
    return key if len(key) == len(feeds) else None


class FeedValidator:
    """Checks feeds against the graph inputs: names, dtype, rank and static dimensions.

    Args:
        inputs: the graph inputs a caller must feed (initializers excluded).
        optional: graph inputs that have an initializer as default value (may be fed or omitted).
    """

    def __init__(self, inputs: Sequence[NodeArg], optional: Sequence[NodeArg] = ()) -> None:
        # as onnxruntime's Python layer: an input of an optional type may be left out (it holds no value)
        self._required = tuple(i.name for i in inputs if not i.type.startswith("optional"))
        self._names = tuple(i.name for i in inputs)
        self._checks = {a.name: self._check_for(a) for a in (*inputs, *optional)}
        # Per run, a numpy feed that fits is accepted after a few comparisons (the full check, with its
        # messages, runs only for anything else).
        self._quick = {name: check.quick for name, check in self._checks.items()}

    @staticmethod
    def _check_for(arg: NodeArg) -> _InputCheck:
        dtype = numpy_dtype(arg.elem_type) if arg.is_tensor else None
        # onnxruntime checks no shape against a rank-0 declaration (a feed of any rank runs)
        return _InputCheck(arg.name, dtype, arg.type, arg.dims if arg.rank_known and arg.dims else None)

    def check_present(self, feeds: Mapping[str, Any]) -> None:
        """Raise BadInputError unless ``feeds`` is a mapping with a value for every required input."""
        if not isinstance(feeds, Mapping):
            # onnxruntime's Python layer calls input_feed.keys(): an AttributeError (made one from the
            # start: its layout cannot be given to an error afterwards)
            raise combined_class(BadInputError, (AttributeError,))(
                f"'{type(feeds).__name__}' object has no attribute 'keys' (dmlshim: input_feed must be a "
                f"mapping from input name to array, not {type(feeds).__name__})"
            )
        for name in self._required:
            if name not in feeds:
                break
        else:
            return  # every required input is fed (checked on every run: no list built)
        missing = [n for n in self._required if n not in feeds]
        if missing:
            # onnxruntime's own sentence first (clients match it), then what dmlshim adds; onnxruntime's
            # Python layer raises it as a ValueError
            raise with_onnxruntime_class(
                BadInputError(
                    f"Required inputs ({missing}) are missing from input feed ({list(feeds)}): missing feed "
                    f"for graph input {missing[0]!r} (model inputs: {', '.join(self._names)})",
                    tensor=missing[0],
                    value=missing,
                ),
                ValueError,
            )

    def validate(self, feeds: Mapping[str, Any], *, present: bool = False) -> dict[str, Any]:
        """Return the feeds as arrays; raise BadInputError naming the first input that does not fit.

        Arrays are passed through without a copy; lists become arrays of the input's dtype as numpy (and
        onnxruntime) converts them; other objects (scalars, tuples, strings) are refused, as onnxruntime
        refuses them. ``present``: :meth:`check_present` already accepted ``feeds`` (their keys).
        """
        if not present:
            self.check_present(feeds)
        out: dict[str, Any] = {}
        quick_checks = self._quick
        for name, value in feeds.items():
            quick = quick_checks.get(name)
            if quick is not None and type(value) is np.ndarray:
                dtype, rank, static = quick
                shape = value.shape
                fits = value.dtype == dtype and len(shape) == rank
                for a, d in static if fits else ():  # a loop, not all(...): no call per dimension
                    if shape[a] != d:
                        fits = False
                        break
                if fits:
                    out[name] = value
                    continue
            check = self._checks.get(name)
            if check is None:
                raise BadInputError(
                    f"Invalid input name: {name} (dmlshim: feed {name!r} is not an input of the model; model "
                    f"inputs: {', '.join(self._names) or 'none'})",
                    tensor=name,
                )
            out[name] = self._check_value(check, value)
        return out

    @staticmethod
    def _check_value(check: _InputCheck, value: Any) -> Any:
        if not check.type.startswith("tensor("):
            return value  # sequences, maps, optionals: onnxruntime checks those
        if callable(getattr(value, "data_type", None)) and callable(getattr(value, "shape", None)):
            return _checked_ortvalue(check, value)
        if value is None or not isinstance(value, (np.ndarray, list, Mapping)):
            raise _refused_object(check, value)
        arr = value if isinstance(value, np.ndarray) else _as_array(check, value)
        if arr.dtype.num in _NO_ONNX_TYPE:
            raise _no_onnx_type(check, arr.dtype)
        if check.type == "tensor(string)" and arr.dtype.kind not in "OU":
            arr = _string_feed(check, arr)
        if check.dtype is not None and arr.dtype != check.dtype and arr.dtype.byteorder == ">":
            arr = _as_onnxruntime_reads(check, arr)
        if check.dtype is not None and arr.dtype != check.dtype:
            raise _wrong_dtype(check, f"{check.type} (numpy {check.dtype})", arr.dtype)
        if check.shape is not None:
            _check_shape(check, tuple(arr.shape))
        return arr


_NO_ONNX_TYPE = frozenset(
    np.dtype(t).num for t in (np.longdouble, np.complex64, np.complex128, np.clongdouble, "M8[s]", "m8[s]")
)
"""numpy's type numbers onnxruntime has no tensor type for (long double, complex, datetime, timedelta):
it refuses such a feed before looking at the input's type, with a ``RuntimeError``."""


def _no_onnx_type(check: _InputCheck, dtype: np.dtype) -> BadInputError:
    error = BadInputError(
        f"Numpy_type {dtype.num} can't be converted to MLDataType. (dmlshim: the feed for input "
        f"{check.name!r} is {dtype}, which has no ONNX tensor type; {check.name!r} expects {check.type})",
        tensor=check.name,
        value=str(dtype),
        rule="a feed is a numpy array of a type ONNX has",
    )
    return with_onnxruntime_class(error, RuntimeError)


def _checked_ortvalue(check: _InputCheck, value: Any) -> Any:
    """An OrtValue of an element type numpy cannot hold (bfloat16, float8, 4-bit), checked as an array is."""
    got = value.data_type()
    if got != check.type:
        raise BadInputError(
            f"Unexpected input data type. Actual: ({got}) , expected: ({check.type}) (dmlshim: input "
            f"{check.name!r} expects {check.type} but the feed is an OrtValue of {got})",
            tensor=check.name,
            value=got,
            rule="feed dtype must equal the graph input's element type",
        )
    if check.shape is not None:
        _check_shape(check, tuple(value.shape()))
    return value


def _fixed(dim: Dim) -> bool:
    """Whether a declared dimension binds the feed: a size, not a name, None or a negative size (which
    onnxruntime reads as free)."""
    return isinstance(dim, int) and dim >= 0


def _check_shape(check: _InputCheck, shape: tuple[int, ...]) -> None:
    """Refuse a feed shape onnxruntime refuses, with onnxruntime's message first."""
    if len(shape) != len(check.shape or ()):
        raise BadInputError(
            f"Invalid rank for input: {check.name} Got: {len(shape)} Expected: {len(check.shape or ())} "
            "Please fix either the inputs/outputs or the model. (dmlshim: input "
            f"{check.name!r} is declared {_fmt_shape(check.shape or ())}; the feed has shape {shape})",
            tensor=check.name,
            value=shape,
            rule="feed rank must equal the graph input's rank",
        )
    wrong = [
        (a, g, w)
        for a, (w, g) in enumerate(zip(check.shape or (), shape, strict=True))
        if _fixed(w) and w != g
    ]
    if wrong:
        indices = "".join(f" index: {a} Got: {g} Expected: {w}\n" for a, g, w in wrong)
        raise BadInputError(
            f"Got invalid dimensions for input: {check.name} for the following indices\n{indices} Please fix "
            f"either the inputs/outputs or the model. (dmlshim: input {check.name!r} is declared "
            f"{_fmt_shape(check.shape or ())}; the feed has shape {shape})",
            tensor=check.name,
            value=shape,
            rule="static dimensions of a graph input must match the feed",
        )


def _string_feed(check: _InputCheck, arr: np.ndarray) -> np.ndarray:
    """A ``tensor(string)`` feed of numpy bytes or void, as onnxruntime reads it: each bytes element up to
    its first NUL, each void element whole (NULs kept), as UTF-8; any other kind is refused. Bytes that are
    no UTF-8 raise ``UnicodeDecodeError``, as onnxruntime's run does (1.24 and 1.32); they were replaced
    with U+FFFD before, silently another string than the caller fed."""
    if arr.dtype.kind == "S":
        return np.char.decode(arr, "utf-8", "strict").astype(object)
    if arr.dtype.kind == "V" and arr.dtype.fields is None:
        flat = [bytes(v).decode("utf-8", "strict") for v in arr.reshape(-1)]
        return np.array(flat, dtype=object).reshape(arr.shape)
    raise _wrong_dtype(check, "tensor(string) (numpy str, bytes, void or object)", arr.dtype)


def _onnx_type_name(dtype: np.dtype[Any]) -> str:
    """onnxruntime's name of a numpy dtype's tensor type: ``tensor(double)``; ``tensor(string)`` for str."""
    if dtype.kind in "OUSV":
        return "tensor(string)"
    try:
        return f"tensor({_elem_name(helper.np_dtype_to_tensor_dtype(dtype))})"
    except (KeyError, TypeError, ValueError):
        return str(dtype)


def _as_onnxruntime_reads(check: _InputCheck, arr: np.ndarray) -> np.ndarray:
    """A big-endian array fed where its native-order dtype is expected, as onnxruntime takes it: its bytes
    read in the machine's order (onnxruntime 1.24 and 1.32 do not swap them; ``>f4`` 1.0 is 4.6e-41)."""
    native = arr.dtype.newbyteorder("=")
    if native != check.dtype:
        return arr
    logger.warning(
        "input %r is a big-endian %s array: onnxruntime reads its bytes in the machine's order, as does "
        "dmlshim (convert it with .astype(%r) to feed its values)",
        check.name,
        native,
        str(native),
    )
    return arr.view(native)


def _wrong_dtype(check: Any, expected: str, got: np.dtype[Any]) -> BadInputError:
    """The error for a feed whose element type is not the graph input's: onnxruntime's sentence first."""
    return BadInputError(
        f"Unexpected input data type. Actual: ({_onnx_type_name(got)}) , expected: ({check.type}) "
        f"(dmlshim: input {check.name!r} expects {expected} but the feed is {got})",
        tensor=check.name,
        value=str(got),
        rule="feed dtype must equal the graph input's element type",
    )


def _onnxruntime_refusal(name: str, value: Any) -> str:
    """How onnxruntime's binding words the refusal of ``value`` (followed by a space; "" for None, which
    its kernel refuses): an object with ``len`` and item access (a tuple, a string, a torch tensor) is a
    sequence to it, anything else (a Python or numpy scalar) an object it cannot handle."""
    if value is None:
        return ""
    cls = type(value)
    if hasattr(cls, "__len__") and hasattr(cls, "__getitem__") and not isinstance(value, np.generic):
        return f"Input must be a list of dictionaries or a single numpy array for input '{name}'. "
    return f"Unable to handle object of type {cls!r} "


def _refused_object(check: _InputCheck, value: Any) -> BadInputError:
    """onnxruntime's run takes an array, a list or an OrtValue and raises RuntimeError for anything else (a
    Python or numpy scalar, a tuple, a string, a torch tensor); None reaches its kernel as a missing input
    (onnxruntime's failed-check class). A program must not pass here and fail there."""
    error = BadInputError(
        f"{_onnxruntime_refusal(check.name, value)}(dmlshim: input {check.name!r} is fed a "
        f"{type(value).__module__}.{type(value).__qualname__}, which onnxruntime's run refuses (it takes a "
        "numpy array, a list or an OrtValue); feed numpy.asarray(value, "
        f"dtype=numpy.{check.dtype or 'float32'}) instead)",
        tensor=check.name,
        value=type(value).__qualname__,
        rule="a tensor feed is a numpy array, a list or an OrtValue, as onnxruntime takes it",
    )
    return with_onnxruntime_class(error, check_failure_class() if value is None else RuntimeError)


def _as_array(check: _InputCheck, value: list[Any] | Mapping[Any, Any]) -> np.ndarray:
    """A list or dict feed, as onnxruntime reads it: a list becomes an array of the input's type (as numpy
    converts it; one numpy cannot build is onnxruntime's RuntimeError), a dict is left for the dtype check
    (onnxruntime's InvalidArgument)."""
    if isinstance(value, Mapping):
        return np.asarray(value, dtype=object)
    # as onnxruntime: numpy builds the tensor in the input's type (floats truncated into integers); for
    # strings an object array, whose elements onnxruntime reads as str() gives them (b"ab" is "b'ab'")
    wanted = check.dtype if check.dtype is not None else (object if check.type == "tensor(string)" else None)
    try:
        return np.array(value, dtype=wanted)
    except (ValueError, TypeError, OverflowError) as exc:
        raise with_onnxruntime_class(
            BadInputError(
                f"feed for input {check.name!r} is a list onnxruntime cannot make a {check.type} of "
                f"(rectangular, of values that fit the type): {exc}",
                tensor=check.name,
                rule="a list feed must make a rectangular tensor of the input's type",
            ),
            RuntimeError,
        ) from exc


def _fmt_shape(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
