"""Candidate and live release measured with the same load plan, interleaved by rounds.

The plan is `compare`'s (pipeline/compare/plan.py): one load point (the latency stage's
concurrency), and in each round each server takes one window, the order alternating
(candidate, live, then live, candidate, ...), so drift of the machine favours neither.
Rounds are measured until the paired verdict (paired.py) is clear or its cap. Each
window's figures are kept as measured, for the record and the report, and its load result,
for gates of a server's own (the canary judge holds the canary's windows to the SLO).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline import metric_names as m
from pipeline.compare.plan import Window, interleaved, is_interleaved
from pipeline.errors import ServerError
from pipeline.measure.load_result import LoadResult
from pipeline.measure.loadgen import Target
from pipeline.measure.sender import LoadSender
from pipeline.measure.windows import closed_window
from pipeline.regression.paired import (
    PairedRound,
    PairedSettings,
    PairedVerdict,
    WindowFigures,
    run_sequential,
)
from pipeline.servers.base import ModelServer

CANDIDATE, LIVE = "candidate", "live"


class ServerDied(Exception):
    """One of the two servers died, or answered nothing for a whole window, during the
    side-by-side windows; `who` says which."""

    def __init__(self, who: str, reason: str) -> None:
        super().__init__(f"{who}: {reason}")
        self.who = who
        self.reason = reason


class ServerHung(ServerDied):
    """A server that still runs answered none of a window's requests. `rounds`: the rounds
    measured before; `requests`: each server's requests in them and in that window."""

    def __init__(self, who: str, reason: str, rounds: int, requests: dict[str, int]) -> None:
        super().__init__(who, reason)
        self.rounds = rounds
        self.requests = requests


@dataclass
class SideBySide:
    verdict: PairedVerdict
    windows: list[dict[str, Any]] = field(default_factory=list)
    measured_s: float = 0.0
    results: dict[str, list[LoadResult]] = field(default_factory=dict)   # by server

    @property
    def sequence(self) -> list[str]:
        return [str(window["server"]) for window in self.windows]

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.to_json(), "windows": self.windows,
                "interleaved": is_interleaved(self.sequence),
                "measured_s": round(self.measured_s, 3)}


def figures(result: LoadResult) -> WindowFigures:
    summary = result.summary()
    kept = len(result.latencies_us) == result.histogram.get_total_count()
    return WindowFigures(summary[m.P50_MS], summary[m.P95_MS], summary[m.P99_MS],
                         summary[m.THROUGHPUT_RPS], result.error_count,
                         result.completed + result.error_count,
                         tuple(result.latencies_us) if kept else ())


@dataclass(frozen=True)
class SideBySideLoad:
    """The load both servers get: from `sender`, at `concurrency`, in windows of `window_s`
    after a warm-up of `warmup_s` (the latency stage's)."""

    sender: LoadSender
    concurrency: int
    warmup_s: float
    window_s: float


def measure_side_by_side(load: SideBySideLoad, servers: dict[str, ModelServer],
                         targets: dict[str, Target], settings: PairedSettings,
                         announce: Callable[[str], None]) -> SideBySide:
    """`servers`: the candidate and the live release, both ready, each sent its `targets`
    request. ServerDied when one dies."""
    concurrency, window_s = load.concurrency, load.window_s
    _warm_up(load, servers, targets)
    plan = interleaved((CANDIDATE, LIVE), [concurrency], settings.schedule.max_rounds)
    windows: list[dict[str, Any]] = []
    results: dict[str, list[LoadResult]] = {who: [] for who in servers}
    total = [0.0]

    def one(window: Window) -> WindowFigures:
        announce(f"round {window.round + 1}: {window.kind} at concurrency {concurrency}")
        try:
            result = closed_window(load.sender, servers[window.kind], targets[window.kind],
                                   concurrency, window_s,
                                   f"round {window.round + 1}: {window.kind}")
        except ServerError as exc:
            raise ServerDied(window.kind, str(exc)) from None
        _answered_some(window.kind, result, load, window.round, {
            who: sum(done.requests for done in kept) + (result.requests if who == window.kind
                                                         else 0)
            for who, kept in results.items()})
        total[0] += result.duration_s
        results[window.kind].append(result)
        measured = figures(result)
        windows.append({"round": window.round, "server": window.kind,
                        **{key: round(value, 4) if isinstance(value, float) else value
                           for key, value in measured.figures().items()}})
        return measured

    def next_round(index: int) -> PairedRound:
        got = {window.kind: one(window) for window in plan if window.round == index}
        return PairedRound(got[CANDIDATE], got[LIVE])

    verdict, _ = run_sequential(next_round, settings)
    return SideBySide(verdict, windows, total[0], results)


def _warm_up(load: SideBySideLoad, servers: dict[str, ModelServer],
             targets: dict[str, Target]) -> None:
    """The live release starts cold: it gets the latency stage's warm-up; the candidate,
    warm from the stages before, a short one so that both start from served traffic."""
    warmup = load.warmup_s
    for who, seconds in ((LIVE, warmup), (CANDIDATE, min(warmup, 1.0))):
        try:
            result = closed_window(load.sender, servers[who], targets[who], load.concurrency,
                                   seconds, f"{who}: warm-up")
        except ServerError as exc:
            raise ServerDied(who, f"during the warm-up: {exc}") from None
        _answered_some(who, result, load, 0, {name: result.requests if name == who else 0
                                             for name in servers}, " (its warm-up)")


def _answered_some(who: str, result: LoadResult, load: SideBySideLoad, rounds: int,
                   requests: dict[str, int], when: str = "") -> None:
    """ServerHung when `who` answered none of a window's requests (each waited its whole
    timeout): a server that hangs while its process and health check live would otherwise
    cost every remaining round a timeout. A fast error is an answer (the error-rate verdict
    weighs it)."""
    if result.requests and not result.answered:
        raise ServerHung(who, (
            f"answered none of its {result.requests} requests in a window{when} at "
            f"concurrency {load.concurrency} (each waited the request timeout, "
            f"{load.sender.timeout_s:g}s)"), rounds, requests)
