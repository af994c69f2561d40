"""Which server meets the SLO at the higher throughput, by how much, how surely.

Each server's figure is its merged curve's best load point that met the SLO (its
headline); each round of interleaved windows gives it one throughput at that load point.
A difference is called only when it exceeds the spread between rounds: every round of the
winner above every round of the other. The confidence is one minus the exact permutation
p-value of the difference in means over those rounds (two-sided): with 3 rounds each, a
clean separation gives 90%, with 5 rounds 99%. Fewer rounds cannot give more, and the
verdict says so.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Basis = Literal["beyond_spread", "within_spread", "only_one_qualified", "none_qualified"]


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


@dataclass(frozen=True)
class Verdict:
    winner: str | None
    margin: float | None        # the winner's figure over the other's, minus 1
    confidence: float | None    # 1 - permutation p-value
    basis: Basis
    line: str

    def to_json(self) -> dict[str, Any]:
        return {"winner": self.winner, "margin": self.margin, "confidence": self.confidence,
                "basis": self.basis, "line": self.line}


def permutation_p(first: Sequence[float], second: Sequence[float]) -> float:
    """Exact two-sided p-value of |mean difference| over every split of the pooled values."""
    pooled = [*first, *second]
    size = len(first)
    observed = abs(statistics.fmean(first) - statistics.fmean(second))
    total = as_extreme = 0
    for chosen in itertools.combinations(range(len(pooled)), size):
        picked = set(chosen)
        a = [pooled[i] for i in picked]
        b = [pooled[i] for i in range(len(pooled)) if i not in picked]
        total += 1
        if abs(statistics.fmean(a) - statistics.fmean(b)) >= observed - 1e-12:
            as_extreme += 1
    return as_extreme / total


def decide(per_round: Mapping[str, Sequence[float]], unit: str,
           disqualified: Mapping[str, str],
           headline: Mapping[str, float] | None = None) -> Verdict:
    """`per_round`: each measured kind's throughput per round at its load point that met
    the SLO (0 when none did), already divided by `unit` (core or GPU); `headline`: each
    kind's figure over all rounds (the median of its rounds where not given), which the
    margin and the line state; `disqualified`: kinds that failed start, readiness or
    parity, with why."""
    qualified = {kind: values for kind, values in per_round.items()
                 if kind not in disqualified and values and max(values) > 0}
    if not qualified:
        reasons = "; ".join(f"{k}: {why}" for k, why in disqualified.items()) or \
            "no load met the SLO on either server"
        return Verdict(None, None, None, "none_qualified",
                       f"no winner: neither server met the SLO ({reasons})")
    if len(qualified) == 1:
        (kind,) = qualified
        others = [k for k in per_round if k != kind] + list(disqualified)
        why = "; ".join(f"{k}: {disqualified.get(k, 'met the SLO at no load')}"
                        for k in dict.fromkeys(others))
        return Verdict(kind, None, None, "only_one_qualified",
                       f"{kind} wins by default: only it met the SLO ({why})")
    figure = {kind: (headline or {}).get(kind, Spread.of(values).median)
              for kind, values in qualified.items()}
    a, b = qualified
    winner, loser = (a, b) if figure[a] >= figure[b] else (b, a)
    win, lose = Spread.of(qualified[winner]), Spread.of(qualified[loser])
    margin = figure[winner] / figure[loser] - 1
    confidence = 1 - permutation_p(qualified[winner], qualified[loser])
    rounds = len(qualified[winner])
    if win.low > lose.high:
        return Verdict(winner, margin, confidence, "beyond_spread",
                       f"{winner} meets the SLO at {margin:.0%} higher throughput per {unit} "
                       f"({figure[winner]:.1f} vs {figure[loser]:.1f}/s per {unit}; every one of "
                       f"{rounds} rounds apart, confidence {confidence:.0%})")
    return Verdict(None, margin, confidence, "within_spread",
                   f"no difference beyond the spread: {winner} {figure[winner]:.1f} "
                   f"[{win.low:.1f}–{win.high:.1f}] vs {loser} {figure[loser]:.1f} "
                   f"[{lose.low:.1f}–{lose.high:.1f}]/s per {unit} over {rounds} rounds")
