"""A measurement's windows as a verdict's evidence: the pooled requests and the blocks.

Each window is cut into consecutive blocks of requests in completion order, of at least
`BLOCK_REQUESTS` each and at most `MAX_BLOCKS` per window. Requests that share a batch finish
together, so a batch never straddles more than one boundary; a block of a few hundred
requests is long against the span over which requests are correlated. A window without a
timeline (measured by remote workers) is one block.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.gates.percentile_verdict import Evidence
from pipeline.gates.samples import Block, HistogramSample, SortedBlock
from pipeline.measure.load_result import LoadResult

BLOCK_REQUESTS = 250
MAX_BLOCKS = 8


def split_blocks(latencies_us: Sequence[float]) -> tuple[SortedBlock, ...]:
    """Consecutive, nearly equal blocks of the requests in completion order."""
    count = max(1, min(MAX_BLOCKS, len(latencies_us) // BLOCK_REQUESTS))
    size = len(latencies_us) / count
    return tuple(SortedBlock.of(latencies_us[round(i * size):round((i + 1) * size)])
                 for i in range(count))


def window_blocks(window: LoadResult) -> tuple[Block, ...]:
    if window.latencies_us and len(window.latencies_us) == window.histogram.get_total_count():
        return split_blocks(window.latencies_us)
    return (HistogramSample(window.histogram),)


def evidence_of(windows: Sequence[LoadResult], pooled: LoadResult,
                percentile: float) -> Evidence:
    return Evidence(HistogramSample(pooled.histogram),
                    tuple(window_blocks(w) for w in windows),
                    tuple(w.percentile_ms(percentile) for w in windows))
