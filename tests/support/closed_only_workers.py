"""A base for fake load workers (the sender's `Shards`) in tests that send closed-loop
windows only: any open-loop window is a test failure that names why."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.measure.open_loop import HardEnd, OpenLoopResult, Phase
from pipeline.measure.supervise import Tick, no_tick
from pipeline.measure.wire.transport import Target


class ClosedWindowsOnly:
    refusal = "this test sends closed-loop windows only"

    def open_window(self, workers: int, stage: str, target: Target, phases: Sequence[Phase],
                    timeout_s: float, label: str, max_in_flight: int = 2048,
                    arrivals: str = "constant", seed: int = 0,
                    should_stop: Callable[[], bool] = lambda: False, tick: Tick = no_tick,
                    hard_end: HardEnd | None = None,
                    starve_s: dict[int, float] | None = None,
                    plan: list[tuple[float, str]] | None = None) -> OpenLoopResult:
        self.opened(workers, stage, timeout_s, label, max_in_flight)
        raise AssertionError(self.refusal)

    def opened(self, workers: int, stage: str, timeout_s: float, label: str,
               max_in_flight: int) -> None:
        """Called before the refusal; a subclass may note the call."""
