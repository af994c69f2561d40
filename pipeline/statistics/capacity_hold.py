"""A capacity hold's verdict from its blocks: the p99 by sectioning, a backlog by its trend.

Requests under queueing are not independent: one that waited behind a slow batch has
neighbours that waited too, so an order-statistics bound that counts every request as an
independent draw is far too narrow near capacity (simulated: a 3 s hold judged that way
passed 12% of the time at 7% over the capacity). A hold is therefore cut into equal blocks
in time, and the block is the unit of evidence:

- The first block is a warm-up: the hold starts from an idle server, and its queue needs
  a while to reach its steady state. It is measured and shown, not judged: neither its
  p99 nor its errors (a hold's error rate is its later blocks', and its errors do not
  stop it early). A TorchServe hold right after a failed one was seen to time out its
  first second's requests and stop on them, at a rate a step had passed minutes before.
- The p99 is the pooled p99 of the judged blocks; its interval is sectioning's (the spread
  of the per-block p99s, Student's t with blocks - 1 degrees of freedom). That assumes
  blocks far apart in time are close to independent, not that requests are.
- A block whose p99 is over the SLO, while the interval is within it, is an episode (a
  busy neighbour, a pause) that the hold is too short to weigh: no pass on it; the hold
  measures on, and ends undecided unless the episodes can be weighed. They can at a rate
  under half the closed-loop knee's throughput (`EPISODES_WEIGHED_UNDER`), where a server
  slowed to half its speed still keeps up, so an episode there is a stall of the machine,
  not a queue the rate built: a longer hold may pass with one such block in each three
  segments' worth (`episodes_weighed`). Nearer the knee, one such block is a queue that
  episodes build at that rate, and a short hold cannot say how often they come.
- The backlog test: a least-squares trend of the per-block medians, one-sided at the same
  level; a queue that grows shows as a rising median. It fails the hold only when the rise
  over the hold is also material (over `MATERIAL_RISE` of the SLO, at least 1 ms).

The verdict is three-way: pass (the upper bound within the SLO, no backlog), fail (the
lower bound over it, or a backlog), undecided (the interval straddles the SLO).

Sequential: a hold is measured in segments of the configured length, each an open loop of
its own (its first block a warm-up again), and judged on all the blocks so far after each,
until decided or HOLD_LOOKS segments. A failure may stop it at any look; a pass only once
the hold has lasted its span (`SearchSettings.hold_span_s`): a busy machine slows a
server in episodes that a few seconds may not contain, and blocks that all missed one look
alike, so no interval drawn from them can know. Under half the knee's throughput the span
is not waited for: an episode that halves the server's speed still leaves it keeping up.
The looks share the stated error rate (Bonferroni: each is judged at
1 - (1 - confidence) / HOLD_LOOKS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, stdev
from typing import Literal

from pipeline.statistics.distributions import t_quantile

HoldVerdict = Literal["pass", "fail", "undecided"]
# Blocks per hold (the first is the warm-up), and the samples each needs for a p99.
HOLD_BLOCKS = 7
BLOCK_MIN_SAMPLES = 100
MATERIAL_RISE = 0.05
# At most this many segments per hold, the looks over which its error rate is spent.
HOLD_LOOKS = 4
# Under this share of the knee's throughput a hold may weigh blocks over the SLO.
EPISODES_WEIGHED_UNDER = 0.5


@dataclass(frozen=True)
class Block:
    """One block of a hold: its request count, median and p99 (from intended start)."""

    samples: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class HoldJudgement:
    verdict: HoldVerdict
    reason: str
    interval_ms: tuple[float | None, float | None]
    rise_ms: float


def sectioning_interval(pooled_p99_ms: float, blocks: list[Block],
                        confidence: float) -> tuple[float, float]:
    """The p99's two-sided interval at `confidence` (each side one-sided at it)."""
    spread = stdev([block.p99_ms for block in blocks]) / math.sqrt(len(blocks))
    margin = t_quantile(confidence, len(blocks) - 1) * spread
    return pooled_p99_ms - margin, pooled_p99_ms + margin


def backlog_rise_ms(blocks: list[Block], confidence: float) -> tuple[float, bool]:
    """(the fitted rise of the block medians over the blocks, whether the trend is
    significantly upward at `confidence`)."""
    xs = list(range(len(blocks)))
    ys = [block.p50_ms for block in blocks]
    x_mean, y_mean = fmean(xs), fmean(ys)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sxx
    rise = slope * (len(blocks) - 1)
    residual = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in zip(xs, ys, strict=True))
    freedom = len(blocks) - 2
    if freedom < 1:
        return rise, False
    error = math.sqrt(residual / freedom / sxx)
    if error == 0.0:
        return rise, slope > 0
    return rise, slope / error > t_quantile(confidence, freedom)


def judge_hold(blocks: list[Block], settled_p99_ms: float, slo_p99_ms: float,
               confidence: float, weigh_episodes: bool = False) -> HoldJudgement:
    """The verdict on the blocks after the warm-up (`blocks` without it) and their pooled
    p99 (`settled_p99_ms`); `weigh_episodes`: a long hold may pass with a few blocks over
    the SLO (`episodes_weighed`), else with none."""
    low, high = sectioning_interval(settled_p99_ms, blocks, confidence)
    rise, upward = backlog_rise_ms(blocks, confidence)
    interval = (max(0.0, low), high)
    if upward and rise > max(1.0, MATERIAL_RISE * slo_p99_ms):
        return HoldJudgement("fail", (
            f"backlog grew: the block medians rose {rise:.1f}ms over the hold (a trend at "
            f"{confidence:.0%})"), interval, rise)
    shown = f"p99 {settled_p99_ms:.1f}ms, interval [{max(0.0, low):.1f}, {high:.1f}]ms"
    over = [block.p99_ms for block in blocks if block.p99_ms > slo_p99_ms]
    allowed = episodes_weighed(len(blocks)) if weigh_episodes else 0
    if high <= slo_p99_ms and len(over) > allowed:
        return HoldJudgement("undecided", (
            f"{shown}, but {len(over)} of {len(blocks)} blocks had a p99 over the SLO "
            f"{slo_p99_ms:g}ms (worst {max(over):.1f}ms): episodes the hold is too short "
            "to weigh"), interval, rise)
    if high <= slo_p99_ms:
        return HoldJudgement("pass", f"{shown} within the SLO {slo_p99_ms:g}ms, no backlog",
                             interval, rise)
    if low > slo_p99_ms:
        return HoldJudgement("fail", f"{shown} over the SLO {slo_p99_ms:g}ms", interval, rise)
    return HoldJudgement("undecided", (
        f"{shown} straddles the SLO {slo_p99_ms:g}ms (sectioning over {len(blocks)} "
        "blocks): a longer hold would decide"), interval, rise)


def episodes_weighed(judged_blocks: int) -> int:
    """How many blocks over the SLO a passing hold may have: none in one segment's worth
    of blocks, one more for each three segments' worth measured on."""
    return max(0, judged_blocks - (HOLD_BLOCKS - 1)) // (3 * (HOLD_BLOCKS - 1))


def look_confidence(confidence: float, looks: int = HOLD_LOOKS) -> float:
    """Each look's confidence, so that all `looks` together keep `confidence`."""
    return 1 - (1 - confidence) / looks


def pooled_p99_ms(segments: list[tuple[int, float]]) -> float:
    """The p99 over segments, from each one's (samples, pooled p99): their sample-weighted
    mean (each segment's pool is an estimate of the same p99 at the same rate)."""
    total = sum(samples for samples, _ in segments)
    return sum(samples * p99 for samples, p99 in segments) / total
