"""The pick: the best measured capacity, decided against the runner-up and the baseline
with intervals, and the cheaper config when they do not differ beyond the noise.

Decisions:
- Only candidates that met every gate compete; the best is the highest measured capacity
  (then the lower p99).
- A candidate whose capacity interval overlaps the best's is tied with it: the
  measurements cannot say which of the two serves more. A lower bound's interval has no
  top, so it ties with anything at or above it. A candidate without a capacity figure (no
  rate was confirmed) ties with nothing: it is compared on its throughput only.
- Every interval is first widened by the machine's drift during the run (`drift.py`: the
  baseline verified first and again at the end; low / factor, high x factor): an interval
  holds the search's bracketing, not the minutes between two verifications, and without
  the drift a pick follows the machine's load rather than the configs.
- Of the tied, the cheapest is recommended: fewer instances, then less memory (the
  server's RSS after the latency stage) beyond its noise (MEMORY_NOISE_MB or
  MEMORY_NOISE_SHARE, whichever is larger), then the smaller batch and the shorter delay.
- The spec's current config (the baseline) competes like any other: when the best does
  not beat it beyond the noise, the line says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.tune.candidate import Candidate
from pipeline.tune.model import largest_batch

# RSS readings of one config differ between runs by a few MiB (allocator, threads): a
# difference under this is no difference in cost.
MEMORY_NOISE_MB = 32.0
MEMORY_NOISE_SHARE = 0.05


@dataclass(frozen=True)
class Decision:
    pick: Candidate | None
    best: Candidate | None                 # the highest measured capacity
    tied: tuple[Candidate, ...] = ()       # not surely below the best (the best included)
    runner_up: str = ""                    # the best against the next best
    baseline: str = ""                     # the pick against the spec's current config
    drift: float = 1.0                     # every interval was widened by this factor

    @property
    def is_tie(self) -> bool:
        return len(self.tied) > 1

    def line(self) -> str:
        parts = [part for part in (self.runner_up, self.baseline) if part]
        if self.is_tie and self.pick is not None:
            labels = ", ".join(c.config.label for c in self.tied)
            parts.append(f"tie within {_noise(self.drift)} between {labels}: recommending the "
                         f"cheapest, {self.pick.config.label}")
        return "; ".join(parts)


def memory_noise_mb(memory_mb: float) -> float:
    """How far apart two RSS readings of equally costly configs may be: the larger of
    MEMORY_NOISE_MB and MEMORY_NOISE_SHARE of the reading."""
    return max(MEMORY_NOISE_MB, MEMORY_NOISE_SHARE * memory_mb)


def cheapest(tied: Sequence[Candidate]) -> Candidate:
    """The config that costs least to run: the fewest instances; of those, the ones whose
    memory is within its noise of the least (a config without a reading only when none
    has one); of those, the smaller batch, then the shorter delay. Memory is compared
    beyond its noise so that two reruns, whose readings differ by a few MiB, order the
    same configs the same way."""
    fewest = min(c.config.instances for c in tied)
    pool = [c for c in tied if c.config.instances == fewest]
    readings = [c.memory_mb for c in pool if c.memory_mb is not None]
    if readings:
        least = min(readings)
        pool = [c for c in pool if c.memory_mb is not None
                and c.memory_mb <= least + memory_noise_mb(least)]
    return min(pool, key=lambda c: (largest_batch(c.config), c.config.max_queue_delay_us,
                                    -c.throughput, c.config))


def tied(first: Candidate, second: Candidate, drift: float = 1.0) -> bool:
    """Whether the two capacity intervals, each widened by the drift, share a rate."""
    one, other = first.capacity, second.capacity
    return one is not None and other is not None and \
        one.widened(drift).overlaps(other.widened(drift))


def decide(candidates: Sequence[Candidate], baseline: Candidate | None,
           drift: float = 1.0) -> Decision:
    """`drift`: the factor every capacity interval is widened by (1: not at all)."""
    pool = list(candidates)
    if baseline is not None and all(c is not baseline for c in pool):
        pool.append(baseline)
    passing = [c for c in pool if c.meets]
    if not passing:
        return Decision(None, None)
    ranked = sorted(passing, key=lambda c: (-c.throughput, _p99(c), c.config))
    best = ranked[0]
    ties = tuple(c for c in ranked if c is best or tied(best, c, drift))
    pick = cheapest(ties)
    runner = ranked[1] if len(ranked) > 1 else None
    return Decision(pick, best, ties, _against(best, runner, "next best", drift),
                    _against_baseline(pick, baseline, drift), drift)


def _p99(candidate: Candidate) -> float:
    measured = candidate.measured
    if measured is None or measured.latency_p99_ms is None:
        return 0.0
    return measured.latency_p99_ms


def _shown(candidate: Candidate) -> str:
    figure = candidate.capacity
    if figure is None:
        return f"{candidate.config.label} {candidate.throughput:,.0f}/s (no capacity interval)"
    return f"{candidate.config.label} {figure.text()}"


def _noise(drift: float) -> str:
    return "the noise" if drift <= 1.0 else f"the noise and the machine's drift (x{drift:.2f})"


def _beyond(drift: float) -> str:
    if drift <= 1.0:
        return "beyond both intervals"
    return f"beyond both intervals widened by the drift (x{drift:.2f})"


def _against(best: Candidate, other: Candidate | None, name: str, drift: float) -> str:
    if other is None:
        return ""
    if tied(best, other, drift):
        return f"{name} {_shown(other)}: not different from the best beyond {_noise(drift)}"
    if best.capacity is not None and other.capacity is not None:
        return f"above the {name}, {_shown(other)}, {_beyond(drift)}"
    return f"{name} {_shown(other)}"


def _against_baseline(pick: Candidate, baseline: Candidate | None, drift: float) -> str:
    if baseline is None:
        return ""
    if baseline is pick:
        return "the spec's current config (the baseline) is the pick"
    if not baseline.meets:
        return (f"the spec's current config (the baseline) missed the SLO: "
                f"{'; '.join(baseline.missed()) or 'not measured'}")
    if tied(pick, baseline, drift):
        return (f"the baseline, {_shown(baseline)}, does not differ from the pick beyond "
                f"{_noise(drift)}")
    pick_figure, base_figure = pick.capacity, baseline.capacity
    if pick_figure is not None and base_figure is not None and \
            pick_figure.widened(drift).surely_above(base_figure.widened(drift)):
        return f"above the baseline, {_shown(baseline)}, {_beyond(drift)}"
    return f"baseline {_shown(baseline)}"
