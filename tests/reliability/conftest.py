"""Reliability suite: one session-wide tally of what the tests did to the system, and what
it did wrong, printed as a single line at the end of the run:

    reliability: faults=N kills=N crashes=N bad_inputs=N secrets_leaked=N inconsistencies=N

Tests take the `tally` fixture and count with `tally.add("faults", n)`. The moto server
(`s3_server`, `s3_env`) comes from tests/conftest.py.
"""

from __future__ import annotations

import threading

import pytest

from tests.support.refusals import matrix_of

__all__ = ["KINDS", "Tally", "tally"]

KINDS = ("faults", "kills", "crashes", "bad_inputs", "secrets_leaked", "inconsistencies")


class Tally:
    """Counters shared by every reliability test in the session (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)

    def add(self, kind: str, n: int = 1) -> None:
        if kind not in self._counts:
            raise KeyError(f"unknown tally {kind!r}; known: {', '.join(KINDS)}")
        if n < 0:
            raise ValueError(f"tally {kind}: cannot add {n}")
        with self._lock:
            self._counts[kind] += n

    def __getitem__(self, kind: str) -> int:
        with self._lock:
            return self._counts[kind]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def line(self) -> str:
        counts = self.snapshot()
        return "reliability: " + " ".join(f"{kind}={counts[kind]}" for kind in KINDS)


_TALLY = pytest.StashKey[Tally]()


def _tally(config: pytest.Config) -> Tally:
    return config.stash.setdefault(_TALLY, Tally())


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Tally:
    return _tally(request.config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    terminalreporter.write_line(_tally(config).line())
    matrix = matrix_of(config)
    if matrix.ran:
        terminalreporter.write_line(matrix.line())
