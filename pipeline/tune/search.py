"""The search: explore a little, model, prune, verify the best few by measuring.

Verification starts and ends with the baseline (the spec's own config): its two
capacities, minutes apart, give the machine's drift during the run (`drift.py`), and
every interval is widened by it before a tie is settled and the pick decided. The second
verification comes after the ranked candidates and before the tie's cheaper configs are
looked for, so that the search for them reaches as far as the decision will.

The budget is checked before each step; no measurement in progress is cut short, and
the first candidate is always verified, so a run always ends with a measured answer
(marked `budget_exhausted` when the budget stopped the search early).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.context import Progress, no_progress
from pipeline.errors import PipelineError
from pipeline.measure.gpu import gpu_memory_mb
from pipeline.spec.models import LoadedSpec
from pipeline.tune.adapters import (
    CandidateRecord,
    ServingSession,
    preflight,
    read_candidate,
    verify_on,
)
from pipeline.tune.candidate import Candidate
from pipeline.tune.decide import Decision, decide
from pipeline.tune.drift import Drift, between, not_needed, unknown
from pipeline.tune.explore import explore, plan_for
from pipeline.tune.model import InstanceFit, Observation, Prediction, fit, predict
from pipeline.tune.prune import (
    MODEL_MARGIN,
    calibration,
    closest_when_none_fit,
    measured_margin,
    shortlist,
    tie_contender,
)
from pipeline.tune.space import Config, build_space, current_config

Report = Callable[[str], None]
DEFAULT_VERIFY = 3


def _quiet(line: str) -> None:
    """No running commentary (tests, scripts)."""


@dataclass
class Budget:
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def spent(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.spent()


@dataclass
class TuneOutcome:
    space: list[Config]
    observations: list[Observation] = field(default_factory=list)
    fits: list[InstanceFit] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    # Every prediction that meets the SLO within the ceilings (`prune.shortlist`): where a
    # tie's cheaper members are looked for.
    feasible: list[Prediction] = field(default_factory=list)
    pruned: dict[Config, str] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    exploration_failures: dict[str, str] = field(default_factory=dict)
    budget_exhausted: bool = False
    kind: str = "triton"
    starts: int = 0
    reloads: int = 0
    # Each move to a config: {config, how: started|reloaded, seconds until it was ready}.
    server_changes: list[dict[str, Any]] = field(default_factory=list)
    gpu_measured: bool = False
    explore_s: float = 0.0
    verify_s: float = 0.0
    calibration: float = 1.0
    model_margin: float = MODEL_MARGIN     # how far off the model may be, as measured
    # The spec's current config, always measured; also among `candidates` when it is in
    # the space.
    baseline: Candidate | None = None
    # The baseline verified again at the end of the verification phase (in no candidate
    # list), and the drift between its two capacities; None until it was measured.
    baseline_again: Candidate | None = None
    drift: Drift | None = None

    @property
    def drift_factor(self) -> float:
        """What every capacity interval is widened by (1 until the drift is known)."""
        return self.drift.factor if self.drift is not None else 1.0

    @property
    def measured(self) -> list[Candidate]:
        """Every verified config: the candidates, and the baseline when it is outside the
        space."""
        baseline = self.baseline
        outside = baseline is not None and all(c is not baseline for c in self.candidates)
        return [*self.candidates, *([baseline] if outside and baseline else [])]

    @property
    def decision(self) -> Decision:
        return decide(self.candidates, self.baseline, self.drift_factor)

    @property
    def winner(self) -> Candidate | None:
        """The recommended config: the best measured, or the cheapest of those tied with
        it (`decide`)."""
        return self.decision.pick

    @property
    def closest(self) -> Candidate | None:
        measured = [c for c in self.measured if c.measured is not None]
        pool = measured or self.measured
        if not pool:
            return None
        return min(pool, key=lambda c: (len(c.missed()), -c.throughput))


@dataclass(frozen=True)
class TuneSettings:
    budget_s: float
    verify: int
    explore_window_s: float
    max_memory_mb: float | None
    max_gpu_memory_mb: float | None


def settings_for(loaded: LoadedSpec, budget_s: float | None) -> TuneSettings:
    tune = loaded.spec.tune
    spec_budget = tune.budget.seconds if tune and tune.budget else 600.0
    return TuneSettings(
        budget_s=budget_s if budget_s is not None else spec_budget,
        verify=tune.verify if tune else DEFAULT_VERIFY,
        explore_window_s=tune.explore_window.seconds if tune and tune.explore_window else 1.0,
        max_memory_mb=tune.max_memory.mib if tune and tune.max_memory else None,
        max_gpu_memory_mb=tune.max_gpu_memory.mib if tune and tune.max_gpu_memory else None)


def run_tune(loaded: LoadedSpec, run_dir: Path, env: Mapping[str, str],
             settings: TuneSettings, report: Report = _quiet,
             progress: Progress = no_progress) -> TuneOutcome:
    preflight(loaded, env)
    gpu_present = gpu_memory_mb([]) is not None
    space = build_space(loaded.spec, gpu_present)
    kind = loaded.spec.server.kind
    outcome = TuneOutcome(space, kind=kind,
                          gpu_measured=gpu_present)
    budget = Budget(settings.budget_s)
    session = ServingSession(loaded, run_dir / "servers", env, model_control=True)
    report(f"search space: {len(space)} configs; budget {settings.budget_s:.0f}s")
    try:
        _explore_all(session, loaded, outcome, settings, budget, run_dir, report, progress)
        outcome.explore_s = budget.spent()
        _predict_all(loaded, outcome, settings)
        _verify_best(session, loaded, outcome, settings, budget, run_dir, env, report, progress)
        outcome.verify_s = budget.spent() - outcome.explore_s
    finally:
        session.close()
        outcome.starts, outcome.reloads = session.starts, session.reloads
        outcome.server_changes = list(session.events)
    return outcome


def _explore_all(session: ServingSession, loaded: LoadedSpec, outcome: TuneOutcome,
                 settings: TuneSettings, budget: Budget, run_dir: Path,
                 report: Report, progress: Progress) -> None:
    for plan in plan_for(outcome.space, settings.explore_window_s):
        if outcome.fits and budget.left() <= 0:
            outcome.budget_exhausted = True
            outcome.exploration_failures[plan.config.label] = "not explored: budget spent"
            continue
        report(f"exploring {plan.config.label} at concurrency "
               f"{', '.join(map(str, plan.concurrencies))}")
        try:
            server = session.serve(plan.config)
            seen = explore(server, loaded, plan, run_dir / "explore", progress)
        except PipelineError as exc:
            outcome.exploration_failures[plan.config.label] = str(exc)
            report(f"  failed: {exc}")
            session.close()
            continue
        outcome.observations.extend(seen)
        outcome.fits.append(fit(seen))


def _predict_all(loaded: LoadedSpec, outcome: TuneOutcome, settings: TuneSettings) -> None:
    fits = {(f.device, f.instances): f for f in outcome.fits}
    for config in outcome.space:
        model = fits.get((config.device, config.instances))
        if model is None:
            prefix = f"{config.device} x{config.instances} "
            why_not = next((reason for label, reason in outcome.exploration_failures.items()
                            if label.startswith(prefix)), "could not be explored")
            outcome.pruned[config] = f"not modelled: {prefix.strip()} {why_not}"
            continue
        outcome.predictions.append(predict(model, config, loaded.spec.slo))


def _prune(outcome: TuneOutcome, settings: TuneSettings) -> None:
    """Prune on the model only beyond its error as measured on the baseline."""
    outcome.model_margin = measured_margin(
        [(c.prediction.throughput_rps, c.throughput) for c in outcome.measured
         if c.prediction is not None and c.meets])
    chosen = shortlist(outcome.predictions, settings.max_memory_mb, settings.max_gpu_memory_mb,
                       keep=settings.verify, margin=outcome.model_margin)
    outcome.pruned.update(chosen.pruned)
    outcome.feasible = chosen.feasible
    if outcome.baseline is not None:
        outcome.pruned.pop(outcome.baseline.config, None)


def _verify_best(session: ServingSession, loaded: LoadedSpec, outcome: TuneOutcome,
                 settings: TuneSettings, budget: Budget, run_dir: Path,
                 env: Mapping[str, str], report: Report, progress: Progress) -> None:
    baseline = _verify_baseline(session, loaded, outcome, settings, run_dir, env, report,
                                progress)
    _calibrate(outcome)
    _prune(outcome, settings)
    estimate = max(_first_estimate(loaded) * 0.5, baseline.duration_s)
    ranked = [p for p in outcome.predictions
              if p.config not in outcome.pruned and p.config != baseline.config]
    ranked.sort(key=lambda p: (-p.throughput_rps, p.config))
    if not ranked and not outcome.candidates:
        fallback = closest_when_none_fit(outcome.predictions)
        if fallback is None:
            return
        outcome.pruned.pop(fallback.config, None)
        ranked = [fallback]
        report("the model says no config meets the SLO: measuring the closest")
    queue = list(ranked)
    limit = 2 * settings.verify
    while queue and len(outcome.candidates) < limit:
        prediction = queue[0]
        if len(outcome.candidates) >= settings.verify and not _could_win(prediction, outcome):
            break
        if outcome.candidates and budget.left() < estimate:
            outcome.budget_exhausted = True
            break
        queue.pop(0)
        candidate = _verify_one(session, loaded, prediction.config, prediction, outcome,
                                settings, run_dir, env, report, progress)
        outcome.candidates.append(candidate)
        estimate = max(estimate * 0.5, candidate.duration_s)
        _calibrate(outcome)
    estimate = _measure_drift(session, loaded, outcome, settings, budget, estimate, run_dir,
                              env, report, progress)
    settled = _settle_tie(session, loaded, outcome, settings, budget, estimate, run_dir, env,
                          report, progress)
    for prediction in queue:
        if prediction.config not in settled:
            outcome.pruned.setdefault(prediction.config,
                                      _not_verified_reason(prediction, outcome))


def _settle_tie(session: ServingSession, loaded: LoadedSpec, outcome: TuneOutcome,
                settings: TuneSettings, budget: Budget, estimate: float, run_dir: Path,
                env: Mapping[str, str], report: Report, progress: Progress) -> set[Config]:
    """Verify the cheapest configs that could join the best's tie (`prune.could_tie`),
    cheapest first, until none is left, `verify` more were measured or the budget is
    spent: a
    tie's pick is then the cheapest config in it, not the cheapest of those the ranking
    happened to reach. Returns the configs verified here."""
    verified: set[Config] = set()
    while len(verified) < settings.verify:
        decision = outcome.decision
        pick, best = decision.pick, decision.best
        if pick is None or best is None or best.capacity is None:
            break
        choice = tie_contender(outcome.feasible, {c.config for c in outcome.measured},
                               pick.config, best.capacity.low_rps, outcome.calibration,
                               outcome.model_margin, outcome.drift_factor)
        if choice is None:
            break
        if budget.left() < estimate:
            outcome.budget_exhausted = True
            break
        outcome.pruned.pop(choice.config, None)
        report(f"the best, {best.config.label}, may tie with cheaper configs: "
               f"checking {choice.config.label}")
        candidate = _verify_one(session, loaded, choice.config, choice, outcome, settings,
                                run_dir, env, report, progress)
        outcome.candidates.append(candidate)
        verified.add(choice.config)
        estimate = max(estimate * 0.5, candidate.duration_s)
        _calibrate(outcome)
    return verified


def _measure_drift(session: ServingSession, loaded: LoadedSpec, outcome: TuneOutcome,
                   settings: TuneSettings, budget: Budget, estimate: float, run_dir: Path,
                   env: Mapping[str, str], report: Report, progress: Progress) -> float:
    """Verify the baseline again, so that its two capacities give the machine's drift
    (`drift.between`); the drift is unknown (`drift.unknown`: the default factor) when
    the budget has no room for it or the first verification stated no capacity, and not
    needed when only one config was verified. Returns the next step's time estimate."""
    baseline = outcome.baseline
    if baseline is None or len(outcome.measured) < 2:
        outcome.drift = not_needed()
        return estimate
    if baseline.capacity is None:
        outcome.drift = unknown("the baseline's first verification stated no capacity")
    elif budget.left() < estimate:
        outcome.budget_exhausted = True
        outcome.drift = unknown("no budget left to verify the baseline again",
                                baseline.capacity)
    else:
        report("verifying the baseline again, for the machine's drift since its first "
               "verification")
        again = _verify_one(session, loaded, baseline.config, baseline.prediction, outcome,
                            settings, run_dir, env, report, progress,
                            folder=run_dir / "candidates" / "baseline-again")
        outcome.baseline_again = again
        outcome.drift = between(baseline.capacity, again.capacity)
        estimate = max(estimate * 0.5, again.duration_s)
    report(outcome.drift.text())
    return estimate


