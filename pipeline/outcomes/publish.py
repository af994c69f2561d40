"""The publish stage's metrics (`stages/publish.py`): the blobs the release wrote, and
those the store already held (content addressing: the same bytes are not uploaded twice).
Named for the upload: `PublishOutcome` in `pipeline/release/manifest.py` is the release."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.outcomes.base import MetricsOutcome


@dataclass(frozen=True, kw_only=True)
class UploadOutcome(MetricsOutcome):
    uploaded_blobs: float | None = None
    uploaded_bytes: float | None = None
    skipped_blobs: float | None = None
