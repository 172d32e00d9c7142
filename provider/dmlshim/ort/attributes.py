"""The private attributes client libraries read on an ``onnxruntime.InferenceSession``, on dmlshim's.

onnxruntime's Python session keeps its state in underscore attributes, and popular clients read them:
optimum reads ``_model_path`` on every load (to find the model's folder), onnxruntime's own tests reach
``_sess`` (the C++ session), ``_providers``, ``_provider_options``, ``_inputs_meta`` and the like.
:class:`OrtSessionAttributes` gives a dmlshim session the same names with onnxruntime's meanings;
``_sess`` is a :class:`SessionCore`, which answers the C++ session's methods by running the dmlshim
session (so whatever runs through it is emulated too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .session_surface import SessionSurface


class settable_property(property):
    """A property that a program may also assign, as it may assign any attribute of onnxruntime's session
    (insightface's ``InferenceSession`` subclass sets ``self.model_path``): once assigned, the program reads
    back its own value; dmlshim itself never reads these names, only its private state."""

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        assert self.fget is not None
        own = obj.__dict__
        name = self.fget.__name__
        return own[name] if name in own else self.fget(obj)

    def __set__(self, obj: Any, value: Any) -> None:
        assert self.fget is not None
        obj.__dict__[self.fget.__name__] = value

    def __delete__(self, obj: Any) -> None:
        assert self.fget is not None
        obj.__dict__.pop(self.fget.__name__, None)


class SessionCore:
    """What ``session._sess`` is in onnxruntime (its C++ session), answered by a dmlshim session."""

    def __init__(self, session: SessionSurface) -> None:
        self._session = session

    @property
    def session_options(self) -> Any:
        return self._session.get_session_options()

    @property
    def inputs_meta(self) -> list[Any]:
        return self._session.get_inputs()

    @property
    def outputs_meta(self) -> list[Any]:
        return self._session.get_outputs()

    @property
    def overridable_initializers(self) -> list[Any]:
        return self._session.get_overridable_initializers()

    @property
    def model_meta(self) -> Any:
        return self._session.get_modelmeta()

    @property
    def input_meminfos(self) -> list[Any]:
        return self._session.get_input_memory_infos()

    @property
    def output_meminfos(self) -> list[Any]:
        return self._session.get_output_memory_infos()

    def get_providers(self) -> list[str]:
        return self._session.get_providers()

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return self._session.get_provider_options()

    @property
    def get_profiling_start_time_ns(self) -> int:
        """A property on onnxruntime's C++ session (its Python session's method returns it)."""
        return self._session.get_profiling_start_time_ns()

    def end_profiling(self) -> str:
        return self._session.end_profiling()

    def is_webgpu_graph_capture_enabled(self) -> bool:
        return False

    def run(self, output_names: Sequence[str], input_feed: Mapping[str, Any], run_options: Any = None) -> Any:
        return self._session.run(output_names, input_feed, run_options)

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        # a SessionIOBinding(session._sess) holds dmlshim's binding (dmlshim.ort.c_iobinding)
        self._session.run_with_iobinding(getattr(iobinding, "dmlshim_binding", iobinding), run_options)

    def run_with_ort_values(
        self, input_dict_ort_values: Mapping[str, Any], output_names: Sequence[str], run_options: Any = None
    ) -> Any:
        """The C++ session's call: C-level ``OrtValue`` feeds (``OrtValue._get_c_value()``) in, an
        ``OrtValueVector`` out (argument order as in onnxruntime's binding: feeds, names, options)."""
        from ..runtime.real import C, ort

        feeds = {
            name: ort.OrtValue(value) if isinstance(value, C.OrtValue) else value
            for name, value in input_dict_ort_values.items()
        }
        vector = C.OrtValueVector()
        for value in self._session.run_with_ort_values(list(output_names), feeds, run_options):
            vector.push_back(value._get_c_value())
        return vector

    def run_with_ortvaluevector(
        self,
        run_options: Any,
        feed_names: Sequence[str],
        feeds: Any,
        fetch_names: Sequence[str],
        fetches: Any,
        fetch_devices: Any,
    ) -> None:
        self._session.run_with_ortvaluevector(
            run_options, feed_names, feeds, fetch_names, fetches, fetch_devices
        )

    def __repr__(self) -> str:
        return f"<dmlshim SessionCore of {self._session.model_path or 'an in-memory model'}>"


_PUBLIC_INSTEAD = {
    "_captured_graph_bindings": "release_captured_graph() (dmlshim captures no graph)",
    "_reset_session": "set_providers(providers, provider_options)",
    "_create_inference_session": "set_providers(providers, provider_options), or a new InferenceSession",
    "_bind_session": "a new InferenceSession",
    "_register_ep_custom_ops": "SessionOptions.register_custom_ops_library(path)",
    "_validate_input": "run(), which checks the feeds",
}
"""onnxruntime's private session attributes that dmlshim does not answer, and the public call to use."""


class OrtSessionAttributes:
    """onnxruntime's private session attributes, with onnxruntime's meanings (mixed into the session)."""

    _model_path: str | None
    _model_bytes: bytes | None
    _fallback_enabled: bool
    _sess_options_initial: Any
    _read_config_from_model: bool
    _from_model_package = False  # onnxruntime 1.25+: a session opened from a model package (never here)

    # The object protocols as onnxruntime's session answers them: copy.copy shares the session (a new
    # Python object over the same state); pickle and copy.deepcopy fail with onnxruntime's TypeError.
    def __copy__(self) -> Any:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def __reduce_ex__(self, protocol: Any) -> Any:
        # onnxruntime's own state (its C++ session) cannot be pickled, but a program's subclass that says
        # what its state is (__getstate__, and __setstate__ building the session again, as insightface's
        # PickableInferenceSession does) pickles and deep-copies by it
        if getattr(type(self), "__getstate__", None) is not getattr(object, "__getstate__", None):
            return object.__reduce_ex__(self, protocol)
        raise TypeError("cannot pickle 'onnxruntime.capi.onnxruntime_pybind11_state.InferenceSession' object")

    def _remember_source(self, path_or_bytes: Any, sess_options: Any, kwargs: Mapping[str, Any]) -> None:
        """``_model_path`` / ``_model_bytes`` / ``_sess_options_initial`` / ``_read_config_from_model`` as
        onnxruntime sets them from its arguments.

        Raises:
            BadInputError: a ``bytearray`` or ``memoryview`` model, refused with onnxruntime's ``TypeError``.
        """
        import os

        from .model_config import reads_config_from_model

        route_ort_iobinding()
        if isinstance(path_or_bytes, (bytearray, memoryview)):
            raise unloadable_type(path_or_bytes)
        if isinstance(path_or_bytes, (str, os.PathLike)):
            self._model_path, self._model_bytes = os.fspath(path_or_bytes), None
        elif isinstance(path_or_bytes, bytes):
            self._model_path, self._model_bytes = None, path_or_bytes
        else:  # an onnx.ModelProto, which onnxruntime does not take
            self._model_path, self._model_bytes = None, None
        self._sess_options_initial = sess_options  # the caller's object, as onnxruntime keeps it
        self._read_config_from_model = reads_config_from_model(kwargs)

    @settable_property
    def _sess_options(self) -> Any:
        return self.get_session_options()  # type: ignore[attr-defined]

    @settable_property
    def _profiling_start_time_ns(self) -> int:
        return self.get_profiling_start_time_ns()  # type: ignore[attr-defined]

    @settable_property
    def _input_epdevices(self) -> list[Any]:
        return self.get_input_epdevices()  # type: ignore[attr-defined]

    if not TYPE_CHECKING:  # (hidden from mypy, which would otherwise take any attribute as present)

        def __getattr__(self, name: str) -> Any:
            """onnxruntime's private names dmlshim does not hold: an AttributeError naming the public call."""
            public = _PUBLIC_INSTEAD.get(name)
            if public is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raise AttributeError(
                f"dmlshim's InferenceSession has no {name!r} (an onnxruntime internal it does not keep); "
                f"use {public}",
                name=name,
                obj=self,
            )

    @settable_property
    def _sess(self) -> SessionCore:
        return SessionCore(self)  # type: ignore[arg-type]

    @settable_property
    def _enable_fallback(self) -> bool:
        return self._fallback_enabled

    @settable_property
    def _fallback_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    @settable_property
    def _providers(self) -> list[str]:
        return self.get_providers()  # type: ignore[attr-defined]

    @settable_property
    def _provider_options(self) -> dict[str, dict[str, str]]:
        return self.get_provider_options()  # type: ignore[attr-defined]

    @settable_property
    def _inputs_meta(self) -> list[Any]:
        return self.get_inputs()  # type: ignore[attr-defined]

    @settable_property
    def _outputs_meta(self) -> list[Any]:
        return self.get_outputs()  # type: ignore[attr-defined]

    @settable_property
    def _overridable_initializers(self) -> list[Any]:
        return self.get_overridable_initializers()  # type: ignore[attr-defined]

    @settable_property
    def _model_meta(self) -> Any:
        return self.get_modelmeta()  # type: ignore[attr-defined]

    @settable_property
    def _input_meminfos(self) -> list[Any]:
        return self.get_input_memory_infos()  # type: ignore[attr-defined]

    @settable_property
    def _output_meminfos(self) -> list[Any]:
        return self.get_output_memory_infos()  # type: ignore[attr-defined]


def unloadable_type(model: Any) -> Exception:
    """The error for a model given as a ``bytearray`` or ``memoryview``: onnxruntime's ``TypeError``
    ("Unable to load from type ..."), saying what to pass instead."""
    from ..errors import BadInputError
    from ..runtime.exceptions import with_onnxruntime_class

    kind = type(model).__name__
    error = BadInputError(
        f"cannot load a model from a {kind}: onnxruntime takes a path or bytes (Unable to load from type "
        f"'{type(model)}'); pass bytes(model)",
        value=kind,
        rule="InferenceSession takes a model path, bytes or an onnx.ModelProto",
    )
    return with_onnxruntime_class(error, TypeError)


_ROUTED = False


def route_ort_iobinding() -> None:
    """Make ``onnxruntime.IOBinding(session)`` give a dmlshim IOBinding when ``session`` is dmlshim's.

    Clients import onnxruntime's ``IOBinding`` class before any session exists (optimum creates
    ``IOBinding(session)`` on every model load), so the class itself answers: its constructor hands a
    dmlshim session to :meth:`dmlshim.InferenceSession.io_binding`; onnxruntime's own sessions are
    unaffected. Done once, when the first dmlshim session is created.
    """
    global _ROUTED
    if _ROUTED:
        return
    from ..runtime.real import OrtIOBinding

    original_new = OrtIOBinding.__new__

    def __new__(cls: type, session: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(session, OrtSessionAttributes):
            return session.io_binding()
        if original_new is object.__new__:
            return object.__new__(cls)
        return original_new(cls, session, *args, **kwargs)

    OrtIOBinding.__new__ = __new__
    _ROUTED = True