def _verify_baseline(session: ServingSession, loaded: LoadedSpec, outcome: TuneOutcome,
                     settings: TuneSettings, run_dir: Path, env: Mapping[str, str],
                     report: Report, progress: Progress) -> Candidate:
    """The spec's current config, measured first whatever the model says: what a pick
    is decided against. In the space, it is one of the candidates too."""
    config = current_config(loaded.spec)
    prediction = next((p for p in outcome.predictions if p.config == config), None)
    model = next((f for f in outcome.fits
                  if (f.device, f.instances) == (config.device, config.instances)), None)
    if prediction is None and model is not None:     # outside the space, but modelled
        prediction = predict(model, config, loaded.spec.slo)
    report("the spec's current config is the baseline")
    baseline = _verify_one(session, loaded, config, prediction, outcome, settings, run_dir,
                           env, report, progress)
    outcome.baseline = baseline
    if config in outcome.space:
        outcome.pruned.pop(config, None)
        outcome.candidates.append(baseline)
    return baseline


def _calibrate(outcome: TuneOutcome) -> None:
    outcome.calibration = calibration(
        [(c.prediction.throughput_rps, c.throughput) for c in outcome.measured
         if c.prediction is not None and c.measured is not None])


def _could_win(prediction: Prediction, outcome: TuneOutcome) -> bool:
    best = outcome.decision.best
    return best is None or prediction.throughput_rps * outcome.calibration > best.throughput


