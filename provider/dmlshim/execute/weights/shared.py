"""Weights handled once: shape inference without weight bytes, onnxruntime sessions without serializing
them.

Building an engine needs the model's structure many times (shape inference, the whole-model check's
session, one session per CPU segment) but its weights only where onnxruntime computes with them.
Serializing a model with large weights for each of those costs seconds and a copy each time. Here:

* :func:`dmlshim.model.weightless.without_weights` gives shape inference a copy whose large initializers are
  typed graph inputs (only their type and shape matter to it, and values that drive shapes are small);
* :class:`SharedWeights` gives onnxruntime sessions initializers without bytes ("external data"): for a
  model read without its weights, references to where the bytes lie (the session's own copy of the weights
  its file held inline, :mod:`dmlshim.execute.weights.snapshot`, or the external data the user chose),
  which onnxruntime reads itself; otherwise placeholders whose arrays it is handed through
  ``SessionOptions.add_external_initializers`` (which copies them). No weight is serialized or parsed
  again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ...model.weightless import graph_shell, is_external, model_shell, read_by_value, tensor_nbytes
from ...runtime.options_copy import FOLDER_KEY
from ..proofs.gather_given import add_extra_outputs
from .file_slices import FileSlice
from .values import check_unchanged, external_slice, file_stamp, initializer_value

logger = logging.getLogger(__name__)

SHARE_MIN_BYTES = 64 * 1024
"""Initializers at least this large are shared with onnxruntime instead of serialized, and left out of
shape inference. Smaller ones (shape constants among them) stay in the model."""

MAP_MIN_BYTES = 0
"""External data at least this large stays a reference to the user's file, which onnxruntime maps (so an
edit to the file shows in the next run, as in onnxruntime's own session); smaller ones (onnx writes none
below its default ``size_threshold`` of 1024 bytes; shape constants among them) are read into the model."""

PLACEHOLDER_LOCATION = "dmlshim-shared-initializer"
"""The external-data location of a placeholder; onnxruntime never reads it (the array replaces it)."""


def is_large(tensor: onnx.TensorProto, min_bytes: int = SHARE_MIN_BYTES) -> bool:
    """A numeric initializer whose bytes are held in the model (not external) and worth sharing."""
    return tensor.data_location != onnx.TensorProto.EXTERNAL and tensor_nbytes(tensor) >= min_bytes


def placeholder(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """An initializer with ``tensor``'s name, type and shape whose data is "external": onnxruntime takes
    the array from ``SessionOptions.add_external_initializers`` instead."""
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
    stub.data_location = onnx.TensorProto.EXTERNAL
    entry = stub.external_data.add()
    entry.key, entry.value = "location", PLACEHOLDER_LOCATION
    return stub


_PACKED = frozenset(
    getattr(onnx.TensorProto, n)
    for n in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1")
    if hasattr(onnx.TensorProto, n)
)
"""Element types packed below a byte: numpy holds them unpacked (one element a byte) and no OrtValue can
be made of such an array, so initializers of these types stay in the sessions' models (inline), unless
they are read from the model's files anyway."""


def _ort_value(array: np.ndarray) -> Any:
    """An OrtValue over a shared initializer's array (held in ``SharedWeights._arrays`` while sessions are
    built): bfloat16 and the float8 types (ml_dtypes arrays, which ``ortvalue_from_numpy`` refuses: the
    custom-op engine failed with its bare ``RuntimeError`` on a model holding such a weight) as their bits
    with the ONNX element type."""
    from ...inputs.narrow_floats import borrowed_ortvalue

    return borrowed_ortvalue(array)


