"""Initializers a caller adds through ``SessionOptions``, applied to the model as onnxruntime applies them.

``SessionOptions.add_initializer(name, value)`` replaces the model's initializer ``name``;
``add_external_initializers(names, values)`` replaces initializers whose data the model keeps in an
external file (onnxruntime refuses a name the model holds inline or does not have). A dmlshim session runs
the model as several pieces, some not in onnxruntime at all (the emulated gather/scatter nodes), so the
values must be known to dmlshim itself. onnxruntime cannot list what a ``SessionOptions`` holds; it is
asked instead: a probe model with no nodes whose outputs are empty stand-ins for the model's initializers
is run with the caller's options, and every output that comes back with another shape is a value the
caller added. The model handed to the engines then holds those values, so every engine, every partition
and every emulated node reads what onnxruntime would.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import BadInputError, BadModelError
from ...model.ort_errors import ORT_ERRORS
from ...model.weightless import graph_shell, model_shell
from ...runtime.real import OrtInferenceSession, options_held

logger = logging.getLogger(__name__)

SENTINEL_DIMS = (0, 1, 0, 1, 0, 1, 0)
"""The shape of a stand-in: empty, and a shape no caller's value has in practice."""

_UNKNOWN_EXTERNAL = re.compile(r"Failed to find existing initializer with name (\S+?)\.?$", re.MULTILINE)
_PROBE_OPSET = 17
_EMPTY_FILE = "dmlshim-probe-empty.bin"
_ANCHOR = "dmlshim.probe.anchor"


def _own_reference(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """``tensor``'s external reference as the model has it (location, offset, length), no data: in the
    probe's empty folder onnxruntime can only find it among the options' in-memory files."""
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    stub.data_location = onnx.TensorProto.EXTERNAL
    stub.external_data.extend(tensor.external_data)
    return stub


@contextmanager
def probe_folder() -> Iterator[Path]:
    """A temporary folder holding the empty data file that external stand-ins name (removed after)."""
    with tempfile.TemporaryDirectory(prefix="dmlshim-probe-") as tmp:
        folder = Path(tmp)
        (folder / _EMPTY_FILE).write_bytes(b"")
        yield folder


def stand_in(tensor: onnx.TensorProto, external: bool) -> onnx.TensorProto:
    """An initializer named as ``tensor``, of its type: empty with :data:`SENTINEL_DIMS`, or (``external``)
    of its real dims with data in an empty file (onnxruntime must replace it, never read it)."""
    dims = list(tensor.dims) if external else list(SENTINEL_DIMS)
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=dims)
    if external:
        stub.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", _EMPTY_FILE), ("offset", "0"), ("length", "0")):
            entry = stub.external_data.add()
            entry.key, entry.value = key, value
    return stub


@contextmanager
def _quiet(so: Any) -> Iterator[Any]:
    """``so`` with its file outputs (profile, optimized model) off while the probe is built, restored
    after: only the caller's own object holds the added values."""
    with options_held(so):  # no other thread's session reads them while they are changed
        saved = (so.enable_profiling, so.optimized_model_filepath, so.log_severity_level)
        so.enable_profiling, so.optimized_model_filepath = False, ""
        # quiet, and a level onnxruntime takes: an invalid one is the real session's error, not the probe's
        so.log_severity_level = min(max(int(saved[2]), 3), 4)
        try:
            yield so
        finally:
            so.enable_profiling, so.optimized_model_filepath, so.log_severity_level = saved


quiet_options = _quiet
"""``_quiet``, for the other modules that ask onnxruntime with a caller's options."""


_NO_NUMPY = frozenset(
    getattr(onnx.TensorProto, n)
    for n in (
        "INT4",
        "UINT4",
        "BFLOAT16",
        "INT2",
        "UINT2",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "FLOAT8E8M0",
        "FLOAT4E2M1",
    )
    if hasattr(onnx.TensorProto, n)
)
"""Element types onnxruntime's ``run`` cannot return as numpy ("No corresponding Numpy type": a model
with a float8e5m2 initializer was refused by every engine as if the options had added a bad value)."""


def numpy_cannot_hold(tensor: onnx.TensorProto) -> bool:
    """Whether the probe reads ``tensor``'s shape only (its type is one numpy cannot hold)."""
    return tensor.data_type in _NO_NUMPY


