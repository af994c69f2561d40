"""The coordinator: a Ray instance for the run (or an existing cluster), its load workers,
and one window spread over them.

Locally it starts Ray on loopback without a dashboard and shuts it down when the run
ends; with RAY_ADDRESS (or --ray-address) it joins that cluster and leaves it running.
The coordinator only splits the load, picks the shared start instant, watches the server
and merges; every request is sent and timed inside a worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from pipeline.errors import PipelineError
from pipeline.measure.distributed.merge import (
    WorkerClosedLoop,
    WorkerOpenLoop,
    combine_rows,
    merge_closed_loop,
    merge_open_loop,
)
from pipeline.measure.distributed.shard import interleave, interleave_mix, split_concurrency
from pipeline.measure.distributed.worker import ClosedLoopJob, LoadWorker, OpenLoopJob
from pipeline.measure.load_result import LoadResult
from pipeline.measure.open_loop import HardEnd, OpenLoopResult, Phase, schedule
from pipeline.measure.supervise import LoadAborted, Tick, no_tick
from pipeline.measure.wire.transport import Target
from pipeline.request_types import RequestMix

# Workers start their schedule this long after the coordinator hands it out: enough for
# every worker to receive its share before its first request is due.
START_LEAD_S = 0.5
# A worker that has not reported this long after its window should have ended is lost.
REPORT_GRACE_S = 30.0
RAY_PROGRAMS = ("raylet", "gcs_server")


class LoadWorkerLost(PipelineError):
    """A load worker died or stopped answering: the window cannot be merged."""


class LoadCluster:
    """Load workers on Ray for one run; `close` ends the workers (and a Ray it started).
    A local Ray gets `cpus` CPUs: one per worker of the stage with the most."""

    def __init__(self, cpus: int, address: str | None = None) -> None:
        if address and _on_loopback(address):
            # Ray rewrites a 127.0.0.1 address to this machine's outward one, where a
            # loopback-only head does not listen; this keeps it (read when ray is imported).
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        self.ray = ray
        self.owns_ray = False  # we called ray.init: close stops a local Ray, leaves a cluster
        self.rows: dict[str, list[list[dict[str, Any]]]] = {}  # stage: each window's rows
        self.worker_pids: list[int] = []
        self.local = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING,
                         _node_ip_address="127.0.0.1" if _on_loopback(address) else None)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                # Ray starts its workers at nice 15: beside a neighbour busy on a core, the
                # load workers then got so little CPU that they fell 2-3 s behind a 100/s
                # schedule, and every latency counted that lag. Read by the raylet at start.
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                         log_to_driver=False, logging_level=logging.WARNING,
                         _node_ip_address="127.0.0.1")
            self.owns_ray = True
            self.local = not address
        self.actors: list[Any] = []

    def _workers(self, count: int) -> list[Any]:
        if len(self.actors) != count:
            self._end_workers()
            remote = self.ray.remote(num_cpus=1, max_restarts=0)(LoadWorker)
            self.actors = [remote.remote(index) for index in range(count)]
            self.worker_pids = [int(self._get(actor.pid.remote(), f"starting load worker {index}"))
                                for index, actor in enumerate(self.actors)]
        return self.actors

    def rows_for(self, stage: str) -> list[dict[str, Any]]:
        return combine_rows(self.rows.get(stage, []))

    def open_window(self, workers: int, stage: str, target: Target, phases: Sequence[Phase],
                    timeout_s: float, label: str, max_in_flight: int = 2048,
                    arrivals: str = "constant",
                    seed: int = 0, should_stop: Callable[[], bool] = lambda: False,
                    tick: Tick = no_tick, hard_end: HardEnd | None = None,
                    starve_s: dict[int, float] | None = None,
                    plan: list[tuple[float, str]] | None = None) -> OpenLoopResult:
        """One open-loop window: the schedule (the phases', or `plan`) interleaved over the
        workers, one start. With a `plan`, a mix is split with it: entry i of the plan
        sends what the i-th send of the mix would from one process (a replay's payloads)."""
        actors = self._workers(workers)
        whole = schedule(phases, arrivals, seed) if plan is None else plan
        shares = interleave(whole, len(actors))
        targets: list[Target] = [target] * len(actors)
        if plan is not None and isinstance(target, RequestMix):
            targets = list(interleave_mix(target, len(whole), len(actors)))
        per_worker_cap = max(1, -(-max_in_flight // len(actors)))
        start_wall = time.time() + START_LEAD_S
        refs = [actor.open_loop.remote(OpenLoopJob(
            own_target, list(phases), share, start_wall, timeout_s, per_worker_cap, hard_end,
            (starve_s or {}).get(index, 0.0)))
            for index, (actor, share, own_target) in enumerate(zip(actors, shares, targets,
                                                                   strict=True))]
        length = hard_end.after_s + hard_end.linger_s if hard_end else \
            sum(phase.duration_s for phase in phases) + timeout_s + 1.0
        reports: list[WorkerOpenLoop] = self._collect(refs, START_LEAD_S + length, label,
                                                      should_stop, tick)
        merged, rows = merge_open_loop(reports)
        self.rows.setdefault(stage, []).append(rows)
        return merged

    def closed_window(self, workers: int, stage: str, target: Target, concurrency: int,
                      duration_s: float, timeout_s: float, label: str,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = no_tick) -> LoadResult:
        """One closed-loop window: the concurrency split over the workers."""
        shares = split_concurrency(concurrency, workers)
        actors = self._workers(len(shares))
        start_wall = time.time() + START_LEAD_S
        refs = [actor.closed_loop.remote(ClosedLoopJob(target, share, duration_s, timeout_s,
                                                       start_wall))
                for actor, share in zip(actors, shares, strict=True)]
        reports: list[WorkerClosedLoop] = self._collect(
            refs, START_LEAD_S + duration_s + timeout_s, label, should_stop, tick)
        merged, rows = merge_closed_loop(reports)
        self.rows.setdefault(stage, []).append(rows)
        return merged

    def _collect(self, refs: list[Any], length_s: float, label: str,
                 should_stop: Callable[[], bool], tick: Tick) -> list[Any]:
        """Every worker's report, watching the server meanwhile; fails closed as soon as
        a worker died, when one did not report in time, or when the server died."""
        started = time.monotonic()
        index_of = {ref: index for index, ref in enumerate(refs)}
        reports: dict[int, Any] = {}
        pending = list(refs)
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=len(pending), timeout=0.1)
            for ref in ready:     # a dead worker's report is "ready" with its error
                reports[index_of[ref]] = self._get(ref, f"{label}: load worker "
                                                   f"{index_of[ref]} of {len(refs)}")
            elapsed = time.monotonic() - started
            tick(elapsed)
            if should_stop():
                self._end_workers()
                raise LoadAborted()
            if elapsed > length_s + REPORT_GRACE_S:
                self._end_workers()
                raise LoadWorkerLost(f"during {label}: {len(pending)} of {len(refs)} load "
                                     f"workers did not report within {elapsed:.0f}s")
        return [reports[index] for index in range(len(refs))]

    def _get(self, ref: Any, what: str) -> Any:
        try:
            return self.ray.get(ref, timeout=REPORT_GRACE_S)
        except (self.ray.exceptions.RayError, TimeoutError) as exc:
            self._end_workers()
            raise LoadWorkerLost(f"during {what} failed ({_first_line(exc)}); the window "
                                 "is not merged") from None

    def _end_workers(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors = []

    def close(self) -> None:
        try:
            self._end_workers()
        finally:
            if self.owns_ray:
                started_here = ray_processes() if self.local else []
                self.ray.shutdown()
                reap(started_here)


def _first_line(exc: BaseException) -> str:
    kind = type(exc).__name__
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{kind}: {text}"[:300]


def _on_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rpartition(":")[0] or address
    return host in ("127.0.0.1", "localhost")


def ray_processes() -> list[psutil.Process]:
    """The processes under this one that belong to a Ray it started (head and workers)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if child.name() in RAY_PROGRAMS or "ray::" in line or "/site-packages/ray/" in line:
                found.append(child)
        except psutil.Error:
            continue
    return found


def reap(processes: list[psutil.Process], grace_s: float = 5.0) -> None:
    """After ray.shutdown: what of the local Ray still runs (its dashboard agent outlives
    the raylet for a while on a busy machine) is killed, so that no orphan is left."""
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)
