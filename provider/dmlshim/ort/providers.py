"""The ``providers`` and ``provider_options`` arguments of ``InferenceSession``, read as onnxruntime reads
them: ``DmlExecutionProvider`` emulated, every other provider meaning what it means to the onnxruntime
installed here (registered when available, dropped with onnxruntime's warning when not)."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadInputError, DmlShimError
from ..runtime.exceptions import with_onnxruntime_class

logger = logging.getLogger(__name__)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_caller(message: str) -> None:
    """A ``UserWarning`` attributed to the program's line that called dmlshim (the first frame outside
    the dmlshim package), not to dmlshim's own code."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, UserWarning, stacklevel=level)


DML_EP = "DmlExecutionProvider"
"""onnxruntime's DirectML provider; in dmlshim, gather/scatter nodes emulated as DirectML runs them."""
CPU_EP = "CPUExecutionProvider"
"""onnxruntime's CPU provider; every node dmlshim does not emulate runs there."""
DML_EP_ALIASES = ("DmlShimExecutionProvider",)
"""Names earlier dmlshim versions reported for the emulated provider; read as ``DmlExecutionProvider``."""
SUPPORTED = (DML_EP, CPU_EP)
"""The providers that decide how dmlshim runs a model; any other provider onnxruntime has here is kept."""

_RULE = "providers are names or (name, options) tuples, as onnxruntime takes them"


@dataclass(frozen=True)
class ProviderChoice:
    """The providers a session was asked for, normalised as onnxruntime does.

    Attributes:
        names: provider names in order of precedence, duplicates dropped, ``CPUExecutionProvider`` last.
        options: the options of each provider (string keys and values), in the same order.
        explicit: whether the caller named providers (False when ``providers`` was None).
    """

    names: tuple[str, ...]
    options: tuple[dict[str, str], ...]
    explicit: bool
    unknown: tuple[str, ...] = ()
    """Names asked for that onnxruntime does not know at all (not in ``get_all_providers()``), dropped."""

    @property
    def emulates_dml(self) -> bool:
        """Whether gather/scatter nodes are emulated (``DmlExecutionProvider`` asked for, or no choice)."""
        return DML_EP in self.names

    def as_dict(self) -> dict[str, dict[str, str]]:
        """``get_provider_options()``: provider name -> its options."""
        return {n: dict(o) for n, o in zip(self.names, self.options, strict=True)}


def normalize_providers(providers: Any, provider_options: Any = None) -> ProviderChoice:
    """Check ``providers``/``provider_options`` as onnxruntime does and keep the supported providers.

    ``providers`` holds names or ``(name, options)`` tuples; ``provider_options`` (names only then) is a
    list of option dicts of the same length. None means every available provider: the emulated DirectML
    provider, then the CPU provider. ``CPUExecutionProvider`` is appended when missing, as onnxruntime
    always registers it.

    Any other provider is read as onnxruntime reads it on this machine: one that onnxruntime lists as
    available (e.g. ``AzureExecutionProvider``) is registered and reported; one it does not have (CUDA on a
    machine without it, a misspelt name) is dropped with a warning, as onnxruntime falls back to the CPU.

    Raises:
        BadInputError: a malformed argument (as onnxruntime's ``ValueError``).
    """
    if providers is None:  # onnxruntime then ignores provider_options: its default providers
        return ProviderChoice((DML_EP, CPU_EP), ({}, {}), explicit=False)
    pairs = _provider_pairs(providers, provider_options)
    names: list[str] = []
    options: list[dict[str, str]] = []
    dropped: list[str] = []
    available = set(available_providers())
    for name, opts in pairs:
        canonical = DML_EP if name in DML_EP_ALIASES else name
        if canonical not in SUPPORTED and canonical not in available:
            warn_caller(
                f"provider {name!r} is not available to onnxruntime on this machine (available: "
                f"{', '.join(available_providers())}); dmlshim runs without it, as onnxruntime does"
            )
            dropped.append(canonical)
            continue
        if canonical in names:
            warn_caller(f"Duplicate provider '{name}' encountered, ignoring.")  # onnxruntime's warning
            continue
        names.append(canonical)
        options.append({str(k): str(v) for k, v in opts.items()})
    unknown = tuple(d for d in dropped if d not in _all_providers())
    if not names and dropped:  # nothing usable asked for: onnxruntime falls back to its CPU provider
        return ProviderChoice((CPU_EP,), ({},), explicit=True, unknown=unknown)
    if not names:  # onnxruntime treats an empty list as "the default providers"
        return ProviderChoice((DML_EP, CPU_EP), ({}, {}), explicit=False)
    if CPU_EP not in names:
        names.append(CPU_EP)
        options.append({})
    return ProviderChoice(tuple(names), tuple(options), explicit=True, unknown=unknown)


def _malformed(theirs: str, ours: str, value: Any = None) -> BadInputError:
    """A malformed ``providers``/``provider_options``: onnxruntime's Python layer raises ``ValueError``
    with ``theirs`` (its words); dmlshim adds ``ours``."""
    error = BadInputError(f"{theirs} (dmlshim: {ours})", value=value, rule=_RULE)
    return with_onnxruntime_class(error, ValueError)