def probe_model(
    tensors: Mapping[str, onnx.TensorProto], external: set[str], own: frozenset[str] = frozenset()
) -> onnx.ModelProto:
    """A model with no nodes whose outputs are stand-ins for ``tensors`` (see :func:`stand_in`): run with
    the caller's options, it returns the values they add in their place."""
    # onnxruntime refuses a graph without any value: an anchor output keeps the probe valid when empty.
    anchor = helper.make_tensor(_ANCHOR, onnx.TensorProto.FLOAT, [0], [])
    graph = helper.make_graph(
        [],
        "dmlshim_added_initializer_probe",
        [],
        [
            *(helper.make_tensor_value_info(n, t.data_type, None) for n, t in tensors.items()),
            helper.make_tensor_value_info(_ANCHOR, onnx.TensorProto.FLOAT, [0]),
        ],
        [
            *(_own_reference(t) if n in own else stand_in(t, n in external) for n, t in tensors.items()),
            anchor,
        ],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", _PROBE_OPSET)])


def probe_session(model: onnx.ModelProto | bytes | str, so: Any) -> Any:
    """onnxruntime's session of a probe model with ``so`` (its file outputs off while it is built); in
    onnxruntime's ORT format when ``so`` says every model is one (``session.load_model_format``)."""
    from .ort_format import is_ort_format, ort_format_bytes

    if is_ort_format(None, so):
        model = ort_format_bytes(model)
    with _quiet(so):
        return OrtInferenceSession(model, so, providers=["CPUExecutionProvider"])


def _probe(
    folder: Path,
    tensors: Mapping[str, onnx.TensorProto],
    external: set[str],
    so: Any,
    own: frozenset[str] = frozenset(),
) -> list[Any]:
    model = probe_model(tensors, external, own)
    path = folder / "probe.onnx"
    onnx.save(model, str(path))
    session = probe_session(str(path), so)
    # OrtValues: a type numpy cannot hold (4-bit, bfloat16 ...) comes back as a tensor of its raw bytes
    values = list(session.run_with_ort_values(None, {}))[:-1]
    return [
        narrow_tensor(n, t.data_type, v) if numpy_cannot_hold(t) else v.numpy()
        for v, (n, t) in zip(values, tensors.items(), strict=True)
    ]


def narrow_tensor(name: str, elem_type: int, value: Any) -> onnx.TensorProto:
    """A CPU tensor OrtValue of a type numpy cannot hold as an initializer ``name`` of ``elem_type`` holding
    its bytes (onnxruntime lays bfloat16 and the packed 4-bit and 2-bit types out as ONNX's raw data
    does)."""
    from ...inputs.narrow_floats import ortvalue_bits

    tensor = onnx.TensorProto(name=name, data_type=elem_type, dims=[int(d) for d in value.shape()])
    tensor.raw_data = ortvalue_bits(value).tobytes()
    return tensor


def as_initializer(value: np.ndarray | onnx.TensorProto, name: str) -> onnx.TensorProto:
    """An added value (an array, or a tensor of a type numpy cannot hold) as the initializer ``name``."""
    if isinstance(value, onnx.TensorProto):
        out = onnx.TensorProto()
        out.CopyFrom(value)
        out.name = name
        return out
    return numpy_helper.from_array(np.asarray(value), name)


def fill_initializer(target: onnx.TensorProto, value: np.ndarray | onnx.TensorProto, name: str) -> None:
    """Make ``target`` (a model's initializer, in place) :func:`as_initializer`'s tensor: a numeric array's
    bytes go straight into it (``numpy_helper.from_array`` makes a tensor the model then copies: for a
    100 MB value, a third 100 MB at once)."""
    if not _plain_numeric(value):
        target.CopyFrom(as_initializer(value, name))
        return
    _typed_header(target, value, name)
    target.raw_data = np.ascontiguousarray(value).tobytes()


def take_into_initializer(target: onnx.TensorProto, values: dict[str, Any], name: str) -> None:
    """:func:`fill_initializer` with ``values.pop(name)``, the array let go before its bytes are stored (the
    caller holds no other reference): its bytes and the tensor's, never the array too."""
    value = values.pop(name)
    if not _plain_numeric(value):
        fill_initializer(target, value, name)
        return
    _typed_header(target, value, name)
    raw = np.ascontiguousarray(value).tobytes()
    del value
    target.raw_data = raw


def _plain_numeric(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "iuf" and value.dtype.byteorder != ">"


def _typed_header(target: onnx.TensorProto, value: np.ndarray, name: str) -> None:
    """``target`` as ``numpy_helper.from_array(value, name)`` makes it, but for its bytes."""
    target.CopyFrom(numpy_helper.from_array(np.empty((0,), value.dtype), name))
    del target.dims[:]
    target.dims.extend(int(d) for d in value.shape)


@dataclass(frozen=True)
class AddedInitializers:
    """What a ``SessionOptions`` adds to a model.

    Attributes:
        values: the added value of each initializer replaced, by name (a tensor for a type numpy cannot
            hold: bfloat16, 4-bit; :func:`as_initializer` makes either an initializer).
        external: the names among them given through ``add_external_initializers``.
    """

    values: Mapping[str, np.ndarray | onnx.TensorProto] = field(default_factory=dict)
    external: frozenset[str] = frozenset()


def added_initializers(
    model: onnx.ModelProto, so: Any, external_names: frozenset[str] = frozenset()
) -> AddedInitializers:
    """The values ``so`` adds for initializers of ``model``'s main graph (none when it adds none).

    Args:
        model: the model (not modified).
        so: the caller's ``onnxruntime.SessionOptions`` (restored as it was).
        external_names: the initializers the model file keeps in external data (the only ones
            ``add_external_initializers`` may replace).

    Raises:
        BadInputError: onnxruntime refuses an added value (a name the model does not hold in external
            data, another shape or type), as it would refuse the session.
    """
    if so is None:
        return AddedInitializers()
    tensors = {
        t.name: t
        for t in model.graph.initializer
        if t.data_type != onnx.TensorProto.UNDEFINED and t.name != _ANCHOR
    }
    external: set[str] = set()
    with probe_folder() as folder:
        while True:
            try:
                # External names first, alone: onnxruntime names one it cannot place per attempt.
                _probe(folder, {n: tensors[n] for n in external}, external, so)
                break
            except ORT_ERRORS as exc:
                found = _UNKNOWN_EXTERNAL.search(str(exc))
                if found is None or found.group(1) in external:
                    raise _refused(exc) from exc
                name = found.group(1)
                if name not in tensors or name not in external_names:
                    where = "holds inline" if name in tensors else "does not have"
                    raise BadInputError(
                        f"SessionOptions.add_external_initializers names {name!r}, an initializer the model "
                        f"{where}: onnxruntime replaces only initializers whose data is in an external file",
                        tensor=name,
                        rule="add_external_initializers replaces external-data initializers only",
                    ) from exc
                external.add(name)
        try:
            outputs = _probe(folder, tensors, external, so)
        except ORT_ERRORS as exc:
            raise _refused(exc) from exc
    found_values: dict[str, np.ndarray | onnx.TensorProto] = {}
    for name, value in zip(tensors, outputs, strict=True):
        if isinstance(value, onnx.TensorProto):  # a type numpy cannot hold, its bytes as onnxruntime has them
            if name in external or tuple(value.dims) != SENTINEL_DIMS:
                found_values[name] = value
            continue
        arr = np.asarray(value)
        if name in external or arr.shape != SENTINEL_DIMS:
            _check_type(name, tensors[name], arr)
            found_values[name] = arr
    if found_values:
        logger.info("initializers added by the session options: %s", ", ".join(sorted(found_values)))
    return AddedInitializers(found_values, frozenset(external))


def from_files_in_memory(tensors: Mapping[str, onnx.TensorProto], so: Any) -> dict[str, Any]:
    """The values onnxruntime reads for external-data ``tensors`` from the files ``so`` holds in memory
    (``SessionOptions.add_external_initializers_from_files_in_memory``); a tensor whose file is not among
    them is left out (its file is read from disk as usual)."""
    if so is None or not tensors:
        return {}
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dmlshim-probe-") as tmp:
        folder = Path(tmp)
        try:  # all at once (the common case: every missing file is in memory) ...
            outputs = _probe(folder, tensors, set(), so, own=frozenset(tensors))
            return dict(zip(tensors, outputs, strict=True))
        except ORT_ERRORS:
            pass
        for name, tensor in tensors.items():  # ... else one by one
            try:
                (value,) = _probe(folder, {name: tensor}, set(), so, own=frozenset((name,)))
            except ORT_ERRORS:
                continue
            found[name] = value
    return found


_FILE_PROBE = "dmlshim_file_probe"


def file_in_memory(location: str, so: Any) -> bool:
    """Whether ``so`` holds the external-data file ``location`` in memory
    (``add_external_initializers_from_files_in_memory``): onnxruntime is asked to read its first byte in an
    empty folder, where only the options' in-memory files can be found."""
    if so is None or not location:
        return False
    probe = onnx.TensorProto(name=_FILE_PROBE, data_type=onnx.TensorProto.UINT8, dims=[1])
    probe.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "1")):
        entry = probe.external_data.add()
        entry.key, entry.value = key, value
    with tempfile.TemporaryDirectory(prefix="dmlshim-probe-") as tmp:
        try:
            _probe(Path(tmp), {_FILE_PROBE: probe}, set(), so, own=frozenset((_FILE_PROBE,)))
        except ORT_ERRORS:
            return False
    return True


