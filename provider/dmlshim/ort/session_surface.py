"""The part of a dmlshim session that its IOBinding and its ``_sess`` stand-in call: onnxruntime's
``InferenceSession`` methods, as a protocol, so that those modules need not import the session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class SessionSurface(Protocol):
    """The onnxruntime ``InferenceSession`` methods that :class:`dmlshim.InferenceSession` answers."""

    @property
    def model_path(self) -> str | None: ...

    def get_session_options(self) -> Any: ...

    def get_inputs(self) -> list[Any]: ...

    def get_outputs(self) -> list[Any]: ...

    def get_overridable_initializers(self) -> list[Any]: ...

    def get_modelmeta(self) -> Any: ...

    def get_input_memory_infos(self) -> list[Any]: ...

    def get_output_memory_infos(self) -> list[Any]: ...

    def get_providers(self) -> list[str]: ...

    def get_provider_options(self) -> dict[str, dict[str, str]]: ...

    def get_profiling_start_time_ns(self) -> int: ...

    def end_profiling(self) -> str: ...

    def io_binding(self) -> Any: ...

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
    ) -> Any: ...

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None: ...

    def run_with_ort_values(
        self, input_dict_ort_values: Mapping[str, Any], output_names: Sequence[str], run_options: Any = None
    ) -> Any: ...

    def run_with_ortvaluevector(
        self,
        run_options: Any,
        feed_names: Sequence[str],
        feeds: Any,
        fetch_names: Sequence[str],
        fetches: Any,
        fetch_devices: Any,
    ) -> None: ...
