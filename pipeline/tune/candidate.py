"""A verified config: measured by the pipeline's own stages (or failed to serve)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.statistics.capacity_figure import CapacityFigure
from pipeline.tune.adapters import CandidateRecord
from pipeline.tune.model import Prediction
from pipeline.tune.space import Config


@dataclass
class Candidate:
    config: Config
    prediction: Prediction | None      # None: a baseline outside the search space
    record_dir: Path
    duration_s: float
    measured: CandidateRecord | None = None
    error: str = ""
    over_ceiling: str = ""

    @property
    def meets(self) -> bool:
        return self.measured is not None and self.measured.passed and not self.over_ceiling

    @property
    def throughput(self) -> float:
        if self.measured is None or self.measured.throughput_rps is None:
            return 0.0
        return float(self.measured.throughput_rps)

    @property
    def capacity(self) -> CapacityFigure | None:
        return self.measured.capacity if self.measured is not None else None

    @property
    def memory_mb(self) -> float | None:
        return self.measured.rss_mb if self.measured is not None else None

    def missed(self) -> list[str]:
        if self.error:
            return [self.error]
        found = list(self.measured.failed) if self.measured else []
        if self.over_ceiling:
            found.append(self.over_ceiling)
        if not found and self.measured is not None and not self.measured.passed:
            found.append(self.measured.message)
        return found
