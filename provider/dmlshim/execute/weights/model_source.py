"""Reading a model for a session: from a path, bytes or an ``onnx.ModelProto``, checked once."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from ...errors import BadModelError
from ...fileio.external_data import ExternalRef
from ...fileio.filekind import require_onnx_model
from ...fileio.nul_paths import BytesPath, refuse_undecodable
from ...limits import check_bytes
from ...model.declared_types import (
    dim_params,
    resolved_outputs,
    source_outputs,
    without_invented_dims,
)
from ...model.last_inference import infer_shapes as remembered_inference
from ...model.modelcheck import check_model, load_external_data
from ...model.prepare import prepare_model
from ...model.weightless import is_external, read_by_value, tensor_nbytes, without_weights
from ...runtime.exceptions import (
    as_onnxruntime_error,
    check_failure_class,
    refusal_class,
    with_onnxruntime_class,
    with_onnxruntime_words,
)
from ...runtime.real import pybind_state
from .added_initializers import AddedInitializers
from .data_folder import load_in_memory_external_data, named_folder_refusal
from .file_slices import read_weightless
from .linked_model import leads_out, linked_weights
from .ort_format import is_ort_format, onnx_bytes_from_ort_format, saved_graph_checked
from .shared import MAP_MIN_BYTES, SHARE_MIN_BYTES
from .snapshot import ExternalDataGuard, WeightSnapshot, read_inline, snapshot_inline
from .supplied import take_supplied_initializers
from .values import check_unchanged, load_small_external_data, weight_files, with_weights

logger = logging.getLogger(__name__)

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto
"""A model file path, serialized model bytes, or a ``ModelProto``."""


def _no_verdict() -> None:
    """The verdict of a model checked while it was loaded."""


@dataclass(frozen=True)
class LoadedModel:
    """A model, the file it came from (None for bytes or a ModelProto), and what the session options add
    when that was asked while loading (``added.external``: the ``add_external_initializers`` names, whose
    values are in ``proto``; None when it was not asked)."""

    proto: onnx.ModelProto
    path: str | None
    added: AddedInitializers | None = None
    weight_files: Mapping[str, tuple[int, int] | None] | None = None
    """Read without its weights (``load_model(weightless=True)``): the files its top-level external
    initializers point at (relative to :attr:`weights_folder`), with their size and modification time
    when read; None when ``proto`` holds every weight but those of ``add_external_initializers``."""
    snapshot: WeightSnapshot | None = None
    """The session's own copy of the large weights the .onnx file held inline (their external data
    points there), kept while this object lives; None when there were none (or they are in ``proto``)."""
    guard: ExternalDataGuard | None = None
    """The external data the user chose that sessions of this model map (None: none is mapped)."""
    acceptance: Callable[[], None] = field(default=_no_verdict, compare=False)
    """onnxruntime's verdict on the model (``load_model(defer_acceptance=True)``): raises its refusal;
    a no-op once decided."""
    real_path: str | None = None
    """For a model file reached through a symbolic link leading out of its folder (the Hugging Face
    cache's ``snapshots/<rev>/model.onnx -> ../../blobs/<sha>``) whose large weights all lie in the folder
    of its real file: that real file, the external-data references of ``proto`` being rewritten relative
    to its folder (:func:`~dmlshim.execute.weights.linked_model.linked_weights`); None otherwise."""

    @property
    def supplied(self) -> frozenset[str]:
        """The initializers ``add_external_initializers`` supplied (their values are in ``proto``)."""
        return self.added.external if self.added is not None else frozenset()

    @property
    def weightless(self) -> bool:
        """``proto`` keeps its large top-level initializers as references into the model's files."""
        return self.weight_files is not None

    @property
    def weights_path(self) -> str | None:
        """A path whose folder the external-data references of ``proto`` are relative to: the model file,
        or a name in the folder of :attr:`snapshot` (None for a model from bytes or a ModelProto)."""
        if self.path is None or self.snapshot is None:
            return self.real_path or self.path
        return os.path.join(self.snapshot.folder, os.path.basename(self.path))

    @property
    def weights_folder(self) -> str | None:
        """The folder the external-data references of a model read without its weights are relative to
        (None: ``proto`` holds its weights)."""
        path = self.weights_path
        if self.weight_files is None or path is None:
            return None
        return os.path.dirname(os.path.abspath(path))

    def check_files(self) -> None:
        """Refuse a run once an external-data file the sessions map has been cut short (reading it would
        kill the process).

        Raises:
            BadModelError: a mapped file is shorter than the weights in it.
        """
        if self.guard is not None:
            self.guard.check()

    def check_unchanged(self) -> None:
        """Refuse to go on when a file this model's weights are read from changed since it was read.

        Raises:
            BadModelError: a file's size or modification time differs.
        """
        folder = self.weights_folder
        if folder is not None and self.weight_files is not None and self.path is not None:
            check_unchanged(self.weight_files, folder, self.path)

    def with_weights(self, model: onnx.ModelProto | None = None) -> onnx.ModelProto:
        """The model with every weight in it: ``proto`` itself, or for a model read without its weights
        a copy with them read from its files (:func:`dmlshim.execute.weights.values.with_weights`).

        Args:
            model: ``proto`` as changed since (values the session options add), instead of ``proto``.

        Raises:
            BadModelError: a file changed since the model was read, or cannot be read.
        """
        model = self.proto if model is None else model
        path = self.weights_path
        if self.weight_files is None or path is None:
            return model
        return with_weights(model, path, self.weight_files, shown=self.path)


def load_model(
    model: ModelSource,
    sess_options: Any = None,
    *,
    weightless: bool = False,
    own_weights: bool = True,
    defer_acceptance: bool = False,
    unknown_operators_allowed: bool = False,
) -> LoadedModel:
    """Read a model from a path, bytes or a ModelProto, with external data kept inside the model's folder,
    checked (:func:`dmlshim.model.modelcheck.check_model`) and prepared as onnxruntime prepares it (local
    functions expanded, nodes sorted: :func:`dmlshim.model.prepare.prepare_model`).

    External-data initializers that ``sess_options`` supplies (``add_external_initializers``) are taken
    from it, as onnxruntime takes them; their file is neither checked nor read
    (:mod:`dmlshim.execute.weights.supplied`).

    With ``weightless`` (a model file), the large top-level initializers are never read: those held
    inline become external data pointing at their bytes in the .onnx file
    (:func:`dmlshim.execute.weights.file_slices.read_weightless`) and large external data stays external (both
    checked as usual; small external tensors are read, as small inline ones stay). With ``own_weights``
    (a session, validate) the large inline weights are then copied once to a file of the model's own
    (``LoadedModel.snapshot``), so that nothing done to the .onnx file afterwards reaches the model, as
    nothing reaches an onnxruntime session; without it (a command that only reads the structure) they
    keep pointing into the .onnx file;
    ``LoadedModel.with_weights`` gives the whole model to whoever needs it. With ``defer_acceptance``
    (a model file) onnxruntime's acceptance session goes on being built while the weights are copied and
    the caller works: the caller calls ``LoadedModel.acceptance()`` before anything shows the model and
    before raising any error of its own (see :func:`~dmlshim.model.modelcheck.check_model`). Only the
    initializers the file keeps in external data count as such for ``sess_options``
    (``add_external_initializers``). With ``unknown_operators_allowed`` (inspect) a model whose operators
    onnxruntime does not know is read rather than refused (:func:`~dmlshim.model.modelcheck.check_model`).

    Raises:
        BadModelError: the file is missing, empty, is not an ONNX model, is truncated, or has external data
            whose location leaves the model's folder.
        TooLargeError: the model's weights (external data, dense forms) cannot fit in the memory limit.
    """
    if not isinstance(model, onnx.ModelProto) and is_ort_format(model, sess_options):
        with saved_graph_checked():  # onnxruntime's flatbuffer form: the ONNX graph it holds
            return load_model(
                onnx_bytes_from_ort_format(model),
                sess_options,
                weightless=weightless,
                own_weights=own_weights,
                defer_acceptance=defer_acceptance,
            )
    if isinstance(model, onnx.ModelProto):
        # the session's own copy, as onnxruntime copies the bytes it is given: the caller's proto changed
        # afterwards (its weights edited in place, a node removed) changed the runs and set_providers
        own = onnx.ModelProto()
        own.CopyFrom(model)
        loaded = LoadedModel(own, None)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            parsed = onnx.load_from_string(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as exc:
            error = BadModelError(f"the bytes are not a serialized ONNX model: {exc}")
            words = "Failed to load model because protobuf parsing failed."  # onnxruntime's message
            raise with_onnxruntime_words(error, words) from exc
        added = take_supplied_initializers(parsed, sess_options) if parsed.HasField("graph") else None
        load_in_memory_external_data(parsed, bytes(model), sess_options)
        loaded = LoadedModel(parsed, None, added)
    elif isinstance(model, (str, os.PathLike)):
        if os.fspath(model) in ("", b""):
            # onnxruntime takes an empty path for no model and fails in its C++ constructor (a TypeError)
            raise as_onnxruntime_error(BadModelError("the model path is empty", value=""), TypeError)
        if isinstance(os.fspath(model), str) and not isinstance(model, BytesPath):
            refuse_undecodable(os.fspath(model))  # no UTF-8: onnxruntime's TypeError (the CLI's MODEL too)
        _refuse_unopenable(model)
        path = Path(model)
        if not path.is_file():
            error = BadModelError(
                "model file not found" if not path.exists() else "not a regular file", path=str(path)
            )
            # onnxruntime reads a folder (or a device) and fails to parse it: InvalidProtobuf
            if path.exists():
                raise with_onnxruntime_class(error, pybind_state.InvalidProtobuf)
            shown = os.fsdecode(model)
            raise with_onnxruntime_words(
                error, f"Load model from {shown} failed:Load model {shown} failed. File doesn't exist"
            )
        require_onnx_model(path)
        found = _read_weightless(path) if weightless else None
        light, inline = found if found is not None else (None, frozenset[str]())
        if light is None and weightless:
            # onnx reads the whole file into memory: a file the walk could not read (a corrupt or hostile
            # one, a run of zeros) is refused before that when it is larger than the memory limit
            check_bytes(
                path.stat().st_size, what=f"reading the model file whole ({path.name})", path=str(path)
            )
        try:
            proto = light if light is not None else onnx.load(str(path), load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError) as exc:
            raise BadModelError(f"not a readable ONNX model: {exc}", path=str(path)) from exc
        _require_graph(proto, str(path))
        named_folder_refusal(proto, sess_options, str(path))
        added = take_supplied_initializers(proto, sess_options, path.parent, inline=inline)
        # before reading any weights; read without them, only the small ones count against the limits
        external: list[ExternalRef] = []
        checked_sorted: list[bool] = []
        verdict = check_model(
            proto,
            path,
            sess_options=sess_options,
            read_below=SHARE_MIN_BYTES if light else None,
            defer_onnxruntime=defer_acceptance,
            unknown_operators_allowed=unknown_operators_allowed,
            external_found=external,
            sorted_found=checked_sorted,
        )
        try:
            files = snapshot = guard = real_path = None
            if light is not None:
                if external:  # none: nothing to load (the check's walk for them is not made again)
                    load_small_external_data(proto, path, MAP_MIN_BYTES, checked=len(external))
                if own_weights:  # a session's: what its onnxruntime sessions read by value, inline
                    inline = _inline_read_by_value(proto, inline, path)
                snapshot = _own_inline_weights(proto, path, inline) if own_weights else None
                folder = snapshot.folder if snapshot is not None else os.path.dirname(os.path.abspath(path))
                if snapshot is None and leads_out(path):
                    real_path, beside = linked_weights(proto, path)
                    _inline(proto, beside, path, "the weights beside the model's real file")
                    folder = os.path.dirname(real_path) if real_path is not None else folder
                files = weight_files(proto, folder) or None
                if files is not None and snapshot is None and own_weights:
                    guard = ExternalDataGuard(proto, folder, str(path))
            elif external:
                load_external_data(proto, path)
            # the verdict names nodes of the model as onnxruntime was given it: waited for before a change
            prepared = prepare_model(
                proto, owned=True, before_change=verdict, sorted_known=bool(checked_sorted)
            )
        except BaseException:
            verdict()  # onnxruntime's refusal first, as when it was waited for
            raise
        loaded = LoadedModel(prepared, str(path), added, files, snapshot, guard, verdict, real_path)
    else:
        # onnxruntime raises a TypeError here ("Unable to load from type ..."): so is this error
        raise as_onnxruntime_error(
            BadModelError(
                f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}",
                value=type(model).__name__,
            ),
            TypeError,
        )
    _require_graph(loaded.proto, loaded.path)
    if loaded.path is None:
        decided = check_model(
            loaded.proto, sess_options=sess_options, unknown_operators_allowed=unknown_operators_allowed
        )
        prepared = prepare_model(loaded.proto, owned=True)  # parsed from bytes, or copied, here
        loaded = LoadedModel(prepared, None, loaded.added, acceptance=decided)  # its answers kept
    return loaded


def _read_weightless(path: Path) -> tuple[onnx.ModelProto, frozenset[str]] | None:
    """The model at ``path`` without its large inline weights and the names of those (None: read it
    whole). A model file that is a link leading out of its folder is read so too: its weights become
    external data in the folder of its real file, which onnxruntime accepts, as the model check does
    (:func:`~dmlshim.execute.weights.linked_model.linked_weights` gives them one folder)."""
    found = read_weightless(path, SHARE_MIN_BYTES)
    if found is not None and found[1]:
        logger.debug("%d initializers of %s left in the file", len(found[1]), path)
    return found


def _inline_read_by_value(proto: onnx.ModelProto, inline: frozenset[str], path: Path) -> frozenset[str]:
    """Read into ``proto`` those of its initializers left in the file (``inline``) whose values
    onnxruntime's type inference reads (:func:`dmlshim.model.weightless.read_by_value`: it cannot read
    them from a file or from ``add_external_initializers``); the rest of ``inline``."""
    read = read_by_value(proto.graph, (t for t in proto.graph.initializer if t.name in inline))
    if read:
        _inline(proto, read, path)
    return inline - read


def _inline(
    proto: onnx.ModelProto,
    names: frozenset[str],
    path: Path,
    what: str = "the constants onnxruntime's type inference reads",
) -> None:
    """Read the initializers ``names`` (external data relative to the folder of ``path``, the model
    file itself for those it held inline) into ``proto``, as inline data; refused first when their
    bytes would pass the memory limit."""
    from onnx.external_data_helper import load_external_data_for_tensor

    tensors = [t for t in proto.graph.initializer if t.name in names]
    if not tensors:
        return
    check_bytes(
        sum(tensor_nbytes(t) for t in tensors),
        what=f"reading {what} ({', '.join(sorted(names))})",
        path=str(path),
    )
    for tensor in tensors:
        load_external_data_for_tensor(tensor, str(path.parent))
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _own_inline_weights(proto: onnx.ModelProto, path: Path, inline: frozenset[str]) -> WeightSnapshot | None:
    """Make the large weights the .onnx file holds inline (``inline``: external data pointing into the
    file itself) the session's own, as onnxruntime's are: copied to a file of their own
    (:func:`dmlshim.execute.weights.snapshot.snapshot_inline`), or, when the model also keeps large
    weights in external data the user chose (one folder holds every reference onnxruntime reads) or
    the copy cannot be made, read into ``proto``. None when they are in ``proto`` (or there are none)."""
    if not inline:
        return None
    chosen = [t for t in proto.graph.initializer if is_external(t) and t.name not in inline]
    if not chosen:
        try:
            return snapshot_inline(proto, path, inline)
        except OSError as exc:
            logger.warning("the weights of %s cannot be copied (%s); they are read into the model", path, exc)
    read_inline(proto, path, inline)
    return None


def _refuse_unopenable(model: str | os.PathLike[str]) -> None:
    """Refuse a model path the system cannot open as a file, as onnxruntime refuses it (``Fail``,
    ``system error number N``): ``m.onnx/`` or ``m.onnx/x`` (a file where a folder is named; ``Path()``
    drops a trailing separator, so dmlshim loaded ``m.onnx/`` that onnxruntime refuses), a name too long
    for the file system (a bare ``OSError`` before)."""
    shown = os.fsdecode(model)
    try:
        os.stat(model)
    except FileNotFoundError:
        return  # said below, in onnxruntime's words
    except (OSError, ValueError) as exc:
        number = exc.errno if isinstance(exc, OSError) else None
        if number is None:
            return  # NUL: said below as a missing file
        error = BadModelError(f"the model path cannot be opened: {exc.strerror or exc}", path=shown)
        error = with_onnxruntime_class(error, pybind_state.Fail)
        raise with_onnxruntime_words(
            error, f"Load model from {shown} failed:system error number {number}"
        ) from exc


def _require_graph(proto: onnx.ModelProto, path: str | None) -> None:
    # An empty file parses as an empty ModelProto; say so instead of letting onnxruntime say "no graph".
    if not proto.HasField("graph") or not proto.opset_import:
        error = BadModelError(
            "not an ONNX model (empty, or no graph or no opset_import)",
            path=path,
            rule="an ONNX model has a graph and at least one opset_import",
        )
        # onnxruntime's class for it, asked of the installed version (they differ between versions)
        source = path if path is not None and os.path.isfile(path) else proto.SerializeToString()
        no_graph = not proto.HasField("graph")
        default = pybind_state.InvalidArgument if no_graph else check_failure_class()
        raise with_onnxruntime_class(error, refusal_class(source, default))


def typed_outputs(model: onnx.ModelProto, *, overridden: bool = False) -> list[onnx.ValueInfoProto]:
    """The graph outputs as onnxruntime describes them: declared types and shapes merged with shape
    inference as onnxruntime merges them (:mod:`dmlshim.model.declared_types`: a type for an output
    declared without one, a size for a dimension declared symbolic or unknown, and no size where the
    declaration and inference disagree). ``overridden``: the graph inputs carry the caller's
    free-dimension overrides for this call only, so no later pass asks for this inference again."""
    sources = source_outputs(model)
    outputs = [sources.get(out.name) or out for out in model.graph.output]
    inferable = model
    if any(out.name in sources and out.type.WhichOneof("value") for out in model.graph.output):
        # an input, initializer or constant listed as an output is reported from its source; its declaration
        # as an output is left out of inference (onnx refuses one that differs from the source's shape)
        inferable = onnx.ModelProto()
        inferable.CopyFrom(model)
        for out in inferable.graph.output:
            if out.name in sources:
                out.ClearField("type")
    try:
        inferred = _inferred(inferable, remember=not overridden and inferable is model)
    except (
        onnx.shape_inference.InferenceError,
        onnx.checker.ValidationError,
        ValueError,
        RuntimeError,
    ) as exc:
        logger.debug("shape inference failed, output types stay as declared: %s", exc)
        return outputs
    merged = {v.name: v for v in inferred.graph.output}
    declared = {v.name for v in model.graph.input}  # not the weights the weightless copy lists as inputs
    inputs = [v for v in inferred.graph.input if v.name in declared]
    known = {v.name: v for v in (*inferred.graph.value_info, *inputs, *inferred.graph.output)}
    # every name the declarations use (a walk of every value): read only for a name shaped like onnx's own
    ours = functools.cache(functools.partial(dim_params, model.graph))
    typed: dict[str, onnx.ValueInfoProto] = {}
    for out in outputs:  # a name listed twice is one value, typed by its first declaration
        if out.type.WhichOneof("value") and out.name not in sources:
            typed.setdefault(out.name, out)
    resolved = resolved_outputs(model, inferred, typed) if typed else {}
    result = []
    first: dict[str, onnx.ValueInfoProto] = {}
    for out in outputs:
        if out.name in first:
            result.append(first[out.name])
            continue
        candidate = merged.get(out.name)
        if out.type.WhichOneof("value") is None:
            candidate = known.get(out.name, candidate)
        elif out.name in sources:
            candidate = out
        elif out.name in resolved:
            candidate = onnx.helper.make_value_info(out.name, resolved[out.name], out.doc_string)
        if candidate is not None and candidate.type.WhichOneof("value"):
            result.append(without_invented_dims(candidate, ours))
        else:
            result.append(out)
        first[out.name] = result[-1]
    return result


def _inferred(model: onnx.ModelProto, remember: bool = True) -> onnx.ModelProto:
    """onnx's inference of ``model`` without data propagation (``check_type`` and ``strict_mode`` off),
    from its weightless copy: the pass the model check ran on that very copy (and data propagation asks
    for next), so it is answered from :mod:`dmlshim.model.last_inference` instead of run a third time.
    The weights left out are typed graph inputs of their shape; no inference without data propagation
    reads a value that large (values read for shapes are shape-sized, and the copy keeps every
    initializer under 64 KB), so the types are those of the whole model's inference."""
    return remembered_inference(without_weights(model), remember=remember)
