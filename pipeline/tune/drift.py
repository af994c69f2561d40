"""The machine's drift during one tune run, measured on the baseline.

A capacity interval holds the search's own bracketing (the highest rate held, the lowest
that failed), not how far the machine moved between two verifications minutes apart: on
2 shared cores one config's capacity moved by 30-50% between runs, and its interval held
none of that. So the baseline (the spec's own config, verified first) is verified again
at the end of the verification phase, before any tie is settled, and every verified
config's interval is widened by the factor between its two capacities before the pick
is decided (`decide.decide`, `prune.could_tie`).

Decisions:
- The factor is max(c1, c2) / min(c1, c2) of the baseline's two capacity figures (the
  point estimates: the highest rate each held).
- Both exact: that ratio. A lower bound's figure is where its search stopped (a time
  budget, the load generator), not where the machine was: two lower bounds capped alike
  read the same whatever the machine did, and one against an exact figure bounds the
  drift neither way. With either a lower bound the factor is the ratio or DEFAULT_DRIFT,
  whichever is larger (`basis: lower_bound`).
- Not measured (no budget left for the second verification, a verification that failed
  or stated no capacity): DEFAULT_DRIFT (`basis: default`), the record says why. The
  default is the smaller of the between-run movements seen for one config here (30-50%);
  declaring every config a tie instead would recommend the cheapest passing config
  whatever it measured.
- One config measured: nothing to compare, no second verification, factor 1.
- Widening both of two intervals by the factor lets two configs tie when their figures
  are up to factor² apart beyond their brackets. That is deliberate: the baseline's two
  ends bound the drift between the first and the last verification, not between two
  verifications in between (a busy neighbour in the middle of the run only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.statistics.capacity_figure import CapacityFigure

DEFAULT_DRIFT = 1.3
# From here the widened intervals of any two configs overlap by design: the pick is the
# cheapest config that met the SLO, and the run says the machine, not the configs, decided.
UNSETTLED_DRIFT = 2.0

Basis = Literal["exact", "lower_bound", "default", "not_needed"]


@dataclass(frozen=True)
class Drift:
    factor: float                      # >= 1: intervals are widened by it either way
    basis: Basis
    first: CapacityFigure | None       # the baseline's capacity, verified first
    second: CapacityFigure | None      # the baseline's capacity, verified again at the end
    why: str = ""                      # why it was not measured, or what bounds it

    @property
    def measured(self) -> bool:
        return self.basis in ("exact", "lower_bound")

    def text(self) -> str:
        """One line for the terminal, the record's `why` and the report."""
        if self.basis == "not_needed":
            return "one config verified: the machine's drift was not needed"
        share = f"{self.factor - 1:.0%}"
        if self.basis == "default":
            return (f"the machine's drift is unknown ({self.why}): intervals widened by the "
                    f"default {share} (x{self.factor:.2f})")
        assert self.first is not None and self.second is not None
        read = f"{self.first.rps:,.0f}/s, then {self.second.rps:,.0f}/s"
        if self.basis == "lower_bound":
            return (f"the baseline's two verifications read {read}, a lower bound among them "
                    f"({self.why}): intervals widened by {share} (x{self.factor:.2f})"
                    f"{self._unsettled()}")
        return (f"the machine drifted by {share} between the baseline's two verifications "
                f"({read}); intervals widened by it (x{self.factor:.2f}){self._unsettled()}")

    def _unsettled(self) -> str:
        if self.factor < UNSETTLED_DRIFT:
            return ""
        return ("; at this drift the configs cannot be told apart on this machine: the "
                "cheapest that met the SLO is recommended, run tune again where the machine "
                "is quieter to rank them")

    def to_json(self) -> dict[str, Any]:
        return {"factor": self.factor, "percent": round(100 * (self.factor - 1), 1),
                "basis": self.basis, "measured": self.measured,
                "baseline_rps": [None if f is None else f.rps
                                 for f in (self.first, self.second)],
                "baseline_capacity": [None if f is None else f.to_json()
                                      for f in (self.first, self.second)],
                "why": self.why, "text": self.text()}


def not_needed() -> Drift:
    return Drift(1.0, "not_needed", None, None, "one config verified")


def unknown(why: str, first: CapacityFigure | None = None,
            second: CapacityFigure | None = None) -> Drift:
    return Drift(DEFAULT_DRIFT, "default", first, second, why)


def between(first: CapacityFigure | None, second: CapacityFigure | None) -> Drift:
    """The drift between the baseline's two capacity figures (see the module's
    decisions)."""
    if first is None or second is None:
        which = "first" if first is None else "second"
        return unknown(f"the baseline's {which} verification stated no capacity", first,
                       second)
    if min(first.rps, second.rps) <= 0:
        return unknown("a baseline capacity of 0/s", first, second)
    ratio = max(first.rps, second.rps) / min(first.rps, second.rps)
    if first.bound == "exact" and second.bound == "exact":
        return Drift(ratio, "exact", first, second)
    if ratio >= DEFAULT_DRIFT:
        return Drift(ratio, "lower_bound", first, second, "the drift may be larger")
    return Drift(DEFAULT_DRIFT, "lower_bound", first, second,
                 f"it bounds the drift neither way: x{ratio:.2f} raised to the default")
