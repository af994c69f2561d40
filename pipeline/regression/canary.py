"""The canary judge: a canary and the stable release, both already serving (live URLs),
measured side by side exactly as the regression check measures a candidate against the live
release (side_by_side.py: the same interleaved rounds, the same paired verdict, the spec's
`stages.regression` settings), and the canary's own windows held to the spec's SLO.

So the gate before a deployment and the gate on a canary are one definition of "not worse".
The verdict has three outcomes, as canary tools expect: pass (not worse, and within the
SLO), fail (a regression, or the canary misses the SLO) and inconclusive (neither shown
within the cap of rounds).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pipeline.errors import EndpointError, JudgeInputError, ServerError, UsageError
from pipeline.gates.latency import judge_windows, latency_gates
from pipeline.measure.load_result import LoadResult, merge_windows
from pipeline.measure.sender import LoadSender
from pipeline.measure.targets import spec_target
from pipeline.regression.paired import PairedVerdict
from pipeline.regression.settings import paired_settings
from pipeline.regression.side_by_side import (
    CANDIDATE,
    LIVE,
    ServerDied,
    ServerHung,
    SideBySideLoad,
    measure_side_by_side,
)
from pipeline.servers import server_kind
from pipeline.servers.base import ModelServer, RunningEndpoints
from pipeline.spec.models import LoadedSpec, Spec
from pipeline.stage_result import Gate, GateOutcome

CanaryOutcome = Literal["pass", "fail", "inconclusive"]
EXIT_CODES: Final[dict[CanaryOutcome, int]] = {"pass": 0, "fail": 1, "inconclusive": 2}
CANARY, STABLE = "canary", "stable"
# The side-by-side measurement names its two servers candidate and live.
ROLE = {CANDIDATE: CANARY, LIVE: STABLE}


@dataclass(frozen=True)
class CanaryJudgement:
    outcome: CanaryOutcome
    reason: str
    verdict: PairedVerdict
    slo: tuple[Gate, ...]
    requests: Mapping[str, int]          # by role: canary, stable

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.outcome, "reason": self.reason,
            "regression": self.verdict.outcome, "rounds": self.verdict.rounds,
            "margin": self.verdict.margin, "confidence": self.verdict.confidence,
            "requests": dict(self.requests),
            "metrics": {metric.metric: {"outcome": metric.outcome, "ratio": metric.ratio,
                                        "interval": [metric.ratio_low, metric.ratio_high],
                                        "limit": metric.limit}
                        for metric in self.verdict.metrics},
            "slo": {gate.name: {"outcome": str(gate.outcome), "observed": gate.observed,
                                "threshold": gate.threshold}
                    for gate in self.slo},
        }


def checked_url(role: str, url: str) -> str:
    """`url` when it is http://HOST[:PORT][/PATH] (the clients speak plain HTTP);
    JudgeInputError otherwise."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise JudgeInputError(f"--{role} {url}: {exc}") from None
    if parts.scheme != "http" or not parts.hostname:
        raise JudgeInputError(f"--{role} {url}: expected http://HOST[:PORT] (the server's "
                              "HTTP endpoint, as `measure --url` takes it)")
    return url


def same_endpoint(first: str, second: str) -> bool:
    """Whether two URLs reach one server (scheme, host and port alike; localhost is
    127.0.0.1; a path does not make another server)."""
    def where(url: str) -> tuple[str, str, int | None]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return url, "", None
        host = (parts.hostname or "").lower()
        host = "127.0.0.1" if host in ("localhost", "::1") else host
        return parts.scheme, host, port or (80 if parts.scheme == "http" else None)
    return where(first) == where(second)


def attached(loaded: LoadedSpec, role: str, url: str) -> ModelServer:
    """The server of the spec's kind at `url`, waited for until ready (the spec's readiness
    timeout); EndpointError when it does not answer or does not become ready."""
    try:
        server = server_kind(loaded.spec.server.kind).attach(
            loaded, RunningEndpoints(checked_url(role, url)))
    except UsageError as exc:
        raise JudgeInputError(f"--{role} {url}: {exc}; judge takes each server's HTTP URL "
                              "alone") from None
    if not server.alive():
        raise EndpointError(f"the {role} at {url} does not answer")
    try:
        server.wait_ready(loaded.spec.stages.readiness.timeout.seconds)
    except ServerError as exc:
        raise EndpointError(f"the {role} at {url} is not ready: {exc}") from None
    return server


