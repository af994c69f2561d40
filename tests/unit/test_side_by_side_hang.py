"""Side by side, a server that answers nothing for a whole window is stopped on at once,
not waited out round after round until the cap. The windows come from fake load workers
(the sender's `Shards`): no server runs here. On real servers a hang is a SIGSTOP
(tests/reliability/test_server_crashes.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from pipeline.measure.load_result import LoadResult
from pipeline.measure.sender import LoadSender, Shards
from pipeline.measure.supervise import Tick, no_tick
from pipeline.measure.wire.transport import Target
from pipeline.regression.canary import hung_canary
from pipeline.regression.paired import PairedSettings, Schedule
from pipeline.regression.side_by_side import (
    CANDIDATE,
    LIVE,
    ServerHung,
    SideBySideLoad,
    measure_side_by_side,
)
from pipeline.servers.base import ModelServer
from tests.support.closed_only_workers import ClosedWindowsOnly

SERVING, HUNG, ERRING = (cast(Target, object()) for _ in range(3))
SETTINGS = PairedSettings(("p50_ms",), 0.1, 0.001, 0.95, Schedule(4, 4, 8))


class Alive:
    def alive(self) -> bool:
        return True


class Workers(ClosedWindowsOnly):
    """Each window at once: a server at `SERVING` answers in 2 ms, one at `ERRING` fails
    fast (HTTP 500), one at `HUNG` answers nothing after its first `serves` windows."""

    refusal = "side by side sends closed-loop windows only"

    def __init__(self, serves: int = 0) -> None:
        self.hung_windows = 0
        self.serves = serves

    def closed_window(self, workers: int, stage: str, target: Target, concurrency: int,
                      duration_s: float, timeout_s: float, label: str,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = no_tick) -> LoadResult:
        result = LoadResult(duration_s)
        hangs = target is HUNG and self.hung_windows >= self.serves
        if target is HUNG:
            self.hung_windows += 1
        for index in range(concurrency if hangs else 100):
            if hangs:
                result.record(int(timeout_s * 1e6), timeout_s, "timeout")
            else:
                result.record(2_000, index * duration_s / 100,
                              "http_500" if target is ERRING else None)
        return result


def measure(workers: Workers, candidate: Target, live: Target) -> None:
    sender = LoadSender(10.0, lambda *args: None, Shards(workers, 1, "regression"))
    servers = {CANDIDATE: cast(ModelServer, Alive()), LIVE: cast(ModelServer, Alive())}
    measure_side_by_side(SideBySideLoad(sender, 8, 1.0, 0.25), servers,
                         {CANDIDATE: candidate, LIVE: live}, SETTINGS, lambda text: None)


def test_a_server_hung_from_the_start_is_named_in_its_warm_up() -> None:
    with pytest.raises(ServerHung) as stopped:
        measure(Workers(), HUNG, SERVING)
    assert stopped.value.who == CANDIDATE
    assert (stopped.value.rounds, stopped.value.requests) == (0, {CANDIDATE: 8, LIVE: 0})
    assert str(stopped.value) == (
        "candidate: answered none of its 8 requests in a window (its warm-up) at "
        "concurrency 8 (each waited the request timeout, 10s)")


def test_a_server_that_hangs_later_stops_the_rounds_at_that_window() -> None:
    workers = Workers(serves=3)              # the warm-up and two rounds' windows
    with pytest.raises(ServerHung) as stopped:
        measure(workers, SERVING, HUNG)
    assert stopped.value.who == LIVE and "warm-up" not in str(stopped.value)
    assert workers.hung_windows == 4         # not one window more
    # Its warm-up and rounds 0 and 1 served; in round 2, after the candidate's window, it hung.
    assert stopped.value.rounds == 2
    assert stopped.value.requests == {CANDIDATE: 300, LIVE: 208}


def test_fast_errors_are_answers_for_the_verdict_to_weigh() -> None:
    measure(Workers(), ERRING, SERVING)       # no ServerHung: all 8 rounds measured


def test_judge_fails_a_hung_canary_and_names_the_hang() -> None:
    # In its warm-up or in a round, the reason reads the same way.
    hung = ServerHung(CANDIDATE, "answered none of its 8 requests in a window", 3,
                      {CANDIDATE: 308, LIVE: 300})
    judgement = hung_canary(hung, 0.2, 0.95)
    assert (judgement.outcome, judgement.exit_code) == ("fail", 1)
    body = judgement.to_json()
    assert body["reason"] == "the canary hangs: it answered none of its 8 requests in a window"
    assert body["regression"] == "inconclusive" and body["rounds"] == 3
    assert body["requests"] == {"canary": 308, "stable": 300} and body["metrics"] == {}
