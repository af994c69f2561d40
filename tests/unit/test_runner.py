"""The runner's loop, driven by fake stages (the real ones run in tests/integration):
order, a failure aborts the rest with the reason, skipped stages, an error becomes a failed
result with its exit code, Ctrl-C tears down and aborts what is left."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.context import RunContext
from pipeline.errors import StoreError, UsageError
from pipeline.record import RunRecord
from pipeline.runner import STAGES, run_pipeline, stages_to_run
from pipeline.servers.specs import load_spec
from pipeline.stage import Stage
from pipeline.stage_result import RunStatus, StageResult, Status


def no_git(folder: Path) -> None:
    """The workspace is no git repository (reading one would start git)."""


@dataclass(frozen=True)
class FakeStage:
    """A stage that records that it ran, then does what `act` does."""

    NAME: str
    act: Callable[[RunContext], StageResult]
    log: list[str]
    USES_SERVER: bool = False

    def run(self, ctx: RunContext) -> StageResult:
        self.log.append(self.NAME)
        return self.act(ctx)


def passes(name: str) -> Callable[[RunContext], StageResult]:
    return lambda ctx: StageResult(name, Status.PASSED, "ok", metrics={"n": 1.0})


def raises(error: BaseException) -> Callable[[RunContext], StageResult]:
    def act(ctx: RunContext) -> StageResult:
        raise error
    return act


class Teardown:
    """Stands for a server on the run's ExitStack: counts how often it was closed."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def ctx(project: Path, tmp_path: Path) -> RunContext:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return RunContext(loaded=load_spec(project / "serve.yaml"), run_id="20260101-000000-abcdef",
                      run_dir=run_dir, env={}, resources=ExitStack())


def stages_of(log: list[str], **acts: Callable[[RunContext], StageResult]) -> list[Stage]:
    return [FakeStage(name, act, log) for name, act in acts.items()]


def test_the_real_stages_satisfy_the_contract_in_order() -> None:
    assert [stage.NAME for stage in STAGES] == [
        "build", "start", "readiness", "parity", "latency", "replay", "saturation",
        "regression", "publish"]
    assert [stage.NAME for stage in STAGES if stage.USES_SERVER] == [
        "start", "readiness", "parity", "latency", "replay", "saturation", "regression"]


def test_stages_run_in_order_and_the_record_says_so(ctx: RunContext) -> None:
    log: list[str] = []
    stages = stages_of(log, first=passes("first"), second=passes("second"),
                       third=passes("third"))
    record = run_pipeline(ctx, git=no_git, stages=stages)
    assert log == ["first", "second", "third"]
    assert record.status is RunStatus.PASSED and [s.name for s in record.stages] == log
    assert all(s.status is Status.PASSED and s.exit_code is None for s in record.stages)
    stored = RunRecord.from_json(json.loads((ctx.run_dir / "record.json").read_text()))
    assert [s.name for s in stored.stages] == log and stored.status == "passed"


def test_a_failure_aborts_the_rest_with_the_reason(ctx: RunContext) -> None:
    log: list[str] = []
    failing = lambda ctx: StageResult("second", Status.FAILED, "p99 too high")  # noqa: E731
    stages = stages_of(log, first=passes("first"), second=failing, third=passes("third"))
    record = run_pipeline(ctx, git=no_git, stages=stages)
    assert log == ["first", "second"] and record.status == "failed"
    third = record.stages[2]
    assert third.status is Status.ABORTED and third.message == "aborted: second failed"
    assert record.first_failed_stage() is record.stages[1]


def test_an_error_becomes_a_failed_result_with_its_exit_code(ctx: RunContext) -> None:
    log: list[str] = []
    stages = stages_of(log, first=raises(StoreError("the store is gone")),
                       second=passes("second"))
    record = run_pipeline(ctx, git=no_git, stages=stages)
    first = record.stages[0]
    assert first.status is Status.FAILED and first.message == "the store is gone"
    assert first.exit_code == StoreError.exit_code == 3
    assert record.stages[1].status is Status.ABORTED and log == ["first"]
    body = json.loads((ctx.run_dir / "record.json").read_text())
    assert body["stages"][0]["details"] == {"exit_code": first.exit_code}
    assert "exit_code" not in body["stages"][0]
    assert RunRecord.from_json(body).stages[0].exit_code == first.exit_code


