"""A record left `running` by a process that is gone reads as abandoned, with why."""

from __future__ import annotations

from rich.console import Console

from pipeline.abandoned_runs import abandoned_reason, mark_if_abandoned
from pipeline.record import RunRecord
from pipeline.report.markdown import render_markdown
from pipeline.report.terminal import render_terminal
from pipeline.stage_result import RunStatus, StageResult, Status

STARTED = "2026-12-07T05:00:00.000000Z"
RUN_START = 1796619600.0   # STARTED as seconds since the epoch


def running_record(node: str = "here", pid: object = 4242) -> RunRecord:
    return RunRecord(run_id="20261207-050000-abcdef", status=RunStatus.RUNNING,
                     started_at=STARTED, host={"node": node, "pid": pid},
                     stages=[StageResult(name="build", status=Status.PASSED)])


def test_a_gone_process_abandons_its_record() -> None:
    reason = abandoned_reason(running_record(), node="here", started=lambda pid: None)
    assert reason is not None
    assert "pid 4242 on here" in reason and "after 1 stage:" in reason


def test_a_reused_pid_does_not_keep_a_record_alive() -> None:
    assert abandoned_reason(running_record(), node="here",
                            started=lambda pid: RUN_START + 60) is not None


def test_the_running_process_keeps_its_record_running() -> None:
    assert abandoned_reason(running_record(), node="here",
                            started=lambda pid: RUN_START - 2) is None


def test_another_machine_or_no_pid_cannot_be_told() -> None:
    assert abandoned_reason(running_record(node="elsewhere"), node="here",
                            started=lambda pid: None) is None
    assert abandoned_reason(running_record(pid=None), node="here",
                            started=lambda pid: None) is None


def test_a_finished_record_is_never_abandoned() -> None:
    record = running_record()
    record.status = RunStatus.FAILED
    assert abandoned_reason(record, node="here", started=lambda pid: None) is None


def test_reports_and_json_say_abandoned() -> None:
    record = RunRecord.from_json(running_record().to_json())
    mark_if_abandoned(record, node="here", started=lambda pid: None)
    assert record.to_json()["status"] == "abandoned"
    assert "ended without finishing its record" in record.to_json()["abandoned"]
    console = Console(width=200, record=True)
    console.print(render_terminal(record))
    text = console.export_text()
    assert "ABANDONED" in text and "abandoned: the run's process" in text
    assert "abandoned: the run's process" in render_markdown(record)
