"""Find the knee: the highest load that still meets the SLO, in few probes.

Concurrency doubles until a probe fails the SLO (or throughput stops growing,
or the cap is reached); then the gap between the last good and the first bad
load is bisected. A search may start from a load already measured (the latency stage's
concurrency, which passed its gates on a longer window than a probe's): the doubling
continues above it, since every load below it met the SLO there too. The knee is the
best passing probe of all of them (highest throughput, ties to the lower p99), never
simply the last one: past the peak a server often does less at a higher p99. A search
that passes at the cap while throughput still grows found no knee, only a lower bound on
capacity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Bound = Literal["exact", "lower"]


@dataclass(frozen=True)
class ProbeOutcome:
    concurrency: int
    throughput_rps: float
    p99_ms: float
    error_rate: float
    passed: bool
    # What measured it: a probe of this search, or the stage whose window it reuses.
    measured_by: str = "probe"


def best_passing(probes: list[ProbeOutcome]) -> ProbeOutcome | None:
    """Highest throughput that met the SLO; of equal throughputs, the lower p99."""
    passing = [probe for probe in probes if probe.passed]
    if not passing:
        return None
    return max(passing, key=lambda probe: (probe.throughput_rps, -probe.p99_ms))


@dataclass
class KneeSearch:
    probes: list[ProbeOutcome] = field(default_factory=list)
    stop_reason: str = ""
    cap_reached: bool = False

    @property
    def best(self) -> ProbeOutcome | None:
        return best_passing(self.probes)

    @property
    def bound(self) -> Bound:
        """"lower" when the cap passed the SLO with throughput still growing."""
        return "lower" if self.cap_reached else "exact"

    @property
    def knee(self) -> ProbeOutcome | None:
        """The best passing probe, when the search found a real knee (not the cap)."""
        return None if self.cap_reached else self.best


def find_knee(probe: Callable[[int], ProbeOutcome], max_concurrency: int,
              plateau_gain: float = 0.05, max_bisections: int = 3,
              measured: ProbeOutcome | None = None) -> KneeSearch:
    """`measured`: a passing load below the cap already measured; the ramp starts above it."""
    search = KneeSearch()

    def measure(concurrency: int) -> ProbeOutcome:
        outcome = probe(concurrency)
        search.probes.append(outcome)
        return outcome

    last_good: ProbeOutcome | None = None
    bad: ProbeOutcome | None = None
    concurrency = 1
    if measured is not None and measured.passed and measured.concurrency < max_concurrency:
        search.probes.append(measured)
        last_good = measured
        concurrency = min(measured.concurrency * 2, max_concurrency)
    while True:
        outcome = measure(concurrency)
        if not outcome.passed:
            bad = outcome
            search.stop_reason = f"SLO missed at concurrency {concurrency}"
            break
        # Growth is judged against the best so far, so a dip and a small recovery
        # (noise around the threshold) cannot keep the ramp going.
        best_before = best_passing(search.probes[:-1])
        last_good = outcome
        if best_before is not None and \
                outcome.throughput_rps < best_before.throughput_rps * (1 + plateau_gain):
            search.stop_reason = (f"throughput stopped growing at concurrency {concurrency} "
                                  f"({outcome.throughput_rps:.0f}/s vs best "
                                  f"{best_before.throughput_rps:.0f}/s)")
            break
        if concurrency >= max_concurrency:
            search.cap_reached = True
            search.stop_reason = (f"reached max_concurrency {max_concurrency} with the SLO met: "
                                  f"capacity ≥ {outcome.throughput_rps:.0f}/s (cap reached)")
            break
        concurrency = min(concurrency * 2, max_concurrency)
    if last_good is not None and bad is not None:
        low, high = last_good.concurrency, bad.concurrency
        for _ in range(max_bisections):
            if high - low <= 1:
                break
            middle = (low + high) // 2
            if measure(middle).passed:
                low = middle
            else:
                high = middle
    return search
