"""`judge` and `export argo`: a canary against the stable release, judged by the regression
check's paired verdict, and the Argo Rollouts analysis that runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out
from pipeline.errors import JudgeInputError

if TYPE_CHECKING:
    from pipeline.regression.canary import CanaryJudgement


class JudgeCommand(TyperCommand):
    """Arguments that do not parse exit 4, not Click's 2: a canary tool reads 2 as
    inconclusive."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as exc:
            exc.exit_code = JudgeInputError.exit_code
            raise


def _summary(judgement: CanaryJudgement) -> list[str]:
    verdict = judgement.verdict
    lines = [f"{judgement.outcome.upper()}: {judgement.reason}",
             f"{verdict.rounds} rounds side by side (margin {verdict.margin:.0%}, confidence "
             f"{verdict.confidence:.0%}); requests: canary {judgement.requests['canary']}, "
             f"stable {judgement.requests['stable']}"]
    for metric in verdict.metrics:
        shown = "-" if metric.ratio is None else f"{metric.ratio:.3f}"
        low, high = (("-" if v is None else f"{v:.3f}") for v in (metric.ratio_low,
                                                                  metric.ratio_high))
        lines.append(f"  {metric.metric}: canary/stable {shown} [{low}, {high}] "
                     f"{metric.outcome} ({metric.reason})")
    lines += [f"  slo {gate.describe()}" for gate in judgement.slo]
    return lines


def judge_command(
        canary: Annotated[str, typer.Option("--canary", metavar="URL", help=(
            "The canary's HTTP endpoint (Triton's HTTP URL, as `measure --url` takes it).")
        )],
        stable: Annotated[str, typer.Option("--stable", metavar="URL", help=(
            "The stable release's HTTP endpoint, measured in the same rounds."))],
        file: SpecFile = DEFAULT_SPEC,
        env: Annotated[str | None, typer.Option("--env", help=(
            "Environment overlay: its SLO and stages.regression settings apply."))] = None,
        record: Annotated[Path | None, typer.Option("--record", metavar="FILE", help=(
            "Also write the verdict's JSON line to FILE (atomically)."))] = None,
) -> None:
    """Judge a running canary against the stable release: the regression check's paired,
    interleaved verdict over two live URLs, and the spec's SLO on the canary.

    Both endpoints get the same load in interleaved rounds (stages.regression: window,
    watch, margin, tail_allowance, confidence, first_look, look_every, max_rounds; the
    latency stage's concurrency and warm-up); the canary's windows are also held to the
    spec's SLO. A human summary, then one JSON line: verdict, per-metric ratio and
    interval, rounds and requests per side.

    Exit codes: 0 pass (not worse, within the SLO); 1 fail (a regression, the canary
    misses the SLO, or it answers none of a window's requests while its server runs);
    2 inconclusive (neither shown within max_rounds); 3 an endpoint does
    not answer, is not ready, or stopped answering; 4 the spec or the arguments cannot
    work; 130 interrupted.
    """
    from pipeline.errors import SpecError
    from pipeline.measure.sender import LoadSender
    from pipeline.regression.canary import (
        CANARY,
        STABLE,
        attached,
        judge_canary,
        same_endpoint,
        writable,
        write_judgement,
    )
    from pipeline.servers.specs import load_spec
    if record is not None:
        writable(record)
    try:
        loaded = load_spec(file, env)
    except SpecError as exc:
        raise JudgeInputError(str(exc)) from None
    if same_endpoint(canary, stable):
        raise JudgeInputError(f"--canary and --stable are the same endpoint ({canary}): a "
                              "server judged against itself always passes; give the "
                              "canary's and the stable release's own URLs")
    servers = {role: attached(loaded, role, url) for role, url in ((CANARY, canary),
                                                                   (STABLE, stable))}
    stage = loaded.spec.stages.regression
    out().print(f"judging {canary} (canary) against {stable} (stable): up to "
                f"{stage.max_rounds} rounds of {stage.window} each", markup=False)
    sender = LoadSender(loaded.spec.stages.latency.request_timeout.seconds)
    judgement = judge_canary(loaded, servers[CANARY], servers[STABLE], sender,
                             lambda text: None)
    for line in _summary(judgement):
        out().print(line, markup=False)
    body = json.dumps(judgement.to_json())
    if record is not None:
        write_judgement(record, body)
    sys.stdout.write(body + "\n")
    sys.stdout.flush()
    raise typer.Exit(judgement.exit_code)
