"""latency.longest_stall: a server that stops answering fails, however few requests the
closed loop had in flight; a healthy timeline, or one of fast errors, does not."""

from __future__ import annotations

from pipeline.gates.stall import stall_gate
from pipeline.measure.load_result import LoadResult
from pipeline.spec.models import SloSpec


def slo(p99: str) -> SloSpec:
    return SloSpec.model_validate({"p99": p99})


def window(answers: list[float], duration_s: float, error: str | None = None) -> LoadResult:
    result = LoadResult(duration_s)
    for at in answers:
        result.record(1000, at, error)
    return result


def steady(start: float, end: float, every: float = 0.001) -> list[float]:
    count = int((end - start) / every)
    return [start + i * every for i in range(count)]


def test_a_15s_freeze_fails_on_its_threshold_and_says_where() -> None:
    frozen = window(steady(0.0, 2.0) + steady(17.0, 20.0), 20.0)
    for stalled in range(8):                      # the requests in flight time out
        frozen.record(10_000_000, 12.0 + stalled * 1e-3, "timeout")
    gate = stall_gate([window(steady(0.0, 3.0), 3.0), frozen], slo("50ms"))
    assert gate is not None and not gate.passed
    assert gate.threshold == 2.0 and abs(float(gate.observed or 0) - 15.0) < 0.01
    assert gate.reason.startswith("no request was answered for 15.0s (window 2, from 2.0s)")


def test_just_over_and_under_the_threshold() -> None:
    assert slo("500ms").max_stall_s() == 10.0      # 20 x 500 ms
    over = window([0.0, 10.01, 10.02], 10.02)
    under = window([0.0, 9.99, 10.0], 10.0)
    assert not stall_gate([over], slo("500ms")).passed      # type: ignore[union-attr]
    assert stall_gate([under], slo("500ms")).passed         # type: ignore[union-attr]


def test_fast_errors_are_answers() -> None:
    failing = window(steady(0.0, 3.0), 3.0, error="http_500")
    gate = stall_gate([failing], slo("50ms"))
    assert gate is not None and gate.passed


def test_nothing_answered_in_a_window_is_a_stall_of_all_of_it() -> None:
    silent = window([10.0, 10.0], 10.5, error="timeout")
    gate = stall_gate([silent], slo("50ms"))
    assert gate is not None and not gate.passed and gate.observed == 10.5


def test_windows_without_a_timeline_give_no_gate() -> None:
    remote = LoadResult(3.0, completed=5000)      # merged from load workers: counts only
    assert stall_gate([remote], slo("50ms")) is None


def test_merged_windows_keep_the_answers_in_time() -> None:
    merged = window(steady(0.0, 1.0), 1.0)
    merged.merge(window(steady(0.0, 1.0), 1.0))
    assert len(merged.answered_s) == merged.answered == 2000
    gate = stall_gate([merged], slo("50ms"))
    assert gate is not None and gate.passed and float(gate.observed or 0) < 0.01
