"""stop_alongside: a second server's shutdown overlaps what the stack held before it."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from types import TracebackType
from typing import cast

import pytest

from pipeline.servers.base import ModelServer
from pipeline.servers.stop_alongside import stop_alongside


class SlowStop:
    """Stands in for a server whose graceful stop takes `seconds` (only stop is used)."""

    def __init__(self, name: str, seconds: float, log: list[tuple[str, str, float]],
                 error: Exception | None = None) -> None:
        self.name, self.seconds, self.log, self.error = name, seconds, log, error
        self.stops = 0
        self.lock = threading.Lock()

    def stop(self) -> None:
        with self.lock:
            self.stops += 1
        self.log.append((self.name, "begin", time.monotonic()))
        time.sleep(self.seconds)
        self.log.append((self.name, "end", time.monotonic()))
        if self.error is not None:
            raise self.error

    def __enter__(self) -> SlowStop:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def test_the_two_stops_overlap_and_both_end_before_close_returns() -> None:
    log: list[tuple[str, str, float]] = []
    first, second = SlowStop("first", 0.3, log), SlowStop("second", 0.3, log)
    with ExitStack() as resources:
        resources.push(first)
        stop_alongside(resources, cast(ModelServer, second))
    assert first.stops == second.stops == 1
    at = {(name, what): moment for name, what, moment in log}
    assert set(at) == {(n, w) for n in ("first", "second") for w in ("begin", "end")}
    # Overlapping: each began before the other ended (one after the other, one would not).
    assert at["second", "begin"] < at["first", "end"]
    assert at["first", "begin"] < at["second", "end"]

def test_what_was_pushed_earlier_still_closes_in_its_own_order() -> None:
    order: list[str] = []
    log: list[tuple[str, str, float]] = []
    with ExitStack() as resources:
        resources.callback(order.append, "pushed first")
        resources.callback(order.append, "pushed second")
        stop_alongside(resources, cast(ModelServer, SlowStop("late", 0.0, log)))
    assert order == ["pushed second", "pushed first"]
    assert [what for _, what, _ in log] == ["begin", "end"]


def test_a_failing_stop_is_raised_when_the_stack_closes() -> None:
    log: list[tuple[str, str, float]] = []
    resources = ExitStack()
    resources.push(SlowStop("fine", 0.0, log))
    stop_alongside(resources, cast(ModelServer, SlowStop(
        "broken", 0.0, log, RuntimeError("kill failed"))))
    with pytest.raises(RuntimeError, match="kill failed"):
        resources.close()
    assert ("fine", "end") in {(name, what) for name, what, _ in log}