def test_an_unforeseen_exception_is_a_one_line_failure_with_its_traceback_kept(
        ctx: RunContext) -> None:
    """A model's or a library's fault no stage named (a MemoryError allocating inputs, a
    parser's own exception): one line, the rest aborted, the traceback in the run folder."""
    log: list[str] = []
    stages = stages_of(log, first=raises(MemoryError("Unable to allocate 114. PiB\nmore")),
                       second=passes("second"))
    record = run_pipeline(ctx, git=no_git, stages=stages)
    first = record.stages[0]
    assert first.status is Status.FAILED
    assert first.message.startswith("first failed unexpectedly: MemoryError: Unable to "
                                    "allocate 114. PiB (traceback: ")
    assert "\n" not in first.message
    assert "Traceback" in (ctx.run_dir / "errors.log").read_text()
    assert record.stages[1].status is Status.ABORTED and log == ["first"]


def test_stages_not_selected_are_skipped_with_why(ctx: RunContext) -> None:
    log: list[str] = []
    stages = stages_of(log, build=passes("build"), start=passes("start"),
                       readiness=passes("readiness"), latency=passes("latency"),
                       publish=passes("publish"))
    record = run_pipeline(ctx, git=no_git, stages=stages, selected=frozenset({"latency"}))
    assert log == ["build", "start", "readiness", "latency"]
    publish = record.stage("publish")
    assert publish is not None and publish.status is Status.SKIPPED
    assert publish.message == "not selected" and record.status == "passed"
    assert record.selected_stages == ["latency"]


def test_a_bad_selection_is_refused_before_anything_runs() -> None:
    with pytest.raises(UsageError, match="--stages: publish cannot be selected"):
        stages_to_run(frozenset({"publish"}), attached=False)


def test_ctrl_c_in_a_stage_tears_down_and_aborts_the_rest(ctx: RunContext) -> None:
    log: list[str] = []
    teardown = Teardown()
    ctx.resources.callback(teardown.close)
    stages = stages_of(log, first=passes("first"), second=raises(KeyboardInterrupt()),
                       third=passes("third"))
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(ctx, git=no_git, stages=stages)
    assert teardown.closed == 1 and log == ["first", "second"]
    record = RunRecord.from_json(json.loads((ctx.run_dir / "record.json").read_text()))
    assert record.interrupted and record.status == "failed"
    assert [(s.status, s.message) for s in record.stages[1:]] == [
        (Status.FAILED, "interrupted (Ctrl-C or SIGTERM)"),
        (Status.ABORTED, "aborted: second was interrupted")]


def test_an_interrupt_a_stage_swallowed_still_stops_the_run(ctx: RunContext) -> None:
    """The handler's KeyboardInterrupt can be lost (raised inside a finalizer or an asyncio
    task): the stage then returns, and only the flag the handler set says what happened."""
    from pipeline import interrupts

    def swallowed(ctx: RunContext) -> StageResult:
        interrupts.request()
        return StageResult("second", Status.PASSED, "measured to the end")

    log: list[str] = []
    stages = stages_of(log, first=passes("first"), second=swallowed, third=passes("third"))
    try:
        with pytest.raises(KeyboardInterrupt):
            run_pipeline(ctx, git=no_git, stages=stages)
    finally:
        interrupts.clear()
    assert log == ["first", "second"]                    # third (publish, say) never ran
    record = RunRecord.from_json(json.loads((ctx.run_dir / "record.json").read_text()))
    assert record.interrupted and record.status == "failed"
    assert [(s.status, s.message) for s in record.stages[1:]] == [
        (Status.FAILED, "interrupted (Ctrl-C or SIGTERM)"),
        (Status.ABORTED, "aborted: second was interrupted")]


def test_teardown_starts_after_the_last_server_stage(ctx: RunContext) -> None:
    log: list[str] = []
    teardown = Teardown()
    ctx.resources.callback(teardown.close)

    def after_teardown(ctx: RunContext) -> StageResult:
        # The early teardown runs on a thread; the runner joins it at the end.
        return StageResult("publish", Status.PASSED, "published")

    stages: list[Stage] = [FakeStage("serve", passes("serve"), log, USES_SERVER=True),
                           FakeStage("publish", after_teardown, log)]
    record = run_pipeline(ctx, git=no_git, stages=stages)
    assert teardown.closed == 1 and record.status == "passed"
    assert record.teardown_s is not None and record.teardown_s >= 0


def test_a_run_with_nothing_passed_is_not_passed(ctx: RunContext) -> None:
    log: list[str] = []
    skipped = lambda ctx: StageResult("only", Status.SKIPPED, "disabled")  # noqa: E731
    record = run_pipeline(ctx, git=no_git, stages=stages_of(log, only=skipped))
    assert record.status == "failed" and log == ["only"]
