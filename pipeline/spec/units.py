"""Quantities that must carry a unit: durations, rates and percentages.

Triton counts queue delay in microseconds and TorchServe in milliseconds, so a
bare number in the spec is refused rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError

_NS_PER_UNIT = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
                "m": 60_000_000_000, "min": 60_000_000_000}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s|min|m)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|min)\s*$")
_PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")

DURATION_PATTERN = r"^\s*\d+(\.\d+)?\s*(ns|us|µs|ms|s|min|m)\s*$"
RATE_PATTERN = r"^\s*\d+(\.\d+)?\s*/\s*(s|sec|min)\s*$"
PERCENT_PATTERN = r"^\s*\d+(\.\d+)?\s*%\s*$"
_BYTES_PER_UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB)\s*$")
SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*(B|KiB|MiB|GiB)\s*$"


@dataclass(frozen=True, order=True)
class Duration:
    """An exact duration in nanoseconds, with the text the user wrote."""

    ns: int
    text: str = ""

    @property
    def seconds(self) -> float:
        return self.ns / 1e9

    @property
    def ms(self) -> float:
        return self.ns / 1e6

    @property
    def us(self) -> float:
        return self.ns / 1e3

    def exact_in(self, unit: str) -> int | None:
        """The duration as a whole number of `unit`, or None if it is not whole."""
        per = _NS_PER_UNIT[unit]
        return self.ns // per if self.ns % per == 0 else None

    def __add__(self, other: Duration) -> Duration:
        return Duration(self.ns + other.ns, format_duration_ns(self.ns + other.ns))

    def __sub__(self, other: Duration) -> Duration:
        return Duration(self.ns - other.ns, format_duration_ns(self.ns - other.ns))

    def __str__(self) -> str:
        return self.text or format_duration_ns(self.ns)


def format_duration_ns(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    for unit in ("s", "ms", "us"):
        if ns % _NS_PER_UNIT[unit] == 0 and ns >= _NS_PER_UNIT[unit]:
            return f"{sign}{ns // _NS_PER_UNIT[unit]}{unit}"
    if ns >= 1_000_000:
        return f"{sign}{ns / 1e6:g}ms"
    if ns >= 1_000:
        return f"{sign}{ns / 1e3:g}us"
    return f"{sign}{ns}ns"


def _bare_number_error(kind: str, value: Any, example: str, why: str) -> PydanticCustomError:
    return PydanticCustomError(
        "unit_required",
        "expected a {kind} with a unit (e.g. {example}), got the bare number {value}: {why}",
        {"kind": kind, "example": example, "value": value, "why": why},
    )


def _match_quantity(value: Any, pattern: re.Pattern[str], kind: str, expected: str,
                    example: str, why: str) -> re.Match[str]:
    """The regex match of a quantity written with its unit; a bare number or any other
    text is refused with `kind`'s own error."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise _bare_number_error(kind, value, example, why)
    match = pattern.match(value) if isinstance(value, str) else None
    if match is None:
        raise PydanticCustomError(kind, expected + ", got {value}", {"value": repr(value)})
    return match


def parse_duration(value: Any) -> Duration:
    if isinstance(value, Duration):
        return value
    match = _match_quantity(
        value, _DURATION_RE, "duration", "expected a duration such as 500us, 2ms or 1.5s",
        "2ms or 500us", "Triton counts queue delay in microseconds and TorchServe in "
        "milliseconds, so a number without a unit is ambiguous")
    number, unit = match.groups()
    try:
        ns = Decimal(number) * _NS_PER_UNIT[unit]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise PydanticCustomError("duration", "not a number: {value}",
                                  {"value": repr(value)}) from exc
    if ns != ns.to_integral_value():
        raise PydanticCustomError(
            "duration", "{value} is finer than a nanosecond", {"value": repr(value)})
    return Duration(int(ns), value.strip())


@dataclass(frozen=True)
class Rate:
    """Requests per second."""

    per_second: float
    text: str = ""

    def __str__(self) -> str:
        return self.text or f"{self.per_second:g}/s"


