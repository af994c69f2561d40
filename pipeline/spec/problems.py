"""What a cross-key rule of the spec finds, and the shape of such a rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.spec.models import Spec
from pipeline.spec.positions import KeyPath, PositionedDocument

Problem = tuple[KeyPath, str]
"""The key a rule finds wrong and why; the loader adds the file, line and column."""

Rule = Callable[[Spec, PositionedDocument, Path], Iterator[Problem]]
"""A rule over a valid spec, its merged document (for positions) and the spec's folder."""