class SharedWeights:
    """The large initializers of one model, each read by every onnxruntime session that needs it from
    the model's files, or turned into an array once and handed to those sessions.

    Args:
        initializers: the model's initializers (and folded constants) by name.
        min_bytes: the size from which an initializer is shared.
        model_path: the file the model (``initializers`` among it) was read from, unmodified; None for
            a model from bytes or a ModelProto (arrays are handed then).
        graph: the graph whose nodes read ``initializers``: those of them whose values onnxruntime's
            type inference reads stay in the sessions' models, however large
            (:func:`dmlshim.model.weightless.read_by_value`).
    """

    def __init__(
        self,
        initializers: Mapping[str, onnx.TensorProto],
        min_bytes: int = SHARE_MIN_BYTES,
        model_path: str | None = None,
        graph: onnx.GraphProto | None = None,
    ):
        self._protos = {
            n: t for n, t in initializers.items() if is_large(t, min_bytes) and t.data_type not in _PACKED
        }
        if graph is not None and self._protos:
            for name in read_by_value(graph, self._protos.values()):
                del self._protos[name]
        self._arrays: dict[str, np.ndarray] = {}
        self._held: set[str] = set()  # arrays the engine holds too: never released (a copy saves nothing)
        self._folder: str | None = None
        self._files: dict[str, FileSlice] = {}
        self._stamps: dict[str, tuple[int, int] | None] = {}
        self._model_path = model_path
        # A model read without its weights holds them as external data already (in its .onnx file or
        # its external-data file): onnxruntime reads them there, and no array of them can be made but
        # from those files.
        self._refs: frozenset[str] = frozenset()
        refs: dict[str, FileSlice] = {}
        if model_path is not None:
            refs = {n: external_slice(t) for n, t in initializers.items() if is_external(t)}
            self._refs = frozenset(refs)
            self._protos.update((n, initializers[n]) for n in refs)
        if model_path is not None and refs:
            # Weights a model read without them keeps as external data (in the session's own copy of the
            # weights the file held inline, or in the external data the user chose) are read there by
            # onnxruntime itself, relative to the folder of ``model_path``. Weights held in the model are
            # handed as arrays: pointing onnxruntime at them in the user's .onnx file would make the file
            # a live dependency of the session (onnxruntime maps what it reads from files).
            self._folder = os.path.dirname(os.path.abspath(model_path))
            self._files.update(refs)
            self._stamps = {
                f: _stamp(os.path.join(self._folder, f)) for f in {s.location for s in self._files.values()}
            }

    def __contains__(self, name: object) -> bool:
        return name in self._protos

    @property
    def names(self) -> frozenset[str]:
        """The shared initializers' names."""
        return frozenset(self._protos)

    def array(self, name: str) -> np.ndarray:
        """The initializer as an array (made once, then kept until :meth:`release`)."""
        found = self._arrays.get(name)
        if found is None:
            value = initializer_value(self._protos[name], self._folder)
            found = self._arrays[name] = np.ascontiguousarray(value)
        return found

    def adopt(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Use arrays the engine already made of some initializers, instead of making them again."""
        for name, value in arrays.items():
            if name in self._protos and isinstance(value, np.ndarray) and value.flags.c_contiguous:
                self._arrays.setdefault(name, value)

    def held(self, name: str) -> np.ndarray:
        """The initializer as an array (:meth:`array`) that the engine holds (a view of it): kept past
        :meth:`release`, so that a session built later (the lean check's) is handed it, not a new copy."""
        self._held.add(name)
        return self.array(name)

    def stub(self, tensor: onnx.TensorProto) -> onnx.TensorProto:
        """What a session's model holds for the shared ``tensor``: external data pointing at its bytes
        in the model's files when they are known, else a placeholder :meth:`attach` gives an array."""
        where = self._files.get(tensor.name)
        if where is not None:
            # No copy of these weights was ever made: the files are all there is.
            stamps = {where.location: self._stamps[where.location]}
            check_unchanged(stamps, str(self._folder), str(self._model_path))
        if where is None:
            return placeholder(tensor)
        ref = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
        ref.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", where.location), ("offset", where.offset), ("length", where.length)):
            entry = ref.external_data.add()
            entry.key, entry.value = key, str(value)
        return ref

    def attach(self, options: Any, model: onnx.ModelProto) -> None:
        """Give ``options`` the arrays of ``model``'s placeholders (onnxruntime copies them when the
        session is built), and the model's folder when some weights are read from its files."""
        external = [
            t
            for t in model.graph.initializer
            if t.name in self._protos and t.data_location == onnx.TensorProto.EXTERNAL
        ]
        if self._folder is not None and any(t.name in self._files for t in external):
            options.add_session_config_entry(FOLDER_KEY, self._folder)
        wanted = [t.name for t in external if t.name not in self._files]
        if wanted:
            options.add_external_initializers(wanted, [_ort_value(self.array(n)) for n in wanted])

    def release(self, keep: Sequence[str] = ()) -> None:
        """Drop the arrays (but those in ``keep``): every session that needed them has been built."""
        kept = set(keep) | self._held
        self._arrays = {n: a for n, a in self._arrays.items() if n in kept}


_stamp = file_stamp


def light_copy(
    model: onnx.ModelProto,
    shared: SharedWeights,
    extra_outputs: Sequence[str] = (),
    clash: Callable[[], bool] | None = None,
) -> onnx.ModelProto:
    """A copy of ``model`` with placeholders for the shared initializers, plus ``extra_outputs``
    (``clash``: as for :func:`~dmlshim.execute.proofs.gather_given.add_extra_outputs`)."""
    graph = model.graph
    out = model_shell(model)
    g = out.graph
    graph_shell(graph, g)
    g.initializer.extend(shared.stub(t) if t.name in shared else t for t in graph.initializer)
    add_extra_outputs(g, extra_outputs, clash)
    return out


def handed_weights_session(
    model: onnx.ModelProto,
    make_options: Callable[[], Any],
    extra_outputs: Sequence[str],
    arrays: Mapping[str, np.ndarray],
    build: Callable[[bytes, Any], Any],
    clash: Callable[[], bool] | None = None,
) -> Callable[[], Any] | None:
    """What builds one onnxruntime session of ``model`` (``extra_outputs`` added) whose large initializers
    are handed as arrays through a new options object (``make_options``: equal to the engine's own copy of
    the caller's options) instead of serialized: ``arrays`` the engine made already are handed as they
    are, the others made for the session and dropped once onnxruntime has its copy. None when the model
    holds no such initializer (serializing it costs nothing then).

    A serialized 100 MB weight cost the bytes, onnxruntime's parse of them and its tensor at once (+290 MB
    while the whole-model check's session was built, the bytes kept for the lean session after); a handed
    one costs onnxruntime's copy (+105 MB), as ``add_external_initializers`` costs onnxruntime itself."""
    shared = SharedWeights({t.name: t for t in model.graph.initializer}, graph=model.graph)
    if not shared.names:
        return None
    shared.adopt(arrays)
    light = light_copy(model, shared, extra_outputs, clash)
    options = make_options()
    shared.attach(options, light)
    payload = light.SerializeToString()

    def session() -> Any:
        try:
            return build(payload, options)
        finally:
            shared.release()  # onnxruntime has its copy; the engine keeps the arrays it made

    return session
