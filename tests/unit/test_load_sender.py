"""What a stage reads from its run to send load (stages/_load.py), and how a window goes
to the sender it is given (pipeline/measure/windows.py): no server is started here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from pipeline.context import RunContext
from pipeline.errors import ServerError, UsageError
from pipeline.measure.distributed.ray_support import missing_ray
from pipeline.measure.load_result import LoadResult
from pipeline.measure.open_loop import Phase
from pipeline.measure.sender import LoadSender, Shards
from pipeline.measure.supervise import LoadAborted, Tick, no_tick
from pipeline.measure.windows import closed_window, open_window
from pipeline.measure.wire.transport import Target
from pipeline.servers.base import ModelServer
from pipeline.servers.specs import load_spec
from pipeline.spec.models import LoadedSpec
from stages._load import sender_for
from tests.support.closed_only_workers import ClosedWindowsOnly

TARGET = cast(Target, object())     # never sent: the fake workers below take every window


class FakeServer:
    """A server only asked whether it is alive (and how it died)."""

    def __init__(self) -> None:
        self.alive_now = True

    def alive(self) -> bool:
        return self.alive_now

    def describe_death(self) -> str:
        return "it exited with code 1"


class FakeWorkers(ClosedWindowsOnly):
    """Load workers that note each window they are handed and answer it at once, or stop
    it as the real ones do when the server is gone."""

    refusal = "not measured here"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def closed_window(self, workers: int, stage: str, target: Target, concurrency: int,
                      duration_s: float, timeout_s: float, label: str,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = no_tick) -> LoadResult:
        self.calls.append(("closed", workers, stage, concurrency, duration_s, timeout_s, label))
        if should_stop():
            raise LoadAborted()
        tick(duration_s)
        return LoadResult(duration_s)

    def opened(self, workers: int, stage: str, timeout_s: float, label: str,
               max_in_flight: int) -> None:
        self.calls.append(("open", workers, stage, timeout_s, label, max_in_flight))


def with_latency(loaded: LoadedSpec, **settings: Any) -> LoadedSpec:
    latency = loaded.spec.stages.latency.model_copy(update=settings)
    stages = loaded.spec.stages.model_copy(update={"latency": latency})
    return replace(loaded, spec=loaded.spec.model_copy(update={"stages": stages}))


def test_a_stage_sends_from_this_process_with_the_spec_timeout_and_its_progress_row(
        project: Path) -> None:
    loaded = load_spec(project / "serve.yaml")
    shown: list[tuple[str, float, float, str]] = []
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources,
                         progress=lambda *args: shown.append(args))
        sender = sender_for(ctx, "latency")
    assert sender.shards is None
    assert sender.timeout_s == loaded.spec.stages.latency.request_timeout.seconds
    sender.progress(1.0, 3.0, "warm-up")
    assert shown == [("latency", 1.0, 3.0, "warm-up")]


def test_more_workers_without_ray_fail_the_stage_that_has_them_only(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = with_latency(load_spec(project / "serve.yaml"), workers=2)
    monkeypatch.setitem(sys.modules, "ray", None)   # as Python marks a blocked import
    with ExitStack() as resources:
        ctx = RunContext(loaded=loaded, run_id="r", run_dir=project / "run", env={},
                         resources=resources)
        with pytest.raises(UsageError) as refused:
            sender_for(ctx, "latency")
        assert str(refused.value) == missing_ray("stages.latency.workers", 2)
        # The other stages that send load have no workers setting: this process sends.
        assert sender_for(ctx, "regression").shards is None


def test_a_sharded_window_goes_to_the_workers_with_the_senders_timeout_and_row() -> None:
    workers = FakeWorkers()
    shown: list[tuple[float, float, str]] = []
    sender = LoadSender(2.5, lambda *args: shown.append(args), Shards(workers, 3, "latency"))
    server = cast(ModelServer, FakeServer())
    result = closed_window(sender, server, TARGET, 12, 4.0, "window 1")
    assert result.duration_s == 4.0
    assert workers.calls == [("closed", 3, "latency", 12, 4.0, 2.5, "window 1")]
    assert shown == [(4.0, 4.0, "window 1")]
    with pytest.raises(AssertionError, match="not measured here"):
        open_window(sender, server, TARGET, [Phase("s", 10.0, 1.0)], "step", "constant",
                    timeout_s=0.5, max_in_flight=32)
    assert workers.calls[-1] == ("open", 3, "latency", 0.5, "step", 32)


def test_a_window_whose_server_died_says_so_with_its_label() -> None:
    fake = FakeServer()
    fake.alive_now = False
    sender = LoadSender(1.0, shards=Shards(FakeWorkers(), 2, "saturation"))
    with pytest.raises(ServerError, match=r"^during probe at 4: it exited with code 1$"):
        closed_window(sender, cast(ModelServer, fake), TARGET, 4, 5.0, "probe at 4")
