"""What a load window measured: latencies (µs) in an HDR histogram, and outcomes."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

from pipeline import metric_names as m
from pipeline.measure import histogram_reads
from pipeline.statistics.order_stats import MIN_SAMPLES_FOR

MAX_LATENCY_US = 3_600_000_000


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, MAX_LATENCY_US, 3)


def latency_us(elapsed_s: float) -> int:
    return min(MAX_LATENCY_US, max(1, int(elapsed_s * 1e6)))


def failed_latency_us(elapsed_s: float, timeout_s: float) -> int:
    """What a failed or timed-out request adds to the latency histogram.

    It is censored at the timeout: it delivered no answer within the longest wait
    the client accepts, so it counts as at least that slow. Recording a fast error
    (a 500 after 2 ms) at its elapsed time would make a server that fails fast look
    faster; leaving it out would let a timeout never raise p99.
    """
    return latency_us(max(elapsed_s, timeout_s))


# Errors the server never answered: the client gave up waiting, or lost the connection
# (open loop: still unanswered, or never sent, at a step's hard end).
NO_ANSWER = frozenset({"timeout", "connection", "unanswered", "unsent"})


@dataclass
class LoadResult:
    """Latencies (µs) and outcomes of one measurement window.

    The histogram holds every request: answered ones at their latency, failed and
    timed-out ones censored at the request timeout (see `failed_latency_us`). Where the
    load generator records it (`record`), `finished_s` and `latencies_us` keep every
    request in completion order (seconds since the window began, and its latency), so
    that a verdict can cut the window into blocks of consecutive requests.
    `answered_s` keeps when each request the server answered (a result or an error it
    sent, not a timeout or a lost connection) finished, where the timeline is kept: a stall
    is the longest span without one.
    `client_wait_s` is the time the client's threads spent waiting for a CPU (None where
    the platform does not say). `sizes` holds the same latencies by the size bucket of
    the request (a mix's, `RequestMix`): every request of a mix is in the histogram and
    in its size's.
    """

    duration_s: float
    histogram: HdrHistogram = field(default_factory=new_histogram)
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    client_cpu_s: float = 0.0
    finished_s: array[float] = field(default_factory=lambda: array("d"))
    latencies_us: array[int] = field(default_factory=lambda: array("q"))
    answered_s: array[float] = field(default_factory=lambda: array("d"))
    client_wait_s: float | None = None
    sizes: dict[str, HdrHistogram] = field(default_factory=dict)

    def record(self, value_us: int, finished_s: float, error: str | None = None,
               size: str | None = None) -> None:
        """One request: in the histogram, the timeline, and completed or its error's count
        (one count for all three, so that percentiles, error rate and throughput agree);
        and in its size bucket's histogram, if it has one."""
        self.histogram.record_value(value_us)
        self.record_size(size, value_us)
        self.finished_s.append(finished_s)
        self.latencies_us.append(value_us)
        if error is None:
            self.completed += 1
        else:
            self.errors[error] += 1
        if error not in NO_ANSWER:
            self.answered_s.append(finished_s)

    def record_size(self, size: str | None, value_us: int) -> None:
        if size is not None:
            self.sizes.setdefault(size, new_histogram()).record_value(value_us)

    def add_sizes(self, sizes: dict[str, HdrHistogram]) -> None:
        for size, histogram in sizes.items():
            self.sizes.setdefault(size, new_histogram()).add(histogram)

    def size_summary(self) -> dict[str, dict[str, float]]:
        """p50, p99 (ms) and requests per size bucket, smallest size first."""
        def key(size: str) -> tuple[int, float, str]:
            try:
                return 0, float(size), size
            except ValueError:
                return 1, 0.0, size
        return {size: {m.P50_MS: _at(histogram, 50), m.P99_MS: _at(histogram, 99),
                       m.REQUESTS: float(histogram.get_total_count())}
                for size, histogram in sorted(self.sizes.items(), key=lambda kv: key(kv[0]))}

    def merge(self, other: LoadResult) -> None:
        self.add_sizes(other.sizes)
        self.histogram.add(other.histogram)
        self.completed += other.completed
        self.errors.update(other.errors)
        self.finished_s.extend(self.duration_s + at for at in other.finished_s)
        self.latencies_us.extend(other.latencies_us)
        self.answered_s.extend(self.duration_s + at for at in other.answered_s)
        self.duration_s += other.duration_s
        self.client_cpu_s += other.client_cpu_s
        if other.client_wait_s is not None:
            self.client_wait_s = (self.client_wait_s or 0.0) + other.client_wait_s

    @property
    def requests(self) -> int:
        return self.completed + self.error_count

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def answered(self) -> int:
        return self.requests - sum(self.errors[kind] for kind in NO_ANSWER)

    @property
    def throughput(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        total = self.completed + self.error_count
        return self.error_count / total if total else 0.0

    def percentile_ms(self, percentile: float) -> float:
        return _at(self.histogram, percentile)

    def percentiles_ms(self, wanted: Iterable[float]) -> dict[float, float]:
        """Several percentiles at once (histogram_reads: one numpy pass, not hdrh's walk)."""
        return {percentile: float(value) / 1e3
                for percentile, value in histogram_reads.percentiles(self.histogram,
                                                                     wanted).items()}

    def thin_percentiles(self) -> list[str]:
        """Percentiles that need more samples than were taken."""
        count = self.histogram.get_total_count()
        return [name for name, needed in MIN_SAMPLES_FOR.items() if count < needed]

    def summary(self) -> dict[str, float]:
        count = self.histogram.get_total_count()
        requests = self.completed + self.error_count
        at = self.percentiles_ms(_SUMMARY_PERCENTILES)
        return {
            **{name: at[percentile] for percentile, name in _SUMMARY_PERCENTILES.items()},
            m.MAX_MS: float(self.histogram.get_max_value()) / 1e3 if count else 0.0,
            m.MEAN_MS: histogram_reads.mean(self.histogram) / 1e3,
            "requests": float(requests),
            "errors": float(self.error_count),
            "error_rate": self.error_rate,
            "throughput_rps": self.throughput,
            "client_cpu_ms_per_request": (self.client_cpu_s * 1e3 / requests
                                          if requests else 0.0),
        }


_SUMMARY_PERCENTILES: dict[float, str] = {50.0: m.P50_MS, 90.0: m.P90_MS, 95.0: m.P95_MS,
                                           99.0: m.P99_MS, 99.9: m.P999_MS}


def _at(histogram: HdrHistogram, percentile: float) -> float:
    """The value at `percentile` in ms (0 for an empty histogram)."""
    return float(histogram_reads.percentiles(histogram, [percentile])[percentile]) / 1e3


def merge_windows(windows: list[LoadResult]) -> LoadResult:
    """The windows merged into one result."""
    total = LoadResult(0.0)
    for window in windows:
        total.merge(window)
    return total