def parse_rate(value: Any) -> Rate:
    if isinstance(value, Rate):
        return value
    match = _match_quantity(value, _RATE_RE, "rate", "expected a rate such as 200/s or 12000/min",
                            "200/s", "write the time unit, like 200/s or 12000/min")
    number, unit = match.groups()
    per_second = float(number) / (60.0 if unit == "min" else 1.0)
    return Rate(per_second, str(value).strip())


@dataclass(frozen=True)
class Percentage:
    """A fraction written as a percentage ("0.1%" is 0.001)."""

    fraction: float
    text: str = ""

    def __str__(self) -> str:
        return self.text or f"{self.fraction * 100:g}%"


def parse_percentage(value: Any) -> Percentage:
    if isinstance(value, Percentage):
        return value
    match = _match_quantity(value, _PERCENT_RE, "percentage",
                            "expected a percentage such as 0.1%", "0.1%",
                            "0.1 could mean 0.1% or 10%; write the percent sign")
    fraction = float(match.group(1)) / 100.0
    if fraction > 1.0:
        raise PydanticCustomError("percentage", "{value} is over 100%", {"value": repr(value)})
    return Percentage(fraction, str(value).strip())


_AS_TEXT = PlainSerializer(str, return_type=str)


def _text_schema(pattern: str, description: str) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "pattern": pattern, "description": description})


DurationField = Annotated[Duration, BeforeValidator(parse_duration), _AS_TEXT, _text_schema(
    DURATION_PATTERN, "A duration with a unit: ns, us, ms, s, min (e.g. 2ms).")]
RateField = Annotated[Rate, BeforeValidator(parse_rate), _AS_TEXT, _text_schema(
    RATE_PATTERN, "Requests per time unit (e.g. 200/s, 12000/min).")]
PercentageField = Annotated[Percentage, BeforeValidator(parse_percentage), _AS_TEXT, _text_schema(
    PERCENT_PATTERN, "A percentage with its sign (e.g. 0.1%).")]


@dataclass(frozen=True)
class ByteSize:
    """An amount of memory in bytes, with the text the user wrote."""

    bytes: int
    text: str = ""

    @property
    def mib(self) -> float:
        return self.bytes / 2**20

    def __str__(self) -> str:
        return self.text or f"{self.mib:g}MiB"


def parse_size(value: Any) -> ByteSize:
    if isinstance(value, ByteSize):
        return value
    match = _match_quantity(
        value, _SIZE_RE, "size", "expected a size such as 512KiB, 64MiB or 1GiB", "64MiB",
        "write the unit (B, KiB, MiB or GiB): 64 could be bytes or MiB")
    number, unit = match.groups()
    size = Decimal(number) * _BYTES_PER_UNIT[unit]
    if size != size.to_integral_value():
        raise PydanticCustomError("size", "{value} is finer than a byte", {"value": repr(value)})
    return ByteSize(int(size), str(value).strip())


SizeField = Annotated[ByteSize, BeforeValidator(parse_size), _AS_TEXT, _text_schema(
    SIZE_PATTERN, "A size with a binary unit: B, KiB, MiB, GiB (e.g. 64MiB).")]


@dataclass(frozen=True)
class Speed:
    """How much faster than logged a replay runs ("2x": the log's gaps halved)."""

    factor: float
    text: str = ""

    def __str__(self) -> str:
        return self.text or f"{self.factor:g}x"


SPEED_PATTERN = r"^\s*\d+(\.\d+)?\s*x\s*$"
_SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


def parse_speed(value: Any) -> Speed:
    """"2x", "0.5x" or a bare positive number."""
    if isinstance(value, Speed):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        factor, text = float(value), f"{value:g}x"
    else:
        match = _SPEED_RE.match(value) if isinstance(value, str) else None
        if match is None:
            raise PydanticCustomError("speed", "expected a speed such as 1.0x or 2x, got "
                                      "{value}", {"value": repr(value)})
        factor, text = float(match.group(1)), str(value).strip()
    if not 0.001 <= factor <= 1000:
        raise PydanticCustomError("speed", "{value}: a speed must be in 0.001x..1000x",
                                  {"value": repr(value)})
    return Speed(factor, text)


SpeedField = Annotated[Speed, BeforeValidator(parse_speed), _AS_TEXT, _text_schema(
    SPEED_PATTERN, "How much faster than logged (e.g. 1.0x, 2x).")]