def canary_slo_gates(spec: Spec, windows: list[LoadResult], window_s: float) -> list[Gate]:
    """The latency stage's SLO gates over the canary's windows, judged once at the latency
    stage's confidence. Not the server-queue mean: it comes from a server's own counters,
    which an endpoint behind a load balancer does not give for these windows."""
    slo = spec.slo.model_copy(update={"queue_mean": None})
    judged = spec.model_copy(update={"slo": slo})
    alpha = 1 - spec.stages.latency.verdict.confidence.fraction
    judgement = judge_windows(judged, windows, merge_windows(windows), window_s, alpha)
    return latency_gates(judged, judgement, windows, window_s, {})


def decide(regression: str, slo: list[Gate], accept_inconclusive: bool
           ) -> tuple[CanaryOutcome, str]:
    """A regression or a missed SLO fails; pass needs no regression shown AND every SLO gate
    passed (an undecided one counts as the latency stage counts it: accepted only when the
    spec accepts it and its observed value is within the threshold)."""
    missed = [gate for gate in slo if gate.outcome is GateOutcome.FAILED or (
        gate.outcome is GateOutcome.INCONCLUSIVE and accept_inconclusive
        and gate.worse_on_observed())]
    undecided = [gate for gate in slo if gate.outcome is GateOutcome.INCONCLUSIVE
                 and not accept_inconclusive]
    if regression == "regression":
        return "fail", "the canary is worse than the stable release beyond the margin"
    if missed:
        return "fail", "the canary misses the SLO: " + "; ".join(g.describe() for g in missed)
    if regression != "no_regression":
        return "inconclusive", "the rounds showed neither a regression nor its absence"
    if undecided:
        return "inconclusive", ("the canary's windows do not decide the SLO: "
                                + "; ".join(g.describe() for g in undecided))
    return "pass", "not worse than the stable release, and within the SLO"


def judge_canary(loaded: LoadedSpec, canary: ModelServer, stable: ModelServer,
                 sender: LoadSender, announce: Callable[[str], None]) -> CanaryJudgement:
    """Measure `canary` against `stable`, both ready; EndpointError when one stops
    answering, JudgeInputError when the spec's request cannot be sent to them."""
    spec = loaded.spec
    stage, latency = spec.stages.regression, spec.stages.latency
    settings = paired_settings(stage, spec.slo.p99.ms)
    load = SideBySideLoad(sender, latency.concurrency, latency.warmup.seconds,
                          stage.window.seconds)
    servers = {CANDIDATE: canary, LIVE: stable}
    try:
        targets = {who: spec_target(loaded, server) for who, server in servers.items()}
    except ServerError as exc:
        raise JudgeInputError(str(exc)) from None
    try:
        side = measure_side_by_side(load, servers, targets, settings, announce)
    except ServerHung as exc:
        if exc.who != CANDIDATE:
            raise EndpointError(f"the {ROLE[exc.who]} stopped answering: {exc.reason}"
                                ) from None
        return hung_canary(exc, settings.margin, settings.confidence)
    except ServerDied as exc:
        raise EndpointError(f"the {ROLE[exc.who]} stopped answering: "
                            f"{str(exc).split(': ', 1)[-1]}") from None
    slo = canary_slo_gates(spec, side.results[CANDIDATE], load.window_s)
    outcome, reason = decide(side.verdict.outcome, slo, latency.verdict.accept_inconclusive)
    requests = {ROLE[who]: sum(result.requests for result in results)
                for who, results in side.results.items()}
    return CanaryJudgement(outcome, reason, side.verdict, tuple(slo), requests)


def hung_canary(hung: ServerHung, margin: float, confidence: float) -> CanaryJudgement:
    """A canary that answered none of a window's requests while its server still runs (a
    model that hangs behind a healthy front end) fails: it is the canary's fault, and a
    retry (exit 3) would only wait for it again. The paired verdict was not reached."""
    verdict = PairedVerdict("inconclusive", (), hung.rounds, 0, margin, confidence)
    return CanaryJudgement("fail", f"the canary hangs: it {hung.reason}", verdict, (),
                           {ROLE[who]: count for who, count in hung.requests.items()})


def writable(path: Path) -> None:
    """Refuse a --record FILE that cannot be written before anything is measured."""
    if path.is_dir() or not path.parent.is_dir():
        raise JudgeInputError(f"--record {path}: not a file in an existing folder")


def write_judgement(path: Path, body: str) -> None:
    """`body` and a newline into `path`, whole or not at all (a temporary file beside it,
    renamed over it)."""
    temp = path.with_name(f".{path.name}.tmp")
    try:
        temp.write_text(body + "\n", encoding="utf-8")
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise JudgeInputError(f"--record {path}: {exc.strerror or exc}") from None
