"""How a measurement window's load is sent: each request's timeout, where the window
reports its progress, and whether load workers (on Ray) send it instead of this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.measure.load_result import LoadResult
from pipeline.measure.open_loop import HardEnd, OpenLoopResult, Phase
from pipeline.measure.supervise import Tick
from pipeline.measure.wire.transport import Target

# A window's progress as it runs: seconds done, seconds in all, the window's label.
WindowProgress = Callable[[float, float, str], None]


def no_window_progress(done_s: float, total_s: float, label: str) -> None:
    """A window with nothing to show its progress to (tests, scripts)."""


class LoadWorkers(Protocol):
    """Sends one window from several workers and merges their figures; keeps per-worker
    rows under `stage` (`LoadCluster` in distributed/run.py)."""

    def closed_window(self, workers: int, stage: str, target: Target, concurrency: int,
                      duration_s: float, timeout_s: float, label: str,
                      should_stop: Callable[[], bool] = ..., tick: Tick = ...) -> LoadResult: ...

    def open_window(self, workers: int, stage: str, target: Target, phases: Sequence[Phase],
                    timeout_s: float, label: str, max_in_flight: int = ...,
                    arrivals: str = ..., seed: int = ..., should_stop: Callable[[], bool] = ...,
                    tick: Tick = ..., hard_end: HardEnd | None = ...,
                    starve_s: dict[int, float] | None = ...,
                    plan: list[tuple[float, str]] | None = ...) -> OpenLoopResult: ...


@dataclass(frozen=True)
class Shards:
    """The load workers that send a window: `workers` of `cluster`, their rows kept under
    `row`."""

    cluster: LoadWorkers
    workers: int
    row: str


@dataclass(frozen=True)
class LoadSender:
    """Who sends a window's load and what it tells on the way. `timeout_s` is each
    request's, unless a window sets its own; without `shards`, this process sends."""

    timeout_s: float
    progress: WindowProgress = no_window_progress
    shards: Shards | None = None
