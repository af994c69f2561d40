"""Measure windows until the verdict is decided: the loop, apart from any server.

After `min_windows` windows the verdict is looked at after every window, and the loop stops
as soon as it is decided either way (a clear pass, or a clear failure), at most after
`max_windows` counted windows. The error each look may spend follows an
O'Brien-Fleming-type spending function of the information fraction t (windows so far over
the cap): alpha(t) = 2 (1 - Phi(z_{1 - alpha/2} / sqrt t)); look j spends
alpha(t_j) - alpha(t_{j-1}), and a union bound over the looks (their increments sum to
alpha) keeps the stated error rate for the whole sequence, in each direction. Early looks
spend little (they stop only on a clear verdict), the last the most.

Two kinds of window are re-measured, each time with one extra window that does not count
towards the cap (at most `max_extra` in all):
- a window the client could not drive (it was short of CPU or behind its schedule): it
  says nothing about the model, so it is left out of the evidence and named in the record
  (once no re-measure is left, such a window counts, and the record says so: its latencies
  can only be too high, never too low);
- a window the instability test names as far from the rest: it is named, and it still
  counts (leaving it out would hide a model that really stalls now and then); the extra
  window shows whether that was a one-off.
The window source is any function, so that the same loop runs against a server and in the
calibration benchmark's simulation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from pipeline.statistics.distributions import normal_quantile, normal_survival

Window = TypeVar("Window")


class Look(Protocol):
    """What one look at the windows kept so far concluded."""

    @property
    def decided(self) -> bool: ...

    @property
    def outlier(self) -> int | None: ...   # index among the windows kept


LookT = TypeVar("LookT", bound=Look)


def obrien_fleming_spent(fraction: float, alpha: float) -> float:
    """The error an O'Brien-Fleming-type spending function has spent by the information
    `fraction` (0 to 1): 2 (1 - Phi(z_{1 - alpha/2} / sqrt fraction)), alpha at 1."""
    if fraction >= 1:
        return alpha
    return 2 * normal_survival(normal_quantile(1 - alpha / 2) / fraction**0.5)


def hwang_shih_decani_spent(fraction: float, alpha: float, gamma: float) -> float:
    """The error the Hwang-Shih-DeCani spending function with parameter `gamma` has spent
    by the information `fraction`: alpha (1 - e^(-gamma t)) / (1 - e^(-gamma)); gamma -4
    is close to O'Brien-Fleming's (little early), 1 to Pocock's (much early), 0 is
    linear (evenly)."""
    if fraction >= 1:
        return alpha
    if gamma == 0:
        return alpha * fraction
    return alpha * (1 - math.exp(-gamma * fraction)) / (1 - math.exp(-gamma))


@dataclass(frozen=True)
class WindowPlan:
    min_windows: int
    max_windows: int
    max_extra: int
    confidence: float = 0.95

    @property
    def looks(self) -> int:
        """Every look that can decide (the union bound's divisor): one after each counted
        window from the fewest to the cap. A look that names an outlier decides nothing
        (the loop measures on), and a window left out is not looked at, so re-measures
        add none."""
        return max(self.max_windows, self.min_windows) - self.min_windows + 1

    def spent(self, look: int) -> float:
        """The error spent by the end of the 0-based `look`."""
        if look < 0:
            return 0.0
        alpha = 1 - self.confidence
        if look >= self.looks - 1:
            return alpha
        return obrien_fleming_spent(
            (self.min_windows + look) / max(self.max_windows, self.min_windows), alpha)

    def look_alpha(self, look: int) -> float:
        """The one-sided level of the 0-based `look`'s bounds."""
        return self.spent(min(look, self.looks - 1)) - self.spent(min(look, self.looks - 1) - 1)

    @property
    def last_alpha(self) -> float:
        return self.look_alpha(self.looks - 1)


@dataclass
class WindowRun(Generic[Window, LookT]):
    measured: list[Window] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)       # indices into measured
    left_out: dict[int, str] = field(default_factory=dict)
    remeasured: dict[int, str] = field(default_factory=dict)
    decided: bool = False
    last: LookT | None = None     # the last look that could decide
    alpha: float = 0.0            # its level

    @property
    def windows(self) -> list[Window]:
        return [self.measured[index] for index in self.kept]

    def notes(self) -> list[str]:
        """One line for each window left out or re-measured (1-based, as measured)."""
        lines = [f"window {i + 1} left out and re-measured: {why}"
                 for i, why in sorted(self.left_out.items())]
        return lines + [f"window {i + 1} re-measured: {why}"
                        for i, why in sorted(self.remeasured.items())]


def run_windows(window: Callable[[int], Window],
                look: Callable[[list[Window], float], LookT],
                client_limited: Callable[[Window], str | None],
                plan: WindowPlan) -> WindowRun[Window, LookT]:
    """Measure `window(i)` until a look is decided or the cap (see the module doc);
    `look(windows, alpha)` judges the windows kept so far at one-sided level alpha."""
    run: WindowRun[Window, LookT] = WindowRun()
    counted, extra, looks = 0, plan.max_extra, 0
    flagged: set[int] = set()
    while counted < max(plan.max_windows, plan.min_windows):
        index = len(run.measured)
        run.measured.append(window(index))
        why = client_limited(run.measured[-1])
        if why is not None and extra > 0:
            run.left_out[index] = why
            extra -= 1
            continue
        run.kept.append(index)
        if why is not None:
            run.remeasured[index] = f"{why} (no re-measure left: it counts)"
        counted += 1
        if len(run.kept) < plan.min_windows:
            continue
        alpha = plan.look_alpha(looks)
        verdict = look(run.windows, alpha)
        if verdict.outlier is not None and extra > 0 and run.kept[verdict.outlier] not in flagged:
            flagged.add(run.kept[verdict.outlier])
            run.remeasured[run.kept[verdict.outlier]] = (
                "far from the other windows (instability test); it still counts")
            extra -= 1
            counted -= 1   # the next window is the re-measure: it does not count
            continue
        run.last, run.alpha, looks = verdict, alpha, looks + 1
        if verdict.decided:
            run.decided = True
            break
    return run
