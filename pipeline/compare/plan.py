"""The load plan both servers get: the same load points, in interleaved windows.

Rounds sweep every load point; at each point the two servers take turns (A then B),
and who goes first alternates from round to round (A,B in round 1, B,A in round 2), so
a machine that drifts (another job starting, a CPU warming up) favours neither. Only
one server is loaded at any moment: windows run one after another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One measurement window of the interleaved plan: which server, at which load."""

    index: int          # its place in the whole plan
    round: int          # rounds repeat every load point for every server
    concurrency: int
    kind: str           # the server measured in it


def load_points(max_concurrency: int) -> list[int]:
    """Concurrency 1, 2, 4, ... up to and including max_concurrency."""
    points = []
    concurrency = 1
    while concurrency < max_concurrency:
        points.append(concurrency)
        concurrency *= 2
    points.append(max_concurrency)
    return points


def interleaved(kinds: tuple[str, ...], points: list[int], rounds: int) -> list[Window]:
    windows: list[Window] = []
    for round_index in range(rounds):
        order = kinds if round_index % 2 == 0 else tuple(reversed(kinds))
        for concurrency in points:
            for kind in order:
                windows.append(Window(len(windows), round_index, concurrency, kind))
    return windows


def is_interleaved(sequence: list[str]) -> bool:
    """No server takes two windows in a row within a load point's pair (the check the
    record carries, so a reader need not trust the plan)."""
    return all(sequence[i] != sequence[i + 1] for i in range(0, len(sequence) - 1, 2))
