"""The longest stall: a span of a window in which the server answered no request (neither
with a result nor with an error; timeouts and lost connections are no answer).

A closed loop hides a server that stops answering: it has only `concurrency` requests in
flight, so a 15 s freeze costs it those few requests (timeouts, or a handful of slow
answers) among tens of thousands, and every percentile and the error rate pass. Open
traffic would have queued up behind the freeze and waited all of it. So each window's
timeline is read as time: the longest span without an answer (from the window's start to
its first answer, between two answers, from the last answer to its end) is held to a
threshold that no healthy server on a busy machine comes near, yet well under any
client's timeout: 20 times the p99 SLO, and at least 2 s (a freeze of the whole machine
by a neighbour, which the client's own wait would show, is shorter).

Windows measured by remote load workers keep no timeline: a run made only of such
windows has no stall gate (it cannot see one), as a server not ours has no memory gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from pipeline.measure.load_result import LoadResult
from pipeline.spec.models import STALL_FLOOR_S, SloSpec
from pipeline.stage_result import Gate

GATE = "latency.longest_stall"


@dataclass(frozen=True)
class Stall:
    seconds: float
    window: int          # 0-based, among the windows judged
    from_s: float        # since the window began


def longest_stall(window: LoadResult, index: int) -> Stall | None:
    """The window's longest span without an answer; None when it keeps no timeline."""
    if len(window.finished_s) != window.requests or len(window.answered_s) != window.answered:
        return None
    edges = [0.0, *sorted(window.answered_s), max(window.duration_s, 0.0)]
    length, start = max(((b - a, a) for a, b in pairwise(edges)), default=(0.0, 0.0))
    return Stall(max(length, 0.0), index, start)


def stall_gate(windows: Sequence[LoadResult], slo: SloSpec) -> Gate | None:
    stalls = [stall for index, window in enumerate(windows)
              if (stall := longest_stall(window, index)) is not None]
    if not stalls:
        return None
    worst = max(stalls, key=lambda stall: stall.seconds)
    limit = slo.max_stall_s()
    passed = worst.seconds <= limit
    reason = "" if passed else (
        f"no request was answered for {worst.seconds:.1f}s (window {worst.window + 1}, from "
        f"{worst.from_s:.1f}s): the server stopped answering while requests waited, which "
        f"open traffic would have waited out in full (threshold: 20 x slo.p99, at least "
        f"{STALL_FLOOR_S:g}s)")
    return Gate(GATE, round(worst.seconds, 3), limit, passed, "<=", "s", reason=reason)