def _not_verified_reason(prediction: Prediction, outcome: TuneOutcome) -> str:
    if outcome.budget_exhausted:
        return f"not verified: budget spent (predicted {prediction.throughput_rps:,.0f}/s)"
    scaled = prediction.throughput_rps * outcome.calibration
    return (f"cannot win: predicted {prediction.throughput_rps:,.0f}/s, calibrated "
            f"{scaled:,.0f}/s, under the best measured")


def _verify_one(session: ServingSession, loaded: LoadedSpec, config: Config,
                prediction: Prediction | None, outcome: TuneOutcome, settings: TuneSettings,
                run_dir: Path, env: Mapping[str, str], report: Report,
                progress: Progress, folder: Path | None = None) -> Candidate:
    if folder is None and outcome.baseline is None:
        folder = run_dir / "candidates" / "baseline"
    elif folder is None:
        folder = run_dir / "candidates" / f"{len(outcome.candidates) + 1:02d}"
    started = time.monotonic()
    predicted = f"predicted {prediction.throughput_rps:,.0f}/s" if prediction else \
        "outside the search space: not predicted"
    report(f"verifying {config.label} ({predicted})")
    try:
        server = session.serve(config)
        record = verify_on(server, loaded, config, folder, env, progress)
    except PipelineError as exc:
        session.close()
        report(f"  failed: {exc}")
        return Candidate(config, prediction, folder, time.monotonic() - started, error=str(exc))
    if not server.alive():
        session.close()
    measured = read_candidate(record)
    candidate = Candidate(config, prediction, folder, time.monotonic() - started, measured)
    candidate.over_ceiling = _ceiling_miss(measured, settings)
    shown = measured.capacity.text() if measured.capacity else \
        f"{measured.throughput_rps:,.0f}/s ({measured.throughput_source})" \
        if measured.throughput_rps else "unknown"
    report(f"  measured {shown}, p99 "
           f"{measured.latency_p99_ms or 0:.2f}ms: "
           f"{'meets the SLO' if candidate.meets else '; '.join(candidate.missed())}")
    return candidate


