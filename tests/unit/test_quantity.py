"""Kubernetes quantities and Go durations (kaisched.k8s.quantity)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lightkube.utils.quantity import parse_quantity as lightkube_parse_quantity

from kaisched.k8s.quantity import QuantityError, cpu_millis, parse_duration, parse_quantity, to_canonical


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("1.5", 1.5),
        (".5", 0.5),
        ("+2", 2.0),
        ("-1", -1.0),
        ("500m", 0.5),
        ("100m", 0.1),
        ("250u", 0.00025),
        ("3n", 3e-9),
        ("1k", 1e3),
        ("1M", 1e6),
        ("1G", 1e9),
        ("1T", 1e12),
        ("1P", 1e15),
        ("1E", 1e18),  # exa, not an exponent
        ("1Ki", 1024.0),
        ("100Mi", 100 * 2**20),
        ("16Gi", 16 * 2**30),
        ("1.5Gi", 1.5 * 2**30),
        ("1Ti", 2.0**40),
        ("1Pi", 2.0**50),
        ("1Ei", 2.0**60),
        ("1e9", 1e9),
        ("2E3", 2000.0),
        ("5e-3", 0.005),
        ("1.5e+2", 150.0),
    ],
)
def test_parse_quantity_strings(text: str, expected: float) -> None:
    assert parse_quantity(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("value", "expected"), [(3, 3.0), (2.5, 2.5), (0, 0.0), (-1, -1.0)])
def test_parse_quantity_numbers(value: int | float, expected: float) -> None:
    result = parse_quantity(value)
    assert result == expected
    assert isinstance(result, float)


@pytest.mark.parametrize(
    "bad",
    ["12Gx", "", "abc", "--1", "1 ", " 1", "Gi", "1.2.3", "1e", "1ki", "1K", "1mi", "m", "1,5", "0x10", "1e999"],
)
def test_parse_quantity_rejects_malformed_strings(bad: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", [True, False, None, float("nan"), float("inf"), [1], {"a": 1}])
def test_parse_quantity_rejects_non_quantities(bad: object) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(bad)  # type: ignore[arg-type]


# suffixes lightkube's parser reads as Kubernetes does: those of a whole number of millis (the ``m`` suffix and
# the negative exponent only on whole numbers, see _exact_for_lightkube), within its 28 significant digits
_SHARED_SUFFIXES = ["", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e0", "e3", "e+6", "m", "e-3"]


@st.composite
def _exact_for_lightkube(draw: st.DrawFn) -> str:
    suffix = draw(st.sampled_from(_SHARED_SUFFIXES))
    whole = draw(st.integers(0, 10**6))
    fractions = st.sampled_from(["", "."]) | st.from_regex(r"\.[0-9]{1,3}", fullmatch=True)
    fraction = "" if suffix in {"m", "e-3"} else draw(fractions)
    return f"{draw(st.sampled_from(['', '+', '-']))}{whole}{fraction}{suffix}"


@given(_exact_for_lightkube())
def test_agrees_with_lightkube_where_its_grammar_is_kubernetes(text: str) -> None:
    # lightkube.utils.quantity parses a different grammar (see kaisched.k8s.quantity's docstring); where the two
    # meet and it rounds nothing, its exact Decimal and this module's float are the same number
    expected = lightkube_parse_quantity(text)
    assert expected is not None
    assert parse_quantity(text) == float(expected)
    assert cpu_millis(text) == float(expected.scaleb(3))


def test_quantity_error_is_a_value_error_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match=r"'12Gx'.*suffix"):
        parse_quantity("12Gx")
    with pytest.raises(QuantityError, match="must not be empty"):
        parse_quantity("")
    with pytest.raises(QuantityError, match="got bool"):
        parse_quantity(True)


@pytest.mark.parametrize(
    ("value", "millis"),
    [("500m", 500.0), ("2", 2000.0), ("100m", 100.0), ("0.1", 100.0), ("1.5", 1500.0), (1.5, 1500.0), (4, 4000.0),
     ("1k", 1e6), ("250u", 0.25)],
)  # fmt: skip
def test_cpu_millis_is_exact(value: str | float, millis: float) -> None:
    assert cpu_millis(value) == millis


def test_cpu_millis_rejects_malformed() -> None:
    with pytest.raises(QuantityError):
        cpu_millis("2 cores")


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        ("cpu", "500m", 500.0),
        ("cpu", 2, 2000.0),
        ("memory", "1Gi", 2.0**30),
        ("memory", "500m", 0.5),
        ("nvidia.com/gpu", "2", 2.0),
        ("nvidia.com/gpu", 1, 1.0),
        ("pods", "110", 110.0),
        ("ephemeral-storage", "100G", 1e11),
    ],
)
def test_to_canonical(resource: str, value: str | int, expected: float) -> None:
    assert to_canonical(resource, value) == expected
    assert to_canonical(resource, value) == expected  # second call answered from the cache


def test_to_canonical_rejects_malformed() -> None:
    with pytest.raises(QuantityError, match="'4 cpus'"):
        to_canonical("cpu", "4 cpus")
    with pytest.raises(QuantityError):
        to_canonical("memory", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20s", timedelta(seconds=20)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("300ms", timedelta(milliseconds=300)),
        ("-1s", timedelta(seconds=-1)),
        ("+2m", timedelta(minutes=2)),
        ("0", timedelta(0)),
        ("-0", timedelta(0)),
        ("0s", timedelta(0)),
        ("1us", timedelta(microseconds=1)),
        ("1µs", timedelta(microseconds=1)),
        ("1500ns", timedelta(microseconds=1)),  # below-microsecond part truncated
        (".5s", timedelta(milliseconds=500)),
        ("1h2m3s4ms", timedelta(hours=1, minutes=2, seconds=3, milliseconds=4)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["", "1", "s", "1x", "1h-1m", "--1s", ".s", "1.5.s", " 1s", "1d", "1 s", "5M"])
def test_parse_duration_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


@pytest.mark.parametrize("bad", [None, 20, 1.5, True])
def test_parse_duration_rejects_non_strings(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)  # type: ignore[arg-type]
