"""Find the knee: the highest load that still meets the SLO, in few probes.

Concurrency doubles until a probe fails the SLO (or throughput stops growing,
or the cap is reached); then the gap between the last good and the first bad
load is bisected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProbeOutcome:
    concurrency: int
    throughput_rps: float
    p99_ms: float
    error_rate: float
    passed: bool


@dataclass
class KneeSearch:
    probes: list[ProbeOutcome] = field(default_factory=list)
    knee: ProbeOutcome | None = None
    stop_reason: str = ""


def find_knee(probe: Callable[[int], ProbeOutcome], max_concurrency: int,
              plateau_gain: float = 0.05, max_bisections: int = 3) -> KneeSearch:
    search = KneeSearch()

    def measure(concurrency: int) -> ProbeOutcome:
        outcome = probe(concurrency)
        search.probes.append(outcome)
        return outcome

    good: ProbeOutcome | None = None
    bad: ProbeOutcome | None = None
    concurrency = 1
    while True:
        outcome = measure(concurrency)
        if not outcome.passed:
            bad = outcome
            search.stop_reason = f"SLO missed at concurrency {concurrency}"
            break
        grew = good is None or outcome.throughput_rps >= good.throughput_rps * (1 + plateau_gain)
        previous = good
        good = outcome
        if not grew and previous is not None:
            search.stop_reason = (f"throughput stopped growing at concurrency {concurrency} "
                                  f"({outcome.throughput_rps:.0f}/s vs "
                                  f"{previous.throughput_rps:.0f}/s)")
            break
        if concurrency >= max_concurrency:
            search.stop_reason = f"reached max_concurrency {max_concurrency}"
            break
        concurrency = min(concurrency * 2, max_concurrency)
    if good is not None and bad is not None:
        low, high = good.concurrency, bad.concurrency
        for _ in range(max_bisections):
            if high - low <= 1:
                break
            middle = (low + high) // 2
            outcome = measure(middle)
            if outcome.passed:
                low, good = middle, outcome
            else:
                high = middle
    search.knee = good
    return search
