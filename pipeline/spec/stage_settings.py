"""The settings of each stage in serve.yaml (`stages:`), as pydantic models."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from pipeline import metric_names
from pipeline.spec.strict import StrictModel
from pipeline.spec.units import (
    Duration,
    DurationField,
    Percentage,
    PercentageField,
    RateField,
    SizeField,
    Speed,
    SpeedField,
)

# What the side-by-side regression verdict can watch (pipeline/regression/paired.py).
WatchedSideBySide = Literal["p99_ms", "p95_ms", "p50_ms", "error_rate", "throughput_rps"]
# How many processes send a stage's load (pipeline/measure/distributed/).
LoadWorkers = Annotated[int, Field(ge=1, le=1024)] | Literal["auto"]


def _fraction_within(low: float, high: float, error: str, message: str) -> AfterValidator:
    """A check that a percentage lies in low..high (as fractions)."""
    def check(value: Percentage) -> Percentage:
        if not low <= value.fraction <= high:
            raise PydanticCustomError(error, message, {})
        return value
    checker: Callable[[Percentage], Percentage] = check
    return AfterValidator(checker)


def _positive(what: str) -> AfterValidator:
    """A check that a duration is longer than zero."""
    def check(value: Duration) -> Duration:
        if value.ns <= 0:
            raise PydanticCustomError("duration", f"{what} must be longer than 0s", {})
        return value
    checker: Callable[[Duration], Duration] = check
    return AfterValidator(checker)


class ReadinessStage(StrictModel):
    timeout: DurationField = Field(default=Duration(120_000_000_000, "120s"), description=(
        "Deadline for the server and the model to report ready."))


class ParityStage(StrictModel):
    data: str | None = Field(default=None, description=(
        ".npz of representative inputs, one array per input name, first axis = samples."))
    atol: float = Field(default=1e-5, ge=0, description="Absolute tolerance per element.")
    rtol: float = Field(default=1e-4, ge=0, description="Relative tolerance per element.")
    samples: int = Field(default=16, ge=1, le=4096, description=(
        "Generated inputs when no data is given."))
    seed: int = Field(default=0, description="Seed of the generated inputs.")


ProbeName = Literal["wrong_shape", "wrong_dtype", "missing_input", "batch_over_max",
                    "unknown_model", "oversized_body", "declared_huge_shape"]
ALL_PROBES: tuple[ProbeName, ...] = ("wrong_shape", "wrong_dtype", "missing_input",
                                     "batch_over_max", "unknown_model", "oversized_body",
                                     "declared_huge_shape")
# Sizes of the two probes that test the server's limits; bounded so that a server that
# allocates whatever it is told still cannot endanger the machine.
OVERSIZED_BODY_BYTES = 64 * 2**20
DECLARED_HUGE_BYTES = 256 * 2**20


class FailureStage(StrictModel):
    enabled: bool = Field(default=True, description="Send the bad-input probes.")
    probes: list[ProbeName] = Field(default_factory=lambda: list(ALL_PROBES), description=(
        "Which probes: each must get a 4xx and leave the server ready."))


class StabilitySpec(StrictModel):
    windows: int = Field(default=3, ge=1, le=20, description=(
        "Fewest windows before a verdict; a clear verdict stops after this many."))
    tolerance: PercentageField = Field(default=Percentage(0.1, "10%"), description=(
        "Largest (max - min) / mean of throughput and of p99 across all windows for the "
        "record to say stabilised."))
    max_windows: int = Field(default=6, ge=1, le=50, description=(
        "The cap: the duration is split into this many windows; a latency gate still "
        "undecided after the last one is inconclusive."))


class VerdictSpec(StrictModel):
    confidence: Annotated[PercentageField, _fraction_within(
        0.5, 0.9999, "confidence", "confidence must be in 50%..99.99%")] = Field(
        default=Percentage(0.95, "95%"), description=(
            "Coverage of each percentile gate's confidence bound, over all its looks."))
    accept_inconclusive: bool = Field(default=False, description=(
        "Let an inconclusive latency gate pass the stage (still reported as inconclusive). "
        "Off: inconclusive blocks promotion like a failure."))


DataOrder = Literal["in_order", "sampled"]
DATA_DESCRIPTION = (
    "A file of real requests sent instead of generated inputs, relative to the spec: .npz "
    "(one array per input name, the first axis the items) or .jsonl (one item per line: "
    "an object of the inputs by name, each a nested list of the item's shape without the "
    "batch dimension). A request holds batch_size consecutive items of one shape. Checked "
    "at validate against model.inputs (names, dtypes, declared dims; -1 takes any size); "
    "its variable-dimension sizes are the latency report's size buckets.")
DATA_ORDER_DESCRIPTION = (
    "in_order: the file's requests one after another, from the first again after the "
    "last; sampled: drawn from the file at random with replacement (seeded by "
    "stages.parity.seed, the same every run).")


class LatencyStage(StrictModel):
    data: str | None = Field(default=None, description=DATA_DESCRIPTION)
    data_order: DataOrder = Field(default="in_order", description=DATA_ORDER_DESCRIPTION)
    concurrency: int = Field(default=8, ge=1, le=4096, description=(
        "Requests in flight during the window (closed loop)."))
    warmup: DurationField = Field(default=Duration(5_000_000_000, "5s"), description=(
        "Traffic sent and discarded before the window."))
    duration: Annotated[DurationField, _positive("the measurement")] = Field(
        default=Duration(20_000_000_000, "20s"), description=(
        "Measurement time after the warm-up, split into stability.max_windows windows; a "
        "clear verdict stops earlier. A window is lengthened to hold window_requests at the "
        "warm-up's rate, up to max_duration in all."))
    window_requests: int = Field(default=2000, ge=1, description=(
        "Requests a window should hold: a percentile's bound needs a number of requests, "
        "not of seconds (closed-loop requests share stalls, so a slow server's short "
        "windows never decide). At the warm-up's rate this sets a window's length when it "
        "is longer than duration / stability.max_windows."))
    max_duration: DurationField = Field(default=Duration(60_000_000_000, "60s"), description=(
        "Most measurement time after the warm-up however slow the server (the cap on "
        "windows lengthened for window_requests; never below duration)."))
    batch_size: int = Field(default=1, ge=1, description="Items per request.")
    request_timeout: DurationField = Field(default=Duration(10_000_000_000, "10s"),
                                           description="Client timeout of every request.")
    max_memory_growth: SizeField | Literal[False] | None = Field(
        default=None, description=(
            "Gate: how much the server's process-tree RSS may grow from right after the "
            "warm-up to the end of the windows (gate latency.memory_growth_total). Unset: "
            "64MiB for Triton, 256MiB for TorchServe (its JVM grows its heap while it "
            "warms); false turns the gate off."))
    memory_growth_rate: SizeField | Literal[False] | None = Field(
        default=None, description=(
            "Gate latency.memory_growth: the most the server's RSS (TorchServe: without its "
            "JVM) may grow per 1,000 requests, the slope of RSS sampled through the windows, "
            "decided on its bound. Unset: 1MiB (about 1 KiB a request); false turns it off."))
    protocol: Literal["http", "grpc"] = Field(default="http", description=(
        "Triton: the load can go over gRPC too; TorchServe: http."))
    stability: StabilitySpec = Field(default_factory=StabilitySpec, description=(
        "Windows repeat until every latency gate is decided (or the cap)."))
    verdict: VerdictSpec = Field(default_factory=VerdictSpec, description=(
        "How percentile gates are decided: confidence, and whether inconclusive may pass."))
    workers: LoadWorkers = Field(default=1, description=(
        "Load worker processes sending this stage's load (auto: one per spare core); more "
        "than 1 runs them on Ray (pip install 'serve-pipeline[ray]'): a local Ray started "
        "for the run, or the cluster at RAY_ADDRESS / --ray-address. The open-loop schedule "
        "is interleaved over the workers, the closed loop's concurrency split among them."))


class BurstSpec(StrictModel):
    rate: RateField = Field(description="Arrival rate during the burst (open loop).")
    duration: DurationField = Field(description="How long the burst lasts.")
    base_rate: RateField | None = Field(default=None, description=(
        "Rate before and after the burst (default: a tenth of the burst rate)."))
    arrivals: Literal["constant", "poisson"] = Field(default="constant", description=(
        "Evenly spaced requests, or Poisson arrivals at the same mean rate."))
    settle: DurationField = Field(default=Duration(2_000_000_000, "2s"), description=(
        "How long the base rate runs before the burst (and at least as long after it)."))


class CapacitySpec(StrictModel):
    enabled: bool = Field(default=True, description=(
        "After the closed-loop ramp, search the highest open-loop arrival rate that meets "
        "slo.p99 and slo.error_rate without a growing backlog (capacity_rps)."))
    budget: DurationField | None = Field(default=None, description=(
        "Time the rate search may spend, steps, holds and waits for a backlog to drain "
        "included; it starts no step or hold that could overrun it. Default: sized by the "
        "rate, room for the hold at slo.min_throughput, four steps and two holds (at least "
        "12s). No rate held by then: the capacity is unknown (the gate inconclusive)."))
    step: DurationField = Field(default=Duration(1_000_000_000, "1s"), description=(
        "Length of each rate step (longer where the rate is too low for 100 samples). "
        "Requests of a step time out after 4 x slo.p99, and a step ends by then."))
    hold: DurationField | None = Field(default=None, description=(
        "Length of a hold's segments (default: 3 x step; longer where the rate is too "
        "low for 100 samples in each of its 7 blocks); a missed hold holds again at a "
        "rate lower by twice the resolution (doubling with each further miss), while the "
        "budget lasts."))
    span: DurationField = Field(default=Duration(30_000_000_000, "30s"), description=(
        "A hold passes only once it has lasted this long: a busy machine slows a server in "
        "episodes that a few seconds may miss (not waited for under half the knee's "
        "throughput, where a server at half speed still keeps up). The span is measured "
        "in two halves, and a hold that misses fails after the first. Undecided, a hold "
        "measures on by `hold` at a time, up to four looks in all. 30s: simulated, a "
        "hold at 1.1 x the capacity passes 2-2.5% of the time with it, 6-9% with 20s."))
    start: Annotated[PercentageField, _fraction_within(
        0.05, 1.0, "start", "start must be in 5%..100%")] = Field(
        default=Percentage(0.5, "50%"), description=(
        "First rate as a share of the closed-loop knee's throughput (there the server is "
        "never idle: an open loop at 100% only builds a queue)."))
    resolution: PercentageField = Field(default=Percentage(0.05, "5%"), description=(
        "Stop bisecting once the failing rate is within this much of the passing one."))
    first_hold: Annotated[PercentageField, _fraction_within(
        0.1, 1.0, "first_hold", "first_hold must be in 10%..100%")] = Field(
        default=Percentage(0.85, "85%"), description=(
        "The first hold's rate as a share of the highest rate a short step passed. Steps "
        "of a second overestimate what holds for the span on a busy machine (2 cores, a "
        "neighbour on one: the rates that held were 67-86% of the steps' bracket), and "
        "each hold that misses costs seconds. Simulated, 85% also lands a slow model's "
        "figure within 70-100% of its limit more often (98% of trials, 91% at 100%): fewer "
        "misses, so fewer steps down. 100%: hold the bracket itself first."))
    accept_inconclusive: bool = Field(default=False, description=(
        "Let an inconclusive saturation.capacity_rps gate (no rate confirmed within the "
        "budget) pass the stage, still reported as inconclusive. Off: it blocks promotion."))

    @property
    def hold_seconds(self) -> float:
        return self.hold.seconds if self.hold is not None else 3 * self.step.seconds


class SaturationStage(StrictModel):
    enabled: bool = Field(default=True, description="Run the saturation stage.")
    data: str | None = Field(default=None, description=(
        "As stages.latency.data, for the saturation stage's load; unset, it sends what the "
        "latency stage sends."))
    data_order: DataOrder | None = Field(default=None, description=(
        "As stages.latency.data_order (default: the latency stage's)."))
    max_concurrency: int = Field(default=64, ge=1, le=4096, description=(
        "Highest concurrency the knee search may try."))
    probe_duration: DurationField = Field(default=Duration(3_000_000_000, "3s"), description=(
        "Length of each probe window."))
    burst: BurstSpec | None = Field(default=None, description=(
        "A low -> high -> low rate test; reports p99 during the burst and the drain time."))
    capacity: CapacitySpec = Field(default_factory=CapacitySpec, description=(
        "The sustainable arrival rate at the SLO, bisected in open loop."))
    workers: LoadWorkers = Field(default=1, description=(
        "Load worker processes sending this stage's load (auto: one per spare core); more "
        "than 1 runs them on Ray (pip install 'serve-pipeline[ray]'): a local Ray started "
        "for the run, or the cluster at RAY_ADDRESS / --ray-address. The open-loop schedule "
        "is interleaved over the workers, the closed loop's concurrency split among them."))


class RegressionStage(StrictModel):
    gate: bool = Field(default=False, description=(
        "Fail the publish (nothing is released or promoted) when a metric below is worse "
        "than in the release live in the target environment by more than the tolerance."))
    tolerance: PercentageField = Field(default=Percentage(0.1, "10%"), description=(
        "How much worse a metric may get before it counts as a regression."))
    metrics: list[str] = Field(default_factory=lambda: [
        "latency.p99_ms", "latency.p95_ms", "latency.throughput_rps", "latency.error_rate",
        "saturation.knee_throughput_rps"], description=(
        "stage.metric names that the gate watches (the report compares all of them); "
        "an unknown name is a spec error. Known: " + ", ".join(sorted(metric_names.WATCHABLE))
        + "."))
    against: Literal["side_by_side", "recorded"] = Field(default="side_by_side", description=(
        "What decides the gate. side_by_side: the live release is served from the store "
        "next to the candidate and both are measured in interleaved rounds (A B B A ...), "
        "judged by a paired test against `margin`; the recorded comparison stays as "
        "information. recorded: this run's numbers against the live release's recorded "
        "ones (another day, perhaps another machine), with `tolerance`."))
    margin: PercentageField = Field(default=Percentage(0.1, "10%"), description=(
        "Side by side: how much worse (candidate / live) a watched metric may be; the "
        "verdict is no regression only when the ratio's confidence interval lies within."))
    watch: list[WatchedSideBySide] = Field(
        default_factory=lambda: list(typing.get_args(WatchedSideBySide)),
        min_length=1, description=(
            "Side by side: the metrics the paired verdict decides on, per round at the "
            "latency stage's concurrency."))
    tail_allowance: DurationField | None = Field(default=None, description=(
        "Side by side: a tail percentile (p95, p99) this much higher than the live release's "
        "in absolute terms, on top of `margin`, is never a regression: the candidate's may "
        "reach live x (1 + margin) + tail_allowance. On a shared machine the top few percent "
        "of requests are set by scheduling delays of a few ms that no release causes, so a "
        "ratio alone cannot be decided there (a 3 ms p99 moves by 10-20% between identical "
        "servers). Default: 2% of slo.p99 (1ms for a 50ms SLO); 0ms judges the ratio alone. "
        "p50 and throughput are judged on `margin` only."))
    error_rate_margin: PercentageField = Field(default=Percentage(0.001, "0.1%"), description=(
        "Side by side: an error rate this much higher in absolute terms is never a "
        "regression (0 errors against 1 in 8,000 is not infinitely worse)."))
    confidence: Annotated[PercentageField, _fraction_within(
        0.5, 0.9999, "confidence", "confidence must be in 50%..99.99%")] = Field(
        default=Percentage(0.95, "95%"), description=(
            "Side by side: coverage of each ratio's interval, over all looks together."))
    window: DurationField = Field(default=Duration(250_000_000, "250ms"), description=(
        "Side by side: each server's window per round. Short windows keep a round's two "
        "windows close in time, so they share the machine's state: on a busy 2-core "
        "machine 64 rounds of 250ms bounded the ratio ~2.5x tighter than 24 of 1s."))
    first_look: int = Field(default=16, ge=6, le=400, description=(
        "Side by side: rounds before the verdict is first looked at."))
    look_every: int = Field(default=16, ge=1, le=400, description=(
        "Side by side: rounds between later looks."))
    max_rounds: int = Field(default=160, ge=6, le=1000, description=(
        "Side by side: the cap; still undecided then, the verdict is inconclusive. 160: on "
        "a busy 2-core machine a round's p50 ratio deviates by ~0.2 (log), and a candidate "
        "3% slower needs up to 160 rounds to be cleared of a 10% margin (refused in 5.5% "
        "of simulated runs, 19% with 96); clear cases still stop early (A/A at 48)."))


class ReplayStage(StrictModel):
    log: str = Field(description=(
        "A request log to replay, relative to the spec: JSON lines, one request a line in "
        "arrival order, {\"t\": <seconds, or an ISO 8601 time with zone>, \"inputs\": "
        "{<input>: <nested list of one item>}}; inputs may be left out of every line, then "
        "the payloads are `data`'s. Checked at validate against model.inputs (names, "
        "dtypes, declared dims, t never decreasing), naming file:line."))
    speed: SpeedField = Field(default=Speed(1.0, "1.0x"), description=(
        "How much faster than logged: each request is sent at its t minus the first t, "
        "divided by the speed, from the replay's start (open loop)."))
    warmup: DurationField = Field(default=Duration(1_000_000_000, "1s"), description=(
        "Traffic sent and discarded before the replay (closed loop at the latency stage's "
        "concurrency, the replay's payloads), so that a cold server or client is not "
        "judged; 0s for none."))
    data: str | None = Field(default=None, description=(
        "Where the log has no inputs: the data file whose requests are sent, in file "
        "order, one per logged request (from the first again after the last); as "
        "stages.latency.data, which it defaults to. Neither: the latency stage's inputs."))
    workers: LoadWorkers = Field(default=1, description=(
        "Load worker processes sending the replay (auto: one per spare core); more than 1 "
        "runs them on Ray, as stages.latency.workers. The logged requests are interleaved "
        "over the workers, each sent at its own logged instant."))
    max_duration: DurationField = Field(default=Duration(600_000_000_000, "10min"),
                                        description=(
        "The longest replay the spec allows (the log's span divided by the speed); a "
        "longer one is a spec error at validate."))


LoadStage = Literal["latency", "saturation"]


class StagesSpec(StrictModel):
    readiness: ReadinessStage = Field(default_factory=ReadinessStage,
                                      description="Waiting for the server to be ready.")
    parity: ParityStage = Field(default_factory=ParityStage,
                                description="Served outputs against the source model.")
    failure: FailureStage = Field(default_factory=FailureStage,
                                  description="Bad-input probes (part of the parity stage).")
    latency: LatencyStage = Field(default_factory=LatencyStage,
                                  description="Fixed-concurrency latency window.")
    saturation: SaturationStage = Field(default_factory=SaturationStage,
                                        description="Knee search and burst.")
    replay: ReplayStage | None = Field(default=None, description=(
        "Replay a request log: its arrival times and payloads, judged by the SLO (gates "
        "replay.p99, replay.p95, replay.p50, replay.error_rate). Unset: no replay stage."))
    regression: RegressionStage = Field(default_factory=RegressionStage, description=(
        "Comparison with the release live in the target environment (in publish)."))

    def request_data(self, stage: LoadStage) -> tuple[str | None, DataOrder]:
        """The data file `stage` sends and in which order (saturation: the latency stage's
        where it names none)."""
        latency = (self.latency.data, self.latency.data_order)
        if stage == "latency":
            return latency
        if self.saturation.data is None:
            return latency[0], self.saturation.data_order or latency[1]
        return self.saturation.data, self.saturation.data_order or latency[1]