def _ceiling_miss(measured: CandidateRecord, settings: TuneSettings) -> str:
    if settings.max_memory_mb is not None:
        if measured.rss_mb is None:
            return "memory not measured: tune.max_memory cannot be checked"
        if measured.rss_mb > settings.max_memory_mb:
            return (f"memory {measured.rss_mb:,.0f} MiB over tune.max_memory "
                    f"{settings.max_memory_mb:,.0f} MiB")
    if settings.max_gpu_memory_mb is not None and measured.gpu_mb is not None and \
            measured.gpu_mb > settings.max_gpu_memory_mb:
        return (f"GPU memory {measured.gpu_mb:,.0f} MiB over tune.max_gpu_memory "
                f"{settings.max_gpu_memory_mb:,.0f} MiB")
    return ""


def _first_estimate(loaded: LoadedSpec) -> float:
    """Seconds one verification should take, before one was timed: the latency stage's
    warm-up and duration, the knee probes, the capacity search, and a reload."""
    stages = loaded.spec.stages
    saturation = stages.saturation
    probes = max(1, saturation.max_concurrency.bit_length() + 3)
    wanted = saturation.capacity
    # Without a budget the search sizes its own by the rate; about a minute at most rates.
    capacity = (wanted.budget.seconds if wanted.budget else 60.0) if wanted.enabled else 0.0
    return (stages.latency.warmup.seconds + stages.latency.duration.seconds
            + probes * saturation.probe_duration.seconds + capacity + 5.0)
