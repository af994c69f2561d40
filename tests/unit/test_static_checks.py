"""The code base stays `ruff` clean and `mypy --strict` clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "pipeline", "stages", "benchmarks"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
