"""``dmlshim.InferenceSession``: a drop-in for ``onnxruntime.InferenceSession`` that runs gather/scatter
nodes as DirectML executes them and records, per run, what ran where."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ..dml.enums import DEFAULT_FEATURE_LEVEL, FeatureLevel
from ..errors import DmlShimError
from ..execute.engine import Engine, EngineConfig, get_engine_factory
from ..execute.engines.path_choice import partitions_exact
from ..execute.feeds import FeedValidator, ModelMetadata, feed_key, node_arg
from ..execute.plan.fed_sizes import FedSizes
from ..execute.plan.sessions import terminated
from ..execute.record import RunRecord
from ..execute.weights.added_initializers import added_initializers, with_initializers
from ..execute.weights.folded_reads import keep_model_values_where_folded
from ..execute.weights.fused_reads import fused_reads, keep_model_values_where_fused
from ..execute.weights.live_initializers import LiveReader, live_engine_model
from ..execute.weights.model_source import LoadedModel, ModelSource, load_model, typed_outputs
from ..execute.weights.ort_format import (
    is_ort_format,
    onnx_bytes_from_ort_format,
    saved_graph_checked,
    unoptimized_options,
)
from ..fileio.nul_paths import as_onnxruntime_reads
from ..kernels.options import IndexMode
from ..model.ort_witness import acceptance_pending
from ..resources import guard_resources
from ..runtime.exceptions import raises_onnxruntime_errors
from ..runtime.real import (
    DISABLED_OPTIMIZERS,
    callers_options,
    holding_options,
    optimizers_disabled,
    use_global_thread_pool,
)
from ..translate.ep_declared_shapes import DeclaredOutputs
from ..translate.folding_refusal import folding_refusal
from .attributes import OrtSessionAttributes
from .c_iobinding import bind_c_iobinding
from .cpu_fallback import refuse_as_onnxruntime
from .declared_shapes import with_declared_shape_notes
from .emulate import emulate_all, with_dml_first
from .ep_context import refuse_context_model_as_onnxruntime
from .free_dims import outputs_for_inputs, overrides_by_name, with_free_dimension_overrides
from .model_config import ORT_CONFIG_KEY, options_from_model, reads_config_from_model
from .ortvalues import (
    as_array,
    numpy_outputs,
    plain_arrays,
    refuse_unconvertible_array,
)
from .output_types import overridden_outputs, with_onnxruntime_outputs
from .profiling import SessionProfiler
from .providers import providers_or_fallback, warn_options_providers
from .session_args import (
    NO_MODEL_VERSION,
    check_feed_names,
    check_run_config,
    check_run_options,
    disabled_optimizers,
    fallback_flag,
    global_thread_pool_ready,
    parse_feature_level,
    parse_index_mode,
    resolve_engine,
    wanted_outputs,
)
from .session_copy import SessionCopy, session_copy
from .session_options import (
    check_session_options,
    engine_options_and_copier,
    sharable_options,
    write_optimized_model,
)
from .session_profiling import SessionProfiling
from .session_providers import SessionProviders
from .session_queries import SessionQueries
from .session_runs import SessionRuns

__all__ = ["InferenceSession", "LoadedModel", "ModelSource", "load_model"]

logger = logging.getLogger(__name__)

_COPY_LOCK = threading.Lock()

bind_c_iobinding()  # SessionIOBinding(session._sess) takes a dmlshim session too


class InferenceSession(SessionRuns, SessionQueries, SessionProviders, SessionProfiling, OrtSessionAttributes):
    """Runs an ONNX model with its gather/scatter nodes executed as DirectML executes them.

    A drop-in for ``onnxruntime.InferenceSession``: same constructor, same methods (see
    ``docs/python-api.md`` for each one). After each ``run``, ``last_run_record`` says which gather/scatter
    nodes ran from their DirectML descriptors and which ran on onnxruntime's CPU provider, and why.

    Args:
        path_or_bytes: a model file path, serialized model bytes, or an ``onnx.ModelProto`` (not modified).
        sess_options: an ``onnxruntime.SessionOptions``, meaning what it means in onnxruntime for the whole
            model: its settings reach every onnxruntime session dmlshim builds, ``optimized_model_filepath``
            gets one optimized whole model, and profiling gives one profile from ``end_profiling()``.
        providers: ``DmlExecutionProvider`` (gather/scatter emulated, the default) and/or
            ``CPUExecutionProvider`` (alone: the whole model on onnxruntime's CPU provider, nothing
            emulated); names or ``(name, options)`` tuples. Any other provider is an error.
        provider_options: one options dict per provider, as in onnxruntime.
        feature_level: keyword-only; the DirectML feature level to emulate (``FeatureLevel`` or ``"5_0"``,
            ``"0x5000"``, ``"DML_FEATURE_LEVEL_5_0"``). Defaults to 5_0, what onnxruntime-directml requires.
        engine: keyword-only; ``"partitioned"`` (default: gather/scatter nodes through dmlshim's DirectML
            kernels, everything else in onnxruntime CPU sessions), ``"customop"``, ``"directml"`` (the
            real ``DmlExecutionProvider``, Windows only), ``"cpu"``, or a name given to
            :func:`dmlshim.execute.engine.register_engine`.
        index_mode: keyword-only; ``"error"`` (an out-of-range index raises ``IndexOutOfRangeError``, as
            ONNX says) or ``"clamp"`` (clamped into range, a stand-in for DirectML's undefined results).
        **kwargs: onnxruntime's ``enable_fallback`` and ``read_config_from_model`` (also read from
            ``ORT_LOAD_CONFIG_FROM_MODEL``, as onnxruntime) and ``disabled_optimizers`` (left out of every
            onnxruntime session dmlshim builds); other keywords onnxruntime ignores are ignored with a
            warning.

    Raises:
        BadModelError: the model cannot be read or onnxruntime rejects it.
        BadInputError: bad options, providers or feature level.
        EngineUnavailableError: the engine is unknown or cannot run on this machine.
    """

    _live_reader: LiveReader | None = None
    """Reads the ``add_initializer`` values anew before each run (None: the options add none)."""
    _feeds_accepted: tuple[Any, ...] | None = None
    """The :func:`~dmlshim.execute.feeds.feed_key` of the last plain-array feeds accepted as they were."""

    @raises_onnxruntime_errors()
    @guard_resources("loading the model")
    @holding_options
    def __init__(
        self,
        path_or_bytes: ModelSource,
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        *,
        feature_level: FeatureLevel | str | int = DEFAULT_FEATURE_LEVEL,
        engine: str | None = None,
        index_mode: IndexMode | str = IndexMode.ERROR,
        **kwargs: Any,
    ) -> None:
        path_or_bytes = as_onnxruntime_reads(path_or_bytes)  # up to a NUL, as onnxruntime reads it
        self._remember_source(path_or_bytes, sess_options, kwargs)  # a bytearray is refused, as onnxruntime
        check_session_options(sess_options)
        if sess_options is not None:
            callers_options(sess_options)
            if getattr(sess_options, "use_per_session_threads", True) is False and global_thread_pool_ready():
                use_global_thread_pool()
        source: ModelSource = path_or_bytes
        self._adding_options = sess_options  # add_initializer's values: in the caller's object only
        self._ort_format_path: str | None = None  # the .ort file, never written over
        if is_ort_format(path_or_bytes, sess_options):
            # onnxruntime's flatbuffer form: its ONNX graph, run as onnxruntime runs it (as saved)
            source = onnx_bytes_from_ort_format(path_or_bytes)
            sess_options = unoptimized_options(sess_options)
            if isinstance(path_or_bytes, (str, os.PathLike)):
                self._ort_format_path = os.fspath(path_or_bytes)
        if emulate_all():  # $DMLSHIM_ORT_EMULATE=all: DirectML emulated whatever the client asks for
            providers, provider_options = with_dml_first(providers, provider_options)
        self._fallback_enabled = fallback_flag(kwargs)
        self._disabled_optimizers = disabled_optimizers(kwargs)
        self._feature_level = parse_feature_level(feature_level)
        self._index_mode = parse_index_mode(index_mode)
        # as onnxruntime: malformed providers fall back to its CPU provider, and its fallback is then off
        self._choice, fell_back = providers_or_fallback(providers, provider_options, self._fallback_enabled)
        warn_options_providers(sess_options, providers, provider_options)
        self._fallback_enabled &= not fell_back
        self._engine_request = engine
        self._providers_given = providers  # as named: whether the CPU provider is (cpu_fallback)
        get_engine_factory(resolve_engine(engine, self._choice))  # an unknown engine fails before loading
        self._options = sess_options
        self._profiler: SessionProfiler | None = None
        self._start_profiler(path_or_bytes)
        from_file = isinstance(source, (str, os.PathLike))
        with self._span("model_loading_uri" if from_file else "model_loading_array"):  # onnxruntime's names
            # With onnxruntime's default options the default engine reads the large weights from the
            # model's files where it needs them: they are never all held in Python. With them (no files
            # written, no custom operators) onnxruntime's acceptance session goes on being built while
            # this session is (its verdict is awaited below).
            defer = (
                sess_options is None
                and not reads_config_from_model(kwargs)
                and resolve_engine(engine, self._choice) in ("partitioned", "cpu")
            )
            with saved_graph_checked() if source is not path_or_bytes else contextlib.nullcontext():
                loaded = load_model(source, sess_options, weightless=True, defer_acceptance=defer)
            # onnxruntime's constant folding may refuse at creation what its unoptimized acceptance loads
            folded = folding_refusal(loaded.proto, sess_options, loaded.path)
            if folded is not None:
                loaded.acceptance()  # onnxruntime's own refusal of the model comes first
                raise folded
        try:
            # a session of the whole model the engine builds anyway may stand for onnxruntime's acceptance
            with acceptance_pending(loaded.acceptance):
                self._build(loaded, sess_options, kwargs, path_or_bytes)
        except BaseException:
            loaded.acceptance()  # onnxruntime's refusal of the model comes first, as when it was awaited
            raise
        loaded.acceptance()
        self._outputs = with_onnxruntime_outputs(loaded, self._inputs, self._outputs)  # its acceptance's
        logger.debug(
            "session for %s ready (engine %s)", loaded.path or "<in-memory model>", self._engine.name
        )

    def _build(
        self, loaded: LoadedModel, sess_options: Any, kwargs: Mapping[str, Any], source: ModelSource
    ) -> None:
        """Everything the constructor does once the model is loaded."""
        self._loaded = loaded
        # session.disable_cpu_ep_fallback=1: onnxruntime's verdict, its class and words (cpu_fallback.py)
        refuse_as_onnxruntime(source, loaded.proto, sess_options, self._providers_given)
        # ep.context_enable=1 for a model given as bytes: onnxruntime's verdict too (ep_context.py)
        refuse_context_model_as_onnxruntime(source, sess_options)
        if reads_config_from_model(kwargs):  # as onnxruntime: the model's ort_config over the caller's
            self._options = sess_options = options_from_model(loaded.proto, sess_options)
            self._adding_options = sess_options
            self._start_profiler(source)
        # get_session_options(): onnxruntime's own copy of the caller's options, finalised as it would be
        self._config = [p for p in loaded.proto.metadata_props if p.key == ORT_CONFIG_KEY]
        self._kwargs = kwargs
        self._copy_box = self._copy_holder()
        self._describe(loaded)
        # When a copy of the caller's options means all they mean, the engine's sessions get a copy taken
        # now: onnxruntime reads the options once, here, while the engine builds some sessions on first
        # use, after the program may have changed its object for its next session. A model read without
        # its weights then keeps them there too; else the engine gets the whole model.
        self._copied_dims = (
            sharable_options(sess_options, loaded.proto, self._inputs) if sess_options is not None else None
        )
        self._last_run_record: RunRecord | None = None
        self._declared_outputs = DeclaredOutputs(loaded.proto)  # each run's outputs checked as DirectML does
        with self._span("session_initialization"), optimizers_disabled(self._disabled_optimizers):
            # Values the options add go into the model every engine runs, so that emulated nodes read them
            # too: add_external_initializers values were taken at load (their file is never read), and
            # add_initializer values are found here.
            # Asked once: at load when the model has external data (so their file is never read), else here.
            self._added = (
                loaded.added
                if loaded.added is not None
                else added_initializers(loaded.proto, self._adding_options, loaded.supplied)
            )
            fused = fused_reads(self._added, loaded, self._options)
            self._added = fused.added
            # the values add_external_initializers supplied are in loaded.proto already (not copied again)
            pending = {n: v for n, v in self._added.values.items() if n not in loaded.supplied}
            self._model = with_initializers(loaded.proto, pending) if pending else loaded.proto
            # as onnxruntime: the nodes its constant folding computes read the model's own values of
            # initializers add_initializer replaces (it applies them after optimizing)
            self._model = keep_model_values_where_folded(
                self._model,
                loaded.proto,
                set(self._added.values) - set(self._added.external) - set(loaded.supplied),
                folding=self._constant_folding(),
            )
            self._model = keep_model_values_where_fused(self._model, loaded.proto, fused.readers)
            self._write_optimized_model()
            self._live_model(loaded, self._adding_options)
            self._engine: Engine = self._build_engine()

    def _live_model(self, loaded: LoadedModel, sess_options: Any) -> None:
        """Point the engine's model at the ``add_initializer`` values as they are at each run."""
        names = set(self._added.values) - set(self._added.external) - set(loaded.supplied)
        self._model, self._live_reader = live_engine_model(
            self._model, loaded.proto, names, self._options, sess_options
        )

    def _constant_folding(self) -> bool:
        """Whether onnxruntime's constant folding runs for these options (level basic or above)."""
        if "ConstantFolding" in self._disabled_optimizers:
            return False
        so = self._options
        level = getattr(so, "graph_optimization_level", None) if so is not None else None
        return level is None or int(level) > 0

    def _session_copy(self) -> SessionCopy:
        given = self._sess_options_initial
        return session_copy(given, self._choice, config=self._config, kwargs=self._kwargs)

    def _copy_holder(self) -> list[SessionCopy | None]:
        """Where :attr:`_copy` is kept. Copying the caller's options builds two probe sessions (about as
        long as onnxruntime takes to build a small model's session): done now when the caller gave an
        options object (later changes to it must not show), else when first asked for (onnxruntime's
        defaults and the model's own configuration cannot change meanwhile). A list, so that a
        ``copy.copy`` of the session shares it, as it shares everything else."""
        return [self._session_copy() if self._sess_options_initial is not None else None]

    @property
    def _copy(self) -> SessionCopy:
        box = self._copy_box
        made = box[0]
        if made is None:
            with _COPY_LOCK:
                if box[0] is None:
                    box[0] = self._session_copy()
                made = box[0]
        assert made is not None
        return made

    def _describe(self, loaded: LoadedModel) -> None:
        proto = loaded.proto
        graph = proto.graph
        init_names = {t.name for t in graph.initializer}
        # As onnxruntime: before IR version 4 every initializer is a constant, even one listed as a graph
        # input, and cannot be fed; from 4 on such an initializer is a default the caller may override.
        self._inputs = with_free_dimension_overrides(
            proto,
            tuple(node_arg(v) for v in graph.input if v.name not in init_names),
            self._options,
            loaded.supplied,
        )
        self._overridable = (
            tuple(node_arg(v) for v in graph.input if v.name in init_names) if proto.ir_version >= 4 else ()
        )
        asked = partial(overridden_outputs, proto, self._inputs)  # onnxruntime's, with the overrides
        self._outputs = outputs_for_inputs(proto, self._inputs, typed_outputs, asked)
        self._fed_sizes = FedSizes.of(proto)  # gathers sized from the feeds before any engine allocates
        self._output_names = [o.name for o in self._outputs]
        self._validator = FeedValidator(self._inputs, self._overridable)
        self._meta = ModelMetadata(
            producer_name=proto.producer_name,
            graph_name=graph.name,
            domain=proto.domain,
            description=proto.doc_string,
            graph_description=graph.doc_string,
            version=int(proto.model_version) if proto.HasField("model_version") else NO_MODEL_VERSION,
            custom_metadata_map={p.key: p.value for p in proto.metadata_props},
        )

    def _write_optimized_model(self) -> None:
        """``optimized_model_filepath``: onnxruntime reads the model file, or the model as the options
        changed it (then with every weight in it, so that onnxruntime writes them all into the file)."""
        so, loaded = self._options, self._loaded
        path, from_proto = (None if loaded.supplied else loaded.path), bool(self._added.values)
        whole = so is not None and so.optimized_model_filepath and (from_proto or path is None)
        model = loaded.with_weights(self._model) if whole else self._model
        write_optimized_model(model, path, so, from_proto=from_proto, source_path=self._ort_format_path)

    def _build_engine(self) -> Engine:
        name = resolve_engine(self._engine_request, self._choice)
        profiler = self._profiler
        model = self._model
        folder = self._loaded.weights_folder
        # The default and cpu engines read the weights from the model's files: with onnxruntime's default
        # options (their own sessions are told where), or with a copy of the caller's that is told where.
        # The custom-op engine always builds its one session from options it owns, told where too.
        customop = name == "customop"
        in_files = customop or (
            name in ("partitioned", "cpu") and (self._options is None or self._copied_dims is not None)
        )
        if folder is not None and not in_files:
            model = self._loaded.with_weights(model)  # every weight read into the model
        elif folder is not None:
            self._loaded.check_unchanged()  # onnxruntime is about to read the weights from the files
        options, fresh = engine_options_and_copier(
            self._options,
            profile_prefix=profiler.partition_prefix if profiler else None,
            # the added/supplied initializers are in the model now; the partitions must not get them
            without_added=bool(self._added.external or self._loaded.supplied),
            private=self._copied_dims is not None,
            weights_folder=folder if in_files and not customop else None,
            free_dimensions=overrides_by_name(self._loaded.proto, self._inputs)
            if self._copied_dims is None
            else self._copied_dims,
        )
        config = EngineConfig(
            feature_level=self._feature_level,
            index_mode=self._index_mode,
            sess_options=options,
            fresh_options=fresh,
            # Only the real DirectML engine hands providers to onnxruntime; the others run on its CPU.
            providers=tuple(zip(self._choice.names, self._choice.options, strict=True))
            if name == "directml"
            else None,
            model_path=self._loaded.weights_path,
            # A profile times every node as it runs. Where partitioned runs give onnxruntime's bits (at most
            # basic), they answer every profiled run (no check's session is built); beyond basic the check
            # answers as without profiling, every emulated node's kernel run and timed on every run.
            whole_model_check=profiler is None or not partitions_exact(options),
            profiling=profiler is not None,
        )
        try:
            engine = get_engine_factory(name)(model, config)
        except DmlShimError as exc:
            if exc.path is None:
                exc.path = self._loaded.path
            raise
        if profiler is not None and hasattr(engine, "step_observer"):
            engine.step_observer = profiler.observe_step
        return engine

    # --- running -----------------------------------------------------------------------------------

    def _wanted(self, output_names: Sequence[str] | None) -> list[str]:
        return wanted_outputs(output_names, self._output_names)

    def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(input_feed, Mapping):
            return self._validator.validate(input_feed)  # refused, as onnxruntime's Python layer does
        self._validator.check_present(input_feed)  # onnxruntime's Python layer checks this first
        check_feed_names(input_feed)
        if not plain_arrays(input_feed.values()):
            for name, value in input_feed.items():
                refuse_unconvertible_array(name, value)
            input_feed = {name: as_array(value) for name, value in input_feed.items()}
        return self._validator.validate(input_feed, present=True)

    def _execute(self, names: list[str], feeds: dict[str, Any], run_options: Any) -> list[Any]:
        if run_options is not None:
            check_run_options(run_options)
            stop = terminated(run_options)
            if stop is not None:
                raise stop  # as onnxruntime: a run asked to terminate does not start (emulated nodes too)
            check_run_config(run_options, self._options)
        self._loaded.check_files()  # a mapped external-data file cut short is refused, not a SIGBUS
        self._fed_sizes.check(feeds, numpy_values=self._engine.name in ("partitioned", "customop"))
        if self._live_reader is not None:  # the add_initializer values as the caller's buffers hold them now
            feeds = {**self._live_reader.read(), **feeds}
        if self._profiler is None and DISABLED_OPTIMIZERS.get() == self._disabled_optimizers:
            outputs, record = self._engine.run(names, feeds, run_options=run_options)
        else:
            with self._span("model_run"), optimizers_disabled(self._disabled_optimizers):
                outputs, record = self._engine.run(names, feeds, run_options=run_options)
        self._last_run_record = with_declared_shape_notes(self._declared_outputs, record, names, outputs)
        return outputs

    @raises_onnxruntime_errors()
    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
    ) -> list[Any]:
        """Compute graph outputs.

        Args:
            output_names: the outputs wanted, or None (or ``[]``) for all of them in graph order.
            input_feed: one value per graph input, by name: numpy arrays (never modified) or CPU
                ``onnxruntime.OrtValue``s.
            run_options: an ``onnxruntime.RunOptions`` passed to the onnxruntime sessions, or None.

        Returns:
            The outputs, in the order asked for.

        Raises:
            BadInputError: a missing or unknown feed, a wrong dtype or shape, an unknown output name, or a
                failure of onnxruntime on these inputs.
            IndexOutOfRangeError: an index out of range in an emulated node (``index_mode="error"``).
            NotSupportedError: an output numpy cannot hold (bfloat16, float8, 4-bit), a ``RuntimeError``
                as onnxruntime's ``run`` raises there (``run_with_ort_values`` returns those).
        """
        names = list(self._output_names) if output_names is None else self._wanted(output_names)
        return numpy_outputs(names, self._run_values(names, input_feed, run_options))

    @guard_resources("running the model")
    def _run_values(self, names: list[str], input_feed: Mapping[str, Any], run_options: Any) -> list[Any]:
        """The run behind ``run`` and ``run_with_ort_values``: outputs numpy cannot hold stay OrtValues."""
        key = feed_key(input_feed) if type(input_feed) is dict else None
        if key is None:
            return self._execute(names, self._feeds(input_feed), run_options)
        if key == self._feeds_accepted:  # the dtypes and shapes of feeds accepted as they were
            feeds = dict(input_feed)
        else:
            feeds = self._feeds(input_feed)
            if all(feeds[name] is value for name, value in input_feed.items()):
                self._feeds_accepted = key
        if run_options is None and self._live_reader is None and self._profiler is None:
            steady = getattr(self._engine, "run_steady", None)
            if steady is not None and DISABLED_OPTIMIZERS.get() == self._disabled_optimizers:
                self._loaded.check_files()  # a mapped external-data file cut short is refused, not a SIGBUS
                # the same shapes as an accepted run, but a fed bound or shape may differ (Range(0, n, 1))
                self._fed_sizes.check_values(
                    feeds, numpy_values=self._engine.name in ("partitioned", "customop")
                )
                answered = self._run_steady(steady, names, feeds, key)
                if answered is not None:
                    return answered
        return self._execute(names, feeds, run_options)

    def _run_steady(
        self, steady: Callable[..., Any], names: list[str], feeds: dict[str, Any], key: Any
    ) -> list[Any] | None:
        """The outputs of a run the engine's steady lane answers, or None (:meth:`_execute` runs it)."""
        answered = steady(names, feeds, key)
        if answered is None:
            return None
        outputs, record = answered
        self._last_run_record = with_declared_shape_notes(self._declared_outputs, record, names, outputs)
        return outputs
