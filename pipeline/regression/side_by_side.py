"""Candidate and live release measured with the same load plan, interleaved by rounds.

The plan is `compare`'s (pipeline/compare/plan.py): one load point (the latency stage's
concurrency), and in each round each server takes one window, the order alternating
(candidate, live, then live, candidate, ...), so drift of the machine favours neither.
Rounds are measured until the paired verdict (paired.py) is clear or its cap; where the
live release was started before the latency stage (pipeline/regression/beside.py), that
stage's windows are made of the first rounds, and the regression stage only adds what the
verdict still needs. Each
window's figures are kept as measured, for the record and the report, and its load result,
for gates of a server's own (the canary judge holds the canary's windows to the SLO).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline import metric_names as m
from pipeline.compare.plan import interleaved, is_interleaved
from pipeline.errors import ServerError
from pipeline.measure.load_result import LoadResult
from pipeline.measure.loadgen import Target
from pipeline.measure.sender import LoadSender
from pipeline.measure.windows import closed_window
from pipeline.regression.paired import (
    PairedRound,
    PairedSettings,
    PairedVerdict,
    SequentialLooks,
    WindowFigures,
)
from pipeline.servers.base import ModelServer

CANDIDATE, LIVE = "candidate", "live"
# The candidate is warm from the stages before; this much traffic after the live release's
# warm-up makes both start the rounds from served traffic.
CANDIDATE_WARMUP_S = 1.0


class ServerDied(Exception):
    """One of the two servers died during the side-by-side windows; `who` says which."""

    def __init__(self, who: str, reason: str) -> None:
        super().__init__(f"{who}: {reason}")
        self.who = who


@dataclass
class SideBySide:
    verdict: PairedVerdict
    windows: list[dict[str, Any]] = field(default_factory=list)
    measured_s: float = 0.0
    results: dict[str, list[LoadResult]] = field(default_factory=dict)   # by server
    in_latency_stage: int = 0   # rounds the latency stage's windows were made of

    @property
    def sequence(self) -> list[str]:
        return [str(window["server"]) for window in self.windows]

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.to_json(), "windows": self.windows,
                "interleaved": is_interleaved(self.sequence),
                "measured_s": round(self.measured_s, 3),
                "rounds_in_latency_stage": self.in_latency_stage}


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


class PairedRounds:
    """The candidate and the live release measured round by round, each round's two
    windows in the compare plan's order, and the sequential verdict over the rounds so
    far. The latency stage's windows may be made of its rounds (`candidate_window`); the
    regression stage measures on until the verdict is done."""

    def __init__(self, load: SideBySideLoad, servers: dict[str, ModelServer],
                 targets: dict[str, Target], settings: PairedSettings,
                 announce: Callable[[str], None]) -> None:
        self.load, self.servers, self.targets, self.announce = load, servers, targets, announce
        self.looks = SequentialLooks(settings)
        self.windows: list[dict[str, Any]] = []
        self.results: dict[str, list[LoadResult]] = {who: [] for who in servers}
        self.measured_s = 0.0
        self.in_latency_stage = 0   # rounds measured as part of the latency stage's windows

    @property
    def done(self) -> bool:
        return self.looks.done

    def warm_up(self, live_s: float, candidate_s: float) -> None:
        for who, seconds in ((LIVE, live_s), (CANDIDATE, candidate_s)):
            if seconds <= 0:
                continue
            try:
                closed_window(self.load.sender, self.servers[who], self.targets[who],
                              self.load.concurrency, seconds, f"{who}: warm-up")
            except ServerError as exc:
                raise ServerDied(who, f"during the warm-up: {exc}") from None

    def measure_round(self) -> LoadResult:
        """The next round, both windows; the candidate's load result. ServerDied when a
        server dies."""
        index = len(self.looks.rounds)
        plan = interleaved((CANDIDATE, LIVE), [self.load.concurrency], index + 1)
        got = {window.kind: self._window(index, window.kind) for window in plan
               if window.round == index}
        self.looks.add(PairedRound(figures(got[CANDIDATE]), figures(got[LIVE])))
        return got[CANDIDATE]

    def _window(self, index: int, who: str) -> LoadResult:
        concurrency = self.load.concurrency
        self.announce(f"round {index + 1}: {who} at concurrency {concurrency}")
        try:
            result = closed_window(self.load.sender, self.servers[who], self.targets[who],
                                   concurrency, self.load.window_s,
                                   f"round {index + 1}: {who}")
        except ServerError as exc:
            raise ServerDied(who, str(exc)) from None
        self.measured_s += result.duration_s
        self.results[who].append(result)
        self.windows.append({"round": index, "server": who,
                             **{key: round(value, 4) if isinstance(value, float) else value
                                for key, value in figures(result).figures().items()}})
        return result

    def finish(self) -> SideBySide:
        """Rounds until the verdict is done; the side-by-side measurement."""
        while not self.done:
            self.measure_round()
        assert self.looks.verdict is not None  # the last round is always a look
        return SideBySide(self.looks.verdict, self.windows, self.measured_s, self.results,
                          self.in_latency_stage)


def candidate_window(rounds: PairedRounds, window_s: float,
                     plain: Callable[[float], LoadResult]) -> LoadResult:
    """One of the latency stage's windows, `window_s` of the candidate's traffic: while the
    paired verdict is open, made of rounds (the candidate's window of each, merged, with
    the live release's between them), the rest as one `plain` window. ServerDied(LIVE)
    when the live release dies; the candidate's death is a ServerError, as in a plain
    window."""
    merged = LoadResult(0.0)
    pairs = max(1, round(window_s / rounds.load.window_s))
    taken = 0
    while taken < pairs and not rounds.done:
        try:
            merged.merge(rounds.measure_round())
        except ServerDied as exc:
            if exc.who == CANDIDATE:
                raise ServerError(str(exc).split(": ", 1)[-1]) from None
            raise
        rounds.in_latency_stage += 1
        taken += 1
    left = window_s - merged.duration_s
    if taken < pairs and left > 0:
        merged.merge(plain(left))
    return merged


def measure_side_by_side(load: SideBySideLoad, servers: dict[str, ModelServer],
                         targets: dict[str, Target], settings: PairedSettings,
                         announce: Callable[[str], None]) -> SideBySide:
    """`servers`: the candidate and the live release, both ready, each sent its `targets`
    request. ServerDied when one dies. The live release starts cold: it gets the latency
    stage's warm-up; the candidate, warm from the stages before, a short one so that both
    start from served traffic."""
    rounds = PairedRounds(load, servers, targets, settings, announce)
    rounds.warm_up(load.warmup_s, min(load.warmup_s, CANDIDATE_WARMUP_S))
    return rounds.finish()
