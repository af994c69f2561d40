"""Where the commands find a run's record and write its reports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.github import job_summary
from pipeline.errors import PipelineError, StoreError, UsageError

if TYPE_CHECKING:
    from pipeline.record import RunRecord
    from pipeline.release.dossier import ReleaseDossier
    from pipeline.spec.models import LoadedSpec


def write_reports(loaded: LoadedSpec, record: RunRecord, run_dir: Path) -> None:
    """report.html beside the record (after the run: never inside a measurement window),
    and the job summary when running in GitHub Actions."""
    from pipeline.release.store import store_for
    from pipeline.report.formats import baseline_for, render
    try:
        baseline = baseline_for(store_for(loaded, create=False), loaded.spec.name, record)
    except PipelineError:
        baseline = None
    release = release_evidence(loaded, record.release_id,
                               record.promoted_to or record.environment)
    (run_dir / "report.html").write_text(render(record, "html", baseline, release=release),
                                         encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        job_summary(render(record, "markdown", baseline, release=release))


def release_evidence(loaded: LoadedSpec, release_id: str | None,
                     environment: str | None) -> ReleaseDossier | str | None:
    """The dossier of `release_id` against what is live in `environment`; None for a run
    that published nothing, and why not when it cannot be read (the report says so)."""
    from pipeline.release.dossier import release_dossier
    from pipeline.release.offline import approver_keys_by_environment
    from pipeline.release.store import store_for
    if not release_id:
        return None
    try:
        return release_dossier(store_for(loaded, create=False), loaded.spec.name, release_id,
                               environment, approver_keys_by_environment(loaded))
    except PipelineError as error:
        return str(error)


def find_record(loaded: LoadedSpec, identifier: str) -> RunRecord:
    """A run's record (marked abandoned when its process is gone), or a release's."""
    from pipeline.abandoned_runs import mark_if_abandoned
    from pipeline.record import load_run_record, runs_dir
    from pipeline.release.manifest import (
        VerificationUnreadable,
        read_manifest,
        release_record,
        verification_blob,
    )
    from pipeline.release.store import store_for
    if (runs_dir(loaded.workspace) / identifier / "record.json").is_file():
        return mark_if_abandoned(load_run_record(loaded.workspace, identifier))
    store = store_for(loaded, create=False)
    try:
        manifest = read_manifest(store, loaded.spec.name, identifier)
    except UsageError:
        raise UsageError(f"{identifier}: neither a run under {runs_dir(loaded.workspace)} nor "
                         f"a release of '{loaded.spec.name}' in {store.url}") from None
    run_id = manifest.run_id or ""
    if (runs_dir(loaded.workspace) / run_id / "record.json").is_file():
        return mark_if_abandoned(load_run_record(loaded.workspace, run_id))
    if verification_blob(manifest) is None:
        raise UsageError(f"release {identifier} carries no verification record")
    try:
        return release_record(store, manifest, identifier)
    except VerificationUnreadable as exc:
        raise StoreError(f"release {identifier}: {exc}") from None