def read_files_in_memory(tensors: Mapping[str, onnx.TensorProto], so: Any) -> dict[str, Any]:
    """The values of external-data ``tensors`` whose file ``so`` holds in memory, read by onnxruntime.

    Raises:
        BadModelError: onnxruntime cannot read one of them there (an offset or length past the in-memory
            file's end, say), as it then refuses the session (its class: ``Fail``).
    """
    with tempfile.TemporaryDirectory(prefix="dmlshim-probe-") as tmp:
        try:
            outputs = _probe(Path(tmp), tensors, set(), so, own=frozenset(tensors))
        except ORT_ERRORS as exc:
            raise BadModelError(
                "onnxruntime cannot read the external data of "
                f"{', '.join(repr(n) for n in tensors)} from the file the session options hold in memory: "
                f"{str(exc).strip()}",
                tensor=next(iter(tensors)),
                rule="external data held in memory must hold every byte the model's tensors refer to",
            ) from exc
    return dict(zip(tensors, outputs, strict=True))


def _check_type(name: str, tensor: onnx.TensorProto, value: np.ndarray) -> None:
    """Refuse an added value of another element type than the model's initializer. onnxruntime does not
    check it: its kernels read the value's bytes as the model's type (a float64 7.0 read as float32 gives
    0.0 and 2.4375), past the end of the buffer when the added type is narrower."""
    try:
        want = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        return
    if want.kind not in "biuf" or value.dtype.kind not in "biuf" or value.dtype == want:
        return
    raise BadInputError(
        f"SessionOptions.add_initializer replaces the {onnx.TensorProto.DataType.Name(tensor.data_type)} "
        f"initializer {name!r} with a {value.dtype} value: "
        f"onnxruntime does not convert it and would read its bytes as {want} (wrong values, or a read past "
        f"the value's end); pass a {want} array",
        tensor=name,
        rule="an added initializer must have the element type of the model's",
    )


