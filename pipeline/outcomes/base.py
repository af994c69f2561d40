"""What every stage outcome shares: fields that are metrics, JSON that is flat.

record.json keeps `stages[i].metrics` a flat mapping of name -> number, and old records
must still load, so every field is optional (a record from an older version, a stage that
measured less), and a metric without a field (one named per percentile, one a later
version added) is kept in `extra` rather than dropped: an outcome read and written again
has the keys it was read with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from pipeline.stage_result import finite

Outcome = TypeVar("Outcome", bound="MetricsOutcome")


@dataclass(frozen=True, kw_only=True)
class MetricsOutcome:
    """Base of the stage outcomes: each subclass field is a metric, `float | None`."""

    extra: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, float]:
        """The metrics as stored: the measured fields in field order, then `extra`."""
        body = {item.name: value for item in fields(self) if item.name != "extra"
                if (value := getattr(self, item.name)) is not None}
        body.update((key, value) for key, value in self.extra.items() if key not in body)
        return body

    @classmethod
    def from_json(cls: type[Outcome], metrics: Mapping[str, Any]) -> Outcome:
        """A stage's stored metrics; a value that is not a finite number loads as missing."""
        names = set(cls.names())
        values: dict[str, Any] = {name: finite(metrics.get(name)) for name in names}
        values["extra"] = {str(key): number for key, value in metrics.items()
                           if key not in names if (number := finite(value)) is not None}
        return cls(**values)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The metric names this outcome has a field for, in field order."""
        return tuple(item.name for item in fields(cls) if item.name != "extra")
