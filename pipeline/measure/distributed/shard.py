"""Splitting one load among workers: an open-loop schedule, or a closed loop's concurrency."""

from __future__ import annotations

import os
from typing import Literal

from pipeline.request_types import RequestMix

WorkersSetting = int | Literal["auto"]


def interleave(plan: list[tuple[float, str]], workers: int) -> list[list[tuple[float, str]]]:
    """Request i goes to worker i mod N with its intended offset unchanged, so the workers'
    requests together are exactly the schedule's, each at its own instant."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return [plan[index::workers] for index in range(workers)]


def interleave_mix(mix: RequestMix, requests: int, workers: int) -> list[RequestMix]:
    """A mix sent one request per entry of an interleaved plan of `requests` entries:
    worker k's mix sends, in turn, what entries k, k + N, ... would have sent from one
    process (the mix's order from its start), and holds only those requests."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    shares = []
    for worker in range(workers):
        wanted = [mix.order[entry % len(mix.order)] for entry in range(worker, requests, workers)]
        kept = sorted(set(wanted)) or [mix.order[0]]
        position = {index: place for place, index in enumerate(kept)}
        shares.append(RequestMix(tuple(mix.requests[index] for index in kept),
                                 tuple(mix.sizes[index] for index in kept),
                                 tuple(position[index] for index in wanted) or (0,)))
    return shares


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """Each worker's share of the requests in flight: as even as integers allow, adding up
    to `concurrency`; never a worker with none (fewer workers then)."""
    if workers < 1 or concurrency < 1:
        raise ValueError(f"cannot split concurrency {concurrency} among {workers} workers")
    base, extra = divmod(concurrency, workers)
    shares = [base + (1 if index < extra else 0) for index in range(workers)]
    return [share for share in shares if share > 0]


def resolve_workers(setting: WorkersSetting, cores: int | None = None) -> int:
    """`auto`: one worker per spare core (a core is left for the coordinator)."""
    if setting != "auto":
        return setting
    available = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, available - 1)