def _provider_pairs(providers: Any, provider_options: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """``(name, options)`` for each provider, checked in onnxruntime's order and with its rules: any
    sequence (bytes included, whose items are no names), names with ``provider_options`` (a sequence of
    ``dict``s of the same length), else names or ``(name, dict)`` pairs.

    Raises:
        BadInputError: as onnxruntime's ``ValueError``, with its words first.
    """
    # onnxruntime reads each character of a string as a provider name: none is one
    if isinstance(providers, str) and providers:
        error = BadInputError(
            f"Unknown Provider Type: {providers[:1]} (dmlshim: providers must be a list of provider names, "
            f"not the string {providers!r}; write [{providers!r}])",
            value=providers,
            rule=_RULE,
        )
        raise with_onnxruntime_class(error, RuntimeError)
    if not isinstance(providers, Sequence):
        raise _malformed(
            "'providers' should be a sequence.",
            f"providers must be a list of provider names or (name, options) tuples, not "
            f"{type(providers).__name__} (e.g. providers=['{DML_EP}', '{CPU_EP}'])",
            providers,
        )
    if provider_options is not None:
        if not isinstance(provider_options, Sequence):
            raise _malformed(
                "'provider_options' should be a sequence.", "provider_options must be a list of dicts"
            )
        if len(providers) != len(provider_options):
            raise _malformed(
                "'providers' and 'provider_options' should be the same length if both are given.",
                f"providers has {len(providers)} entries but provider_options {len(provider_options)}; "
                "give one options dict per provider",
                len(provider_options),
            )
        if not all(isinstance(p, str) for p in providers):
            raise _malformed(
                "Only string values for 'providers' are supported if 'provider_options' is given.",
                "with provider_options, providers must be names only (not (name, options) tuples)",
            )
        if not all(isinstance(o, dict) for o in provider_options):
            raise _malformed(
                "'provider_options' values must be dicts.", "provider_options must hold one dict per provider"
            )
        return list(zip(providers, provider_options, strict=True))
    pairs: list[tuple[str, Mapping[str, Any]]] = []
    for p in providers:
        if isinstance(p, str):
            pairs.append((p, {}))
        elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
            pairs.append(p)
        else:
            raise _malformed(
                "'providers' values must be either strings or (string, dict) tuples.",
                f"each provider must be a name or a (name, options dict) tuple, not {p!r}",
                p,
            )
    return pairs


def warn_options_providers(sess_options: Any, providers: Any, provider_options: Any) -> None:
    """onnxruntime's warning when the caller names providers and its ``SessionOptions`` chose some too
    (``add_provider_for_devices``, a selection policy): the named ones are used."""
    if sess_options is None or not (providers or provider_options):
        return
    has = getattr(sess_options, "has_providers", None)  # onnxruntime 1.22+
    if has is not None and has():
        warn_caller(
            "Specified 'providers'/'provider_options' when creating InferenceSession but SessionOptions has "
            "already been configured with providers. InferenceSession will only use the providers passed "
            "to InferenceSession()."
        )


def _all_providers() -> frozenset[str]:
    """Every provider name onnxruntime knows (built here or not)."""
    from ..runtime.real import C

    return frozenset(C.get_all_providers())


def available_providers() -> list[str]:
    """What ``dmlshim.get_available_providers()`` reports: the emulated DirectML provider, then what the
    onnxruntime installed here lists (e.g. ``AzureExecutionProvider``, ``CPUExecutionProvider``)."""
    from ..runtime.real import ort_available_providers

    found = [DML_EP]
    found.extend(p for p in ort_available_providers() if p not in found)
    if CPU_EP not in found:
        found.append(CPU_EP)
    return found


def unknown_provider_error(name: str, kept: ProviderChoice | None) -> DmlShimError:
    """What onnxruntime raises for a provider it does not know at all (``set_providers``, or the
    constructor without its fallback): its ``RuntimeError`` ("Unknown Provider Type"), saying the session
    keeps ``kept`` (``set_providers``)."""
    keeps = f"; the session keeps {list(kept.names)}" if kept is not None else ""
    error = DmlShimError(
        f"Unknown Provider Type: {name} (available here: {', '.join(available_providers())}){keeps}",
        value=name,
        rule="set_providers takes provider names onnxruntime knows",
    )
    return with_onnxruntime_class(error, RuntimeError)


def providers_or_fallback(
    providers: Any, provider_options: Any, enable_fallback: bool
) -> tuple[ProviderChoice, bool]:
    """:func:`normalize_providers`, or, as onnxruntime's constructor with ``enable_fallback`` does when the
    providers are malformed (a bare string, a 1-tuple, options of another length, ...), onnxruntime's
    fallback ``["CPUExecutionProvider"]`` (with DirectML first when ``$DMLSHIM_ORT_EMULATE`` is ``all``),
    with a warning saying so. The flag says whether it fell back (onnxruntime then turns its fallback off).

    A provider onnxruntime does not know at all (``"Bogus"``) is its ``RuntimeError`` ("Unknown Provider
    Type"), and falls back likewise.

    Raises:
        BadInputError: malformed providers and ``enable_fallback`` false (onnxruntime's ``ValueError``).
        DmlShimError: an unknown provider and ``enable_fallback`` false (onnxruntime's ``RuntimeError``).
    """
    from .emulate import emulate_all

    try:
        choice = normalize_providers(providers, provider_options)
        if choice.unknown:  # onnxruntime's session refuses a name it never heard of: its fallback then
            raise unknown_provider_error(choice.unknown[0], None)
        return choice, False
    except DmlShimError as exc:
        if not enable_fallback:
            raise
        fallback = [DML_EP, CPU_EP] if emulate_all() else [CPU_EP]
        warn_caller(
            f"EP Error {exc.message} when using {providers!r}; falling back to {fallback}, as "
            "onnxruntime does"
        )
        return normalize_providers(fallback), True
