"""The typed run record: records written by earlier versions load, render in every format
and are written back unchanged.

`data/record_current.json` is a record written by `promote staging` with the tool as it
was before the record was typed (the second promotion of the example model, so publish
holds a comparison); `data/record_main.json` one written the same way by the tool as it
was before stage results had an exit code, gate outcomes an enum and metrics typed
outcomes; `data/verification_triton.json` is the verification blob of the
release it was compared with, as stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.record import RunRecord, load_run_record, runs_dir, write_record
from pipeline.release.manifest import (
    BlobSource,
    Manifest,
    VerificationUnreadable,
    publish_release,
    read_manifest,
    read_verification,
    release_record,
    utc_now,
    verification_blob,
)
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore
from pipeline.report.formats import render
from pipeline.stage_result import GateOutcome, Status
from tests.support.htmldom import parse_html

DATA = Path(__file__).resolve().parent / "data"
FORMATS = ("terminal", "json", "html", "svg", "markdown")


def text_of(name: str) -> str:
    return (DATA / name).read_text()


def body_of(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(text_of(name))
    return body


@pytest.mark.parametrize("fixture", ["record_current.json", "record_main.json"])
def test_a_record_from_the_previous_version_is_written_back_byte_for_byte(
        tmp_path: Path, fixture: str) -> None:
    record = RunRecord.from_json(body_of(fixture))
    assert json.dumps(record.to_json(), indent=2) == text_of(fixture)
    run_dir = runs_dir(tmp_path) / str(record.run_id)
    run_dir.mkdir(parents=True)
    write_record(run_dir / "record.json", record)
    assert (run_dir / "record.json").read_text() == text_of(fixture)
    again = load_run_record(tmp_path, str(record.run_id))
    assert again.to_json() == record.to_json()


def test_a_record_from_the_previous_version_reads_typed() -> None:
    record = RunRecord.from_json(body_of("record_main.json"))
    assert record.status == "passed" and all(s.exit_code is None for s in record.stages)
    assert all(isinstance(gate.outcome, GateOutcome) for _, gate in record.gates())
    latency, saturation = record.latency(), record.saturation()
    assert latency.p99_ms == record.metrics("latency")["p99_ms"]
    assert latency.to_json() == record.metrics("latency")
    assert saturation.knee_concurrency is not None and saturation.knee_concurrency >= 1
    assert saturation.to_json() == record.metrics("saturation")


def test_the_typed_record_holds_what_was_measured() -> None:
    record = RunRecord.from_json(body_of("record_current.json"))
    assert (record.status, record.command, record.environment) == ("passed", "promote",
                                                                    "staging")
    assert record.server.kind == "triton" and record.server.exit == "exited with code 0"
    assert [stage.name for stage in record.stages] == [
        "build", "start", "readiness", "parity", "latency", "saturation", "publish"]
    assert all(stage.status is Status.PASSED for stage in record.stages)
    assert record.metrics("latency")["p99_ms"] > 0
    p99 = record.gate("latency.p99")
    assert p99 is not None and p99.outcome == "passed" and p99.interval is not None
    assert record.git is not None and record.model is not None
    assert record.metrics("no such stage") == {} and record.details("nope") == {}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_from_the_fixture_against_its_baseline(fmt: str) -> None:
    record = RunRecord.from_json(body_of("record_current.json"))
    baseline = RunRecord.from_json(body_of("verification_triton.json"))
    text = render(record, fmt, baseline)  # type: ignore[arg-type]
    assert str(record.run_id) in text or fmt == "markdown"
    if fmt == "json":
        assert text == text_of("record_current.json") + "\n"
    elif fmt == "html":
        document = parse_html(text)
        for element_id in ("gates", "knee-chart", "batch-chart", "deltas"):
            assert document.by_id(element_id) is not None
        assert "Live release" in document.text()
    elif fmt == "markdown":
        assert "### Compared with the live release" in text and "`latency.p99`" in text
    else:
        assert "latency.p99" in text.replace("&#160;", " ")


def test_older_shapes_load_and_keep_their_keys() -> None:
    older = body_of("record_triton.json")          # before selected_stages, git, model
    record = RunRecord.from_json(older)
    assert list(record.to_json()) == list(older)
    assert record.git is None and record.model is None
    gate = record.gate("latency.p99")
    assert gate is not None and gate.outcome == "passed"    # no `outcome` stored: from `passed`
    old_gate = {"name": "latency.p99", "observed": 60.0, "threshold": 50.0, "passed": False}
    stage = {"name": "latency", "status": "failed", "gates": [old_gate]}
    failed = RunRecord.from_json({"stages": [stage]})
    failed_gate = failed.gate("latency.p99")
    assert failed_gate is not None and failed_gate.outcome == "failed"
    first = failed.first_failed_stage()
    assert first is not None and first.name == "latency"


@pytest.mark.parametrize("odd", [
    {},
    {"stages": "none"},
    {"server": "triton", "stages": [{"name": "latency"}, "junk",
                                    {"status": "exploded", "metrics": {"p99_ms": "x"},
                                     "gates": [{"interval": [1, None, 3]}, 7]}]},
])
def test_odd_records_load_without_errors(odd: dict[str, Any]) -> None:
    record = RunRecord.from_json(odd)
    assert record.server.kind is None
    assert all(stage.status in Status for stage in record.stages)
    for fmt in ("html", "markdown", "json"):
        assert render(record, fmt)


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    opened = open_store("file://store", tmp_path)
    assert isinstance(opened, LocalStore)
    return opened


def publish_verification(store: LocalStore, blob: bytes) -> tuple[str, Manifest]:
    release_id = publish_release(store, "demo", [
        BlobSource("verification", None, blob, sha256_bytes(blob))],
        Manifest.from_json({"run_id": "20261130-202157-244734", "verified_in": "staging",
         "spec_digest": "sha256:abc", "server": {"kind": "triton"}}), utc_now()).release_id
    return release_id, read_manifest(store, "demo", release_id)


def test_a_release_verification_blob_loads_as_a_record(store: LocalStore) -> None:
    blob = text_of("verification_triton.json").encode()
    assert canonical_json(json.loads(blob)) == blob        # as publish stores it
    release_id, manifest = publish_verification(store, blob)
    assert verification_blob(manifest) == sha256_bytes(blob)
    record = read_verification(store, manifest, release_id)
    assert (record.release_id, record.server.kind) == (release_id, "triton")
    assert record.run_id == "20261130-202157-244734"
    assert [stage.name for stage in record.stages][-1] == "saturation"   # before publish
    shown = release_record(store, manifest, release_id)
    assert list(shown.to_json()) == ["run_id", "status", "environment", "spec_digest",
                                     "release_id", "stages"]
    assert shown.to_json()["stages"] == json.loads(blob)["stages"]   # keys stay sorted
    assert shown.environment == "staging" and shown.status == "passed"


def test_an_unreadable_verification_says_why(store: LocalStore) -> None:
    release_id, manifest = publish_verification(store, b'{"run_id": "r"}')
    with pytest.raises(VerificationUnreadable, match="holds no stage results"):
        read_verification(store, manifest, release_id)
    with pytest.raises(VerificationUnreadable, match="names no verification blob"):
        read_verification(store, Manifest(), release_id)
