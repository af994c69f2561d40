from __future__ import annotations

import pytest
from pydantic_core import PydanticCustomError

from pipeline.spec.units import Duration, parse_duration, parse_percentage, parse_rate


@pytest.mark.parametrize(("text", "ns"), [
    ("500us", 500_000), ("2ms", 2_000_000), ("1.5s", 1_500_000_000), ("0.5ms", 500_000),
    ("250ns", 250), ("1min", 60_000_000_000), ("3 ms", 3_000_000), ("100µs", 100_000),
])
def test_durations_parse_exactly(text: str, ns: int) -> None:
    assert parse_duration(text).ns == ns


@pytest.mark.parametrize("value", [2, 2.0, 1000])
def test_bare_number_durations_are_refused_with_the_reason(value: float) -> None:
    with pytest.raises(PydanticCustomError) as caught:
        parse_duration(value)
    message = str(caught.value)
    assert "unit" in message and "microseconds" in message and "milliseconds" in message


@pytest.mark.parametrize("value", ["2", "2 hours", "ms", "-1ms", "", True, None, [1]])
def test_malformed_durations_are_refused(value: object) -> None:
    with pytest.raises(PydanticCustomError):
        parse_duration(value)


def test_duration_exact_conversion() -> None:
    assert parse_duration("2ms").exact_in("us") == 2000
    assert parse_duration("2ms").exact_in("ms") == 2
    assert parse_duration("1500us").exact_in("ms") is None
    assert parse_duration("1.5us").exact_in("us") is None


def test_duration_arithmetic_and_text() -> None:
    total = parse_duration("50ms") - parse_duration("15ms")
    assert total == Duration(35_000_000, "35ms")
    assert str(total) == "35ms"


def test_rates_and_percentages() -> None:
    assert parse_rate("200/s").per_second == 200
    assert parse_rate("12000/min").per_second == 200
    assert parse_percentage("0.1%").fraction == pytest.approx(0.001)
    with pytest.raises(PydanticCustomError):
        parse_rate(200)
    with pytest.raises(PydanticCustomError):
        parse_percentage(0.1)
    with pytest.raises(PydanticCustomError):
        parse_percentage("150%")
