"""Kubernetes resource quantities and Go durations.

Quantities follow ``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number followed by an
optional suffix, either binary SI (``Ki Mi Gi Ti Pi Ei``), decimal SI (``n u m k M G T P E``) or a
decimal exponent (``e3``, ``E-2``). ``1E`` is one exa, ``1E3`` is one thousand. Values are computed
exactly (with :class:`~decimal.Decimal`) and only then rounded to a float, so ``"100m"`` is 100.0
millicores, not 100.00000000000001.

Why not ``lightkube.utils.quantity.parse_quantity`` (lightkube is a dependency anyway): it parses another
grammar than the API server's. It rejects the ``n`` and ``u`` suffixes, the upper-case exponent and a sign
before a bare fraction (``"250u"``, ``"2E3"``, ``"+.5"``); it accepts suffixes Kubernetes refuses (``Z``, ``Y``,
``Zi``, ``Yi``) and digits other than ASCII ones; it rounds every value up to a thousandth (``"0.0001"`` becomes
0.001: 100 micro-cores would read as 1 millicore) and fails above about 1e25. Where the grammars agree and
nothing is rounded, both give the same numbers (tests/unit/test_quantity.py checks it) at the same speed (about
1.5 µs a string, uncached); so the grammar stays here, exact, with error messages that name the value.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Final

__all__ = [
    "QuantityError",
    "cpu_millis",
    "parse_duration",
    "parse_quantity",
    "to_canonical",
]


class QuantityError(ValueError):
    """A malformed Kubernetes quantity."""


_QUANTITY_RE: Final = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?\d+)|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)

_BINARY_POWERS: Final[dict[str, int]] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_MAX_EXPONENT: Final = 300  # beyond this a float cannot hold the value anyway
_MILLI: Final = 3  # decimal exponent from cores to millicores
CPU_RESOURCE: Final = "cpu"
_CACHE_SIZE: Final = 16384
_CPU_CACHE: Final[dict[str, float]] = {}  # quantity string -> millicores
_BASE_CACHE: Final[dict[str, float]] = {}  # quantity string -> base units


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity in base units: ``"16Gi"`` -> 17179869184.0, ``"500m"`` -> 0.5."""
    return _scaled(value, 0)


def cpu_millis(value: str | int | float) -> float:
    """A CPU quantity in millicores: ``"500m"`` -> 500.0, ``"2"`` -> 2000.0, ``1.5`` -> 1500.0."""
    return _scaled(value, _MILLI)


def to_canonical(resource_name: str, value: str | int | float) -> float:
    """A resource amount in the units used everywhere inside kaisched.

    ``cpu`` becomes millicores; everything else (memory, storage, GPUs, pods, extended resources) is
    in base units (bytes or counts).
    """
    if type(value) is str:  # fast path: the same few strings repeat across thousands of pods
        cache = _CPU_CACHE if resource_name == CPU_RESOURCE else _BASE_CACHE
        amount = cache.get(value)
        if amount is None:
            amount = _scaled(value, _MILLI if resource_name == CPU_RESOURCE else 0)
            if len(cache) < _CACHE_SIZE:
                cache[value] = amount
        return amount
    return _scaled(value, _MILLI if resource_name == CPU_RESOURCE else 0)


def _scaled(value: object, exponent10: int) -> float:
    """``value`` times ``10**exponent10``, as a float; raises :class:`QuantityError`."""
    if isinstance(value, str):
        return _parse_string(value, exponent10)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuantityError(
            f"invalid quantity {value!r}: expected a string like '500m' or '16Gi' or a number, "
            f"got {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"invalid quantity {value!r}: must be a finite number")
    if exponent10 == 0:
        return float(value)
    return float(Decimal(repr(value)).scaleb(exponent10))


@lru_cache(maxsize=_CACHE_SIZE)
def _parse_string(text: str, exponent10: int) -> float:
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(_malformed_message(text))
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex only lets valid decimals through
        raise QuantityError(_malformed_message(text)) from exc
    binary, exponent, decimal = match["binary"], match["exponent"], match["decimal"]
    if binary is not None:
        number *= 1 << _BINARY_POWERS[binary]
    elif exponent is not None:
        if abs(int(exponent)) > _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {text!r}: exponent out of range")
        exponent10 += int(exponent)
    elif decimal is not None:
        exponent10 += _DECIMAL_EXPONENTS[decimal]
    result = float(number.scaleb(exponent10))
    if not math.isfinite(result):
        raise QuantityError(f"invalid quantity {text!r}: value out of range")
    return result


def _malformed_message(text: str) -> str:
    if not text:
        return "invalid quantity '': must not be empty"
    return (
        f"invalid quantity {text!r}: expected a number with an optional suffix "
        "(Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)"
    )


# ------------------------------------------------------------------------------------------ durations

_DURATION_UNITS_NS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_COMPONENT: Final = r"(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h)"
_DURATION_RE: Final = re.compile(rf"[+-]?(?:0|(?:{_DURATION_COMPONENT})+)", re.ASCII)
_DURATION_COMPONENT_RE: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)", re.ASCII)
_NS_PER_US: Final = 1_000


def parse_duration(text: str) -> timedelta:
    """A Go duration (``"20s"``, ``"1h30m"``, ``"1.5h"``, ``"300ms"``, ``"-1s"``) as a timedelta.

    Sub-microsecond parts are truncated (timedelta has microsecond resolution). Raises
    :class:`ValueError` for anything Go's ``time.ParseDuration`` would reject.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: expected a string like '20s' or '1h30m'")
    if _DURATION_RE.fullmatch(text) is None:
        raise ValueError(
            f"invalid duration {text!r}: expected a Go duration like '20s', '5m', '1h30m' or '300ms' "
            "(units ns, us, ms, s, m, h)"
        )
    negative = text.startswith("-")
    total_ns = Decimal(0)
    for number, unit in _DURATION_COMPONENT_RE.findall(text):
        total_ns += Decimal(number) * _DURATION_UNITS_NS[unit]
    micros = int(total_ns) // _NS_PER_US
    return timedelta(microseconds=-micros if negative else micros)
