"""Run the stages in order; a failure aborts the rest; teardown always runs."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol

from pipeline import __version__, interrupts
from pipeline.context import RunContext
from pipeline.errors import PipelineError, UsageError
from pipeline.preflight import PreflightFailed, Scope, require_ready
from pipeline.provenance import git_state
from pipeline.record import RecordUnwritable, RunRecord, ServerInfo, write_record
from pipeline.release.manifest import iso, utc_now
from pipeline.stage import Stage
from pipeline.stage_result import RunStatus, StageResult, Status
from stages import (
    build,
    latency,
    parity,
    publish,
    readiness,
    regression,
    replay,
    saturation,
    start,
)

# The stages in run order; each module satisfies `Stage` (mypy checks it here).
STAGES: Final[tuple[Stage, ...]] = (build, start, readiness, parity, latency, replay,
                                    saturation, regression, publish)

# Work a later stage begins once an earlier one has passed, to run while the stages between
# do: (the earlier stage's name, the later stage, what it begins). The regression check's
# live release starts while the candidate's parity and latency warm-up run.
HEAD_STARTS: Final[tuple[tuple[str, Stage, Callable[[RunContext], None]], ...]] = (
    (readiness.NAME, regression, regression.head_start),)


class Observer(Protocol):
    def stage_started(self, name: str) -> None: ...
    def stage_finished(self, result: StageResult) -> None: ...


class SilentObserver:
    def stage_started(self, name: str) -> None:
        """Nothing to show."""

    def stage_finished(self, result: StageResult) -> None:
        """Nothing to show."""


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """Keep a second Ctrl-C from cutting teardown short (and leaving a server behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # SIGTERM too: the CLI handles it as Ctrl-C, and one sent after a Ctrl-C (a CI runner
    # cancelling the job) would cut the server's stop short and leave the record unwritten.
    previous = {signum: signal.signal(signum, signal.SIG_IGN)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run_stage(stage: Stage, ctx: RunContext) -> StageResult:
    started = time.monotonic()
    try:
        if interrupts.requested():      # an interrupt swallowed before the stage began
            raise KeyboardInterrupt
        result = stage.run(ctx)
        if interrupts.requested():      # or swallowed inside it: its result does not count
            raise KeyboardInterrupt
    except (KeyboardInterrupt, Exception) as exc:
        if isinstance(exc, Exception) and not interrupts.requested():
            result = _failed(stage.NAME, exc, ctx)
        else:   # an error after an interrupt is what the interrupt broke, not a fault
            result = StageResult(stage.NAME, Status.FAILED, "interrupted (Ctrl-C or SIGTERM)")
            result.duration_s = time.monotonic() - started
            raise _Interrupted(result) from None
    result.duration_s = time.monotonic() - started
    return result


def _failed(name: str, exc: Exception, ctx: RunContext) -> StageResult:
    if isinstance(exc, PipelineError):
        return StageResult(name, Status.FAILED, str(exc), exit_code=exc.exit_code)
    # A model or library fault the stage did not name.
    return StageResult(name, Status.FAILED, _unexpected(name, exc, ctx))


def _unexpected(stage: str, exc: Exception, ctx: RunContext) -> str:
    """One line for a fault no stage foresaw (a model's, a library's); the traceback goes
    to the run folder, for whoever debugs it, and the run ends as a failed stage."""
    log = ctx.run_dir / "errors.log"
    try:
        with log.open("a", encoding="utf-8") as file:
            file.write(f"stage {stage}:\n{''.join(traceback.format_exception(exc))}\n")
        where = f" (traceback: {log})"
    except OSError:
        where = ""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{stage} failed unexpectedly: {type(exc).__name__}: {text}{where}"


class _Interrupted(Exception):
    def __init__(self, result: StageResult) -> None:
        self.result = result


SELECTABLE = ("readiness", "parity", "latency", "replay", "saturation")


def stages_to_run(selected: frozenset[str] | None, attached: bool,
                  stages: Sequence[Stage] = STAGES) -> frozenset[str]:
    """The stages a selection needs: server stages bring build, start and readiness along,
    unless the server is already running (then only readiness)."""
    if selected is None:
        names = {stage.NAME for stage in stages}
        return frozenset(names - {"build", "start"}) if attached else frozenset(names)
    unknown = sorted(selected - set(SELECTABLE))
    if unknown:
        raise UsageError(f"--stages: {', '.join(unknown)} cannot be selected (choose from "
                         f"{', '.join(SELECTABLE)}; build, start and publish follow from them)")
    needed = set(selected) | {"readiness"}
    if not attached:
        needed |= {"build", "start"}
    return frozenset(needed)


GitState = Callable[[Path], dict[str, Any] | None]


def _new_record(ctx: RunContext, command: str, selected: frozenset[str] | None,
                git: GitState) -> RunRecord:
    return RunRecord(
        run_id=ctx.run_id, status=RunStatus.RUNNING, command=command, name=ctx.loaded.spec.name,
        environment=ctx.loaded.environment, spec_file=str(ctx.loaded.path),
        spec_files=list(ctx.loaded.files), spec_digest=ctx.loaded.digest,
        started_at=iso(utc_now()), tool_version=__version__,
        host={"machine": platform.machine(), "python": platform.python_version(),
              "node": platform.node(), "pid": os.getpid()},
        server=ServerInfo(kind=ctx.loaded.spec.server.kind, log="server.log"),
        selected_stages=sorted(selected) if selected is not None else None,
        git=git(ctx.loaded.workspace),
    )


def _finish_record(record: RunRecord, ctx: RunContext, interrupted: bool,
                   duration_s: float, stage_count: int) -> None:
    """The verdict, and what the run produced, once every stage has a result."""
    passed = _passed(ctx.results, stage_count)
    if ctx.model_source is not None:
        record.model = {"source": ctx.model_source.description,
                        "provenance": ctx.model_source.provenance,
                        "sha256": ctx.build.model_digest if ctx.build else None}
    record.status = RunStatus.PASSED if passed else RunStatus.FAILED
    record.finished_at = iso(utc_now())
    record.duration_s = duration_s
    record.release_id = ctx.release_id
    record.promoted_to = ctx.promote_to if passed else None
    record.interrupted = interrupted


def _preflight(ctx: RunContext, chosen: frozenset[str]) -> None:
    """Every problem a later stage would hit, before any stage runs; no record."""
    try:
        require_ready(ctx.loaded, ctx.env, Scope.for_run(
            ctx.loaded, ctx.promote_to, ctx.server is not None, chosen, ctx.promotion is not None))
    except PreflightFailed:
        with contextlib.suppress(OSError):   # the caller's run folder, still empty
            ctx.run_dir.rmdir()
        raise


def run_pipeline(ctx: RunContext, observer: Observer | None = None,
                 command: str = "run", selected: frozenset[str] | None = None,
                 stages: Sequence[Stage] = STAGES, git: GitState = git_state) -> RunRecord:
    """Run `stages` in order and return the run record (also written to the run folder).

    `selected` limits the run to some stages (and what they need); the others are
    recorded as skipped. A server already in `ctx.server` is measured as it is. `git`
    reads the workspace's commit for the record.
    """
    chosen = stages_to_run(selected, attached=ctx.server is not None, stages=stages)
    _preflight(ctx, chosen)
    watcher = observer or SilentObserver()
    started = time.monotonic()
    record = _new_record(ctx, command, selected, git)
    record_path = ctx.run_dir / "record.json"
    failure: str | None = None
    interrupted = False
    early_teardown: tuple[threading.Thread, float] | None = None
    last_server_stage = max((i for i, s in enumerate(stages) if s.USES_SERVER), default=-1)
    try:
        try:
            for index, stage in enumerate(stages):
                result, stopped = _stage_result(stage, ctx, chosen, selected, failure, watcher)
                interrupted = interrupted or stopped
                if result.status is Status.FAILED:
                    failure = (f"aborted: {stage.NAME} "
                               f"{'was interrupted' if interrupted else 'failed'}")
                ctx.results.append(result)
                record.stages.append(result)
                watcher.stage_finished(result)
                write_record(record_path, record)
                if result.status is Status.PASSED:
                    _begin_head_starts(stage.NAME, ctx, chosen)
                if index == last_server_stage:
                    early_teardown = _start_teardown(ctx)
        except KeyboardInterrupt:
            # Between two stages (no stage to catch it): interrupted all the same.
            interrupted = True
            _abort_the_rest(ctx, record, stages)
    finally:
        record.teardown_s = _finish_teardown(ctx, early_teardown)
        if ctx.server is not None and ctx.server.process is not None:
            record.server.exit = ctx.server.process.describe_exit()
        _finish_record(record, ctx, interrupted, time.monotonic() - started, len(stages))
        try:
            write_record(record_path, record)
        except RecordUnwritable:
            if sys.exc_info()[1] is None:   # else the error in flight is the one to report
                raise
    if interrupted:
        raise KeyboardInterrupt
    return record


def _abort_the_rest(ctx: RunContext, record: RunRecord, stages: Sequence[Stage]) -> None:
    """Every stage without a result yet is aborted by the interruption."""
    done = {result.name for result in record.stages}
    for stage in stages:
        if stage.NAME not in done:
            result = StageResult(stage.NAME, Status.ABORTED, "aborted: interrupted")
            ctx.results.append(result)
            record.stages.append(result)


def _stage_result(stage: Stage, ctx: RunContext, chosen: frozenset[str],
                  selected: frozenset[str] | None, failure: str | None,
                  watcher: Observer) -> tuple[StageResult, bool]:
    """The stage's result (skipped, aborted after a failure, or run), and whether it was
    interrupted."""
    if stage.NAME not in chosen:
        reason = "not selected" if selected is not None else "the server was running"
        return StageResult(stage.NAME, Status.SKIPPED, reason), False
    if failure is not None:
        return StageResult(stage.NAME, Status.ABORTED, failure), False
    watcher.stage_started(stage.NAME)
    try:
        return _run_stage(stage, ctx), False
    except _Interrupted as stop:
        return stop.result, True


def _begin_head_starts(passed: str, ctx: RunContext, chosen: frozenset[str]) -> None:
    """Begin what later stages that will run start once `passed` has passed."""
    for earlier, later, begin in HEAD_STARTS:
        if earlier == passed and later.NAME in chosen and not interrupts.requested():
            begin(ctx)


def _start_teardown(ctx: RunContext) -> tuple[threading.Thread, float]:
    """Nothing later needs the server: let its graceful shutdown overlap publish."""
    early_teardown = threading.Thread(target=ctx.resources.close, name="teardown", daemon=True)
    teardown_started = time.monotonic()
    early_teardown.start()
    return early_teardown, teardown_started


def _finish_teardown(ctx: RunContext, early: tuple[threading.Thread, float] | None) -> float:
    """Close what the run started (or wait for the early teardown); its seconds."""
    with _no_interrupts():
        if early is None:
            teardown_started = time.monotonic()
            ctx.resources.close()
        else:
            early[0].join()
            teardown_started = early[1]
    return time.monotonic() - teardown_started


def _passed(results: list[StageResult], stage_count: int) -> bool:
    return all(r.status in (Status.PASSED, Status.SKIPPED) for r in results) and \
        len(results) == stage_count and any(r.status is Status.PASSED for r in results)


def new_run_id(moment: Any = None) -> str:
    import secrets

    moment = moment or utc_now()
    return f"{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