def _refused(exc: BaseException) -> BadInputError:
    """onnxruntime's refusal of the probe, as the caller's session would meet it: its class alone (a plain
    ``RuntimeError`` stays one, never an ``InvalidArgument`` onnxruntime did not raise) and its words
    first."""
    from ...runtime.exceptions import with_onnxruntime_class

    error = BadInputError(
        # the probe is a session built with the caller's options: what onnxruntime refuses there need not be
        # an added initializer (session.disable_cpu_ep_fallback=1 with no initializer added, say)
        f"{str(exc).strip()} (dmlshim: onnxruntime refuses a session built with these SessionOptions; "
        "dmlshim asks it, with a session of no nodes, which initializers the options replace)",
        rule="the SessionOptions must build an onnxruntime session (an added initializer must match the "
        "name, type and shape of the model's)",
    )
    return with_onnxruntime_class(error, type(exc))


def with_initializers(
    model: onnx.ModelProto, values: Mapping[str, np.ndarray | onnx.TensorProto]
) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers named in ``values`` hold those values (``model`` is not
    modified)."""
    out = model_shell(model)
    graph_shell(model.graph, out.graph)
    for t in model.graph.initializer:
        if t.name in values:
            fill_initializer(out.graph.initializer.add(), values[t.name], t.name)
        else:
            out.graph.initializer.append(t)
    return out
