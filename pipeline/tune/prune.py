"""Which configs to verify, and why each of the others cannot win (per the model).

Decisions:
- A config the model says misses the SLO (or min_throughput), or whose predicted memory
  is over a ceiling, is pruned with that reason.
- Configs that differ only in their delay (or in how their preferred sizes reach the
  same largest batch) are one family (device, instances, largest batch); the model
  rarely tells their throughput apart, so only each family's best is a candidate: of
  those within 2% of it, the longest delay (within the SLO, checked by the model;
  measured here, open-loop capacity grew with the delay from 0 to 2 ms at every batch
  size). The verified candidates are then
  different families, not one family's delays.
- The `verify` best families by prediction are verified. Beyond them, the model may be
  off by its margin either way: a family whose optimistic prediction is under the
  pessimistic prediction of the best is pruned as "cannot win". The margin is
  MODEL_MARGIN, or the error measured on the baseline (the spec's own config, measured
  before anything is pruned) when that is larger: a model found 40x off prunes nothing
  on its ranking.
- After verifying, the predictions are scaled by measured/predicted of the verified ones
  (calibration); an unverified family whose calibrated prediction beats the best measured
  throughput is verified next while the budget lasts (at most 2 x verify in all).
- When the pick is a tie, which configs happened to be verified would decide it: so the
  feasible configs with fewer instances than the pick whose calibrated prediction, with
  the model's margin, reaches the low end of the best's interval are verified too, up
  to `verify` more, whatever the family or the margin pruned them as: fewest instances,
  then the largest batch and the longest delay first (`tie_contender`). Reruns then
  find a pick with the tie's fewest instances, whatever order the exploration ranked
  them. "Reaches" counts the machine's drift as `decide` does: the best's low end / the
  drift factor, the contender's reach x the factor (`drift.py`).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pipeline.tune.model import Prediction, largest_batch
from pipeline.tune.space import Config

MODEL_MARGIN = 0.3
SAME_THROUGHPUT = 0.02


@dataclass(frozen=True)
class Shortlist:
    ranked: list[Prediction]           # candidates, best predicted first
    pruned: dict[Config, str]          # every other config with its reason
    feasible: list[Prediction]         # every config the model says meets the SLO, within
                                       # the ceilings (whatever the family or margin pruned)


def measured_margin(pairs: Sequence[tuple[float, float]]) -> float:
    """How far off the model may be, from (predicted, measured) pairs: the worst factor
    either way, minus one, and at least MODEL_MARGIN."""
    factors = [max(measured / predicted, predicted / measured)
               for predicted, measured in pairs if predicted > 0 and measured > 0]
    return max([MODEL_MARGIN, *(factor - 1 for factor in factors)])


def shortlist(predictions: Sequence[Prediction], max_memory_mb: float | None,
              max_gpu_memory_mb: float | None, keep: int = 1,
              margin: float = MODEL_MARGIN) -> Shortlist:
    """`keep`: the best this many families are never pruned by the margin (they are the
    ones verified first)."""
    pruned: dict[Config, str] = {}
    alive = []
    for prediction in predictions:
        reason = _over_ceiling(prediction, max_memory_mb, max_gpu_memory_mb) or (
            "" if prediction.feasible else prediction.reason)
        if reason:
            pruned[prediction.config] = reason
        else:
            alive.append(prediction)
    families: dict[tuple[str, int, float], list[Prediction]] = {}
    for prediction in alive:
        config = prediction.config
        families.setdefault((config.device, config.instances, largest_batch(config)),
                            []).append(prediction)
    leaders = []
    for members in families.values():
        top = max(m.throughput_rps for m in members)
        close = [m for m in members if m.throughput_rps >= top * (1 - SAME_THROUGHPUT)]
        leader = min(close, key=lambda m: (-m.config.max_queue_delay_us, m.config.preferred))
        leaders.append(leader)
        for member in members:
            if member is not leader:
                pruned[member.config] = (
                    f"same family as {leader.config.label}, predicted "
                    f"{member.throughput_rps:,.0f}/s vs {leader.throughput_rps:,.0f}/s")
    leaders.sort(key=lambda p: (-p.throughput_rps, p.config))
    if leaders:
        floor = leaders[0].throughput_rps * (1 - margin)
        for leader in leaders[max(keep, 1):]:
            if leader.throughput_rps * (1 + margin) < floor:
                pruned[leader.config] = (
                    f"cannot win: predicted {leader.throughput_rps:,.0f}/s, under the best's "
                    f"{leaders[0].throughput_rps:,.0f}/s beyond the model's ±"
                    f"{margin:.0%}")
        leaders = [p for p in leaders if p.config not in pruned]
    return Shortlist(leaders, pruned, alive)


def cheaper(config: Config, than: Config) -> bool:
    """Surely costs less to run, before measuring: fewer instances. (A batch size or a delay
    costs nothing to run; among as many instances the less memory is cheaper, which only
    a measurement tells: `decide.cheapest`.)"""
    return config.instances < than.instances


def could_tie(prediction: Prediction, low_rps: float, calibration: float,
              margin: float, drift: float = 1.0) -> bool:
    """Whether the config may measure an interval that reaches `low_rps` (the low end of
    the best's capacity interval), given the calibrated prediction and the model's error,
    both intervals widened by the machine's drift as `decide` widens them (its top x
    drift, the best's low end / drift)."""
    return prediction.throughput_rps * calibration * (1 + margin) * drift >= low_rps / drift


def tie_contender(feasible: Sequence[Prediction], measured: Collection[Config], pick: Config,
                  best_low_rps: float, calibration: float,
                  margin: float, drift: float = 1.0) -> Prediction | None:
    """The next config to verify so that a tie's cheapest member is found: of the feasible
    configs not yet measured, with fewer instances than the pick (`cheaper`) and able to
    reach the best's interval (`could_tie`), the fewest instances, then the largest batch,
    then the longest delay: the one most likely to keep up (measured here, open-loop
    capacity grew with both), so the one most likely to join the tie and pass its gates on
    a busy machine too. The order is the configs' own, not the predictions': two
    predictions that differ by the exploration's noise would otherwise send two reruns to
    two different configs."""
    options = [p for p in feasible
               if p.config not in measured and cheaper(p.config, pick)
               and could_tie(p, best_low_rps, calibration, margin, drift)]
    return min(options, key=lambda p: (p.config.instances, -largest_batch(p.config),
                                       -p.config.max_queue_delay_us, p.config), default=None)


def closest_when_none_fit(predictions: Sequence[Prediction]) -> Prediction | None:
    """The config to measure when the model says nothing meets the SLO: the lowest
    predicted p99 (then the highest throughput), so that what it missed is measured."""
    if not predictions:
        return None
    return min(predictions, key=lambda p: (p.p99_ms, -p.max_rps))


def calibration(pairs: Sequence[tuple[float, float]]) -> float:
    """Median measured/predicted over verified candidates (1.0 without any)."""
    ratios = [measured / predicted for predicted, measured in pairs if predicted > 0]
    return statistics.median(ratios) if ratios else 1.0


def _over_ceiling(prediction: Prediction, max_memory_mb: float | None,
                  max_gpu_memory_mb: float | None) -> str:
    memory = prediction.memory_mb
    if max_memory_mb is not None and memory is not None and memory > max_memory_mb:
        return f"predicted memory {memory:,.0f} MiB over tune.max_memory {max_memory_mb:,.0f} MiB"
    gpu = prediction.gpu_memory_mb
    if max_gpu_memory_mb is not None and gpu is not None and gpu > max_gpu_memory_mb:
        return (f"predicted GPU memory {gpu:,.0f} MiB over tune.max_gpu_memory "
                f"{max_gpu_memory_mb:,.0f} MiB")
    return ""
