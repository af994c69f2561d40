"""The S3 release store under object-store faults: a fault-injecting proxy sits between
`S3Store` and moto (503 SlowDown, 500 InternalError, dropped connections, bodies cut
mid-stream, replies lost after the server acted). Whatever happens, the store checked
DIRECTLY (no proxy) must stay consistent: no manifest names a missing or partial blob,
no blob differs from its digest, pointers move only to valid states with a chained
history, and every failure is a one-line PipelineError, never wrong bytes."""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pipeline.errors import ConflictError, PipelineError
from pipeline.release.manifest import BlobSource, list_releases, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import Moved, Pointer, move_pointer, read_pointer
from pipeline.release.policy import rollback
from pipeline.release.standing import rollback_target
from pipeline.release.store.s3 import S3Store
from pipeline.release.verify import verify_store
from tests.reliability.conftest import Tally
from tests.support.faultproxy import FaultProxy, FaultRule, read_body, read_chunked, read_head
from tests.support.moto_s3 import S3Server

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

NAME = "fraud"
BLOB_WRITES = ("PUT", "POST")          # PutObject, CreateMultipartUpload, UploadPart, Complete
ERRORS = ("slowdown", "internal", "drop")
T = TypeVar("T")


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """70 MiB of random bytes: over the 64 MiB threshold, so it goes multipart (5 parts)."""
    path = tmp_path_factory.mktemp("big") / "model.bin"
    data = os.urandom(70 * 2**20)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


@pytest.fixture
def proxy(s3_env: S3Server, tally: Tally) -> Iterator[FaultProxy]:
    with FaultProxy(s3_env.endpoint, timeout=30, lifetime=300) as running:
        try:
            yield running
        finally:
            tally.add("faults", running.total)
            print(f"\n  faults injected: {dict(running.counts)} "
                  f"in {len(running.seen)} requests")


@pytest.fixture
def url(s3_env: S3Server) -> str:
    return f"s3://{s3_env.new_bucket()}/team/{NAME}"


@pytest.fixture
def direct(url: str, s3_env: S3Server) -> S3Store:
    """The same store, straight to moto: the judge of what really is there."""
    return S3Store(url, endpoint_url=s3_env.endpoint)


def small_sources(tmp_path: Path, count: int, tag: str) -> list[BlobSource]:
    sources = []
    for number in range(count):
        data = f"{tag}-{number}-".encode() + os.urandom(40_000 + number)
        digest = hashlib.sha256(data).hexdigest()
        if number % 2:
            path = tmp_path / f"{tag}-{number}.bin"
            path.write_bytes(data)
            sources.append(BlobSource(f"{tag}{number}", path, None, digest))
        else:
            sources.append(BlobSource(f"{tag}{number}", None, data, digest))
    return sources


def size(source: BlobSource) -> int:
    return source.path.stat().st_size if source.path else len(source.data or b"")


def one_line(error: BaseException | str) -> str:
    text = str(error)
    assert text and "\n" not in text and "\r" not in text, f"not one line: {text!r}"
    return text


def attempt(tally: Tally, action: Callable[[], T]) -> T | PipelineError:
    """Run `action`; a PipelineError is an acceptable, clear failure (returned), anything
    else escaping pipeline code is a crash (counted, then re-raised)."""
    try:
        return action()
    except PipelineError as error:
        one_line(error)
        return error
    except Exception:
        tally.add("crashes")
        raise


def assert_consistent(store: S3Store, tally: Tally) -> None:
    """`store verify` finds nothing, and every blob present matches its digest (a partial
    blob under its digest would be skipped by the next publish and poison its release)."""
    problems = list(verify_store(store).problems)
    for key in store.list("blobs/"):
        problem = store.verify_blob(key.removeprefix("blobs/sha256/"))
        if problem:
            problems.append(f"{key}: {problem}")
    tally.add("inconsistencies", len(problems))
    assert problems == []


def assert_chain(pointer: Pointer, tally: Tally) -> None:
    broken = [later for earlier, later in zip(pointer.events, pointer.events[1:], strict=False)
              if later.previous_release_id != earlier.release_id]
    wrong_current = bool(pointer.events) and pointer.events[-1].release_id != pointer.current
    tally.add("inconsistencies", len(broken) + wrong_current)
    assert broken == [] and not wrong_current, pointer.events


def present(store: S3Store, sources: list[BlobSource]) -> set[str]:
    return {source.digest for source in sources if store.has_blob(source.digest)}


def publish(store: S3Store, sources: list[BlobSource]) -> Any:
    return publish_release(store, NAME, sources, Manifest.from_json({"run_id": "reliability"}),
                           utc_now())


# ---------------------------------------------------------------- the proxy itself


def test_the_proxy_frames_chunked_bodies_exactly() -> None:
    """aws-chunked: chunk signatures as extensions, a checksum trailer; the body is
    passed on byte for byte and the next request starts right after it."""
    body = (b"400;chunk-signature=" + b"a" * 64 + b"\r\n" + b"x" * 1024 + b"\r\n"
            b"0;chunk-signature=" + b"b" * 64 + b"\r\n"
            b"x-amz-checksum-sha256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\r\n\r\n")
    reader = io.BytesIO(body + b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_chunked(reader) == body
    assert read_head(reader) == (b"GET /next HTTP/1.1\r\n", [b"Host: x\r\n"])


# moto does not check signatures, but treats a request without one as anonymous.
AUTH = ("Authorization: AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/"
        "aws4_request, SignedHeaders=host, Signature=0\r\n")


def test_the_proxy_forwards_chunked_puts_and_keeps_connections_alive(
        proxy: FaultProxy, s3_env: S3Server) -> None:
    bucket = s3_env.new_bucket()
    host = proxy.url.removeprefix("http://")
    address = ("127.0.0.1", int(host.rpartition(":")[2]))
    with socket.create_connection(address, timeout=10) as sock, sock.makefile("rb") as reader:
        sock.sendall(f"PUT /{bucket}/k HTTP/1.1\r\nHost: {host}\r\n{AUTH}Expect: 100-continue\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
        sock.sendall(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        head = read_head(reader)
        assert head is not None and head[0].startswith(b"HTTP/1.1 200 ")
        read_body(reader, head[1], until_eof=True)
    with socket.create_connection(address, timeout=10) as sock, sock.makefile("rb") as reader:
        for _ in range(2):                           # one connection, two requests
            sock.sendall(f"GET /{bucket}/k HTTP/1.1\r\nHost: {host}\r\n{AUTH}\r\n".encode())
            head = read_head(reader)
            assert head is not None and head[0].startswith(b"HTTP/1.1 200 ")
            assert read_body(reader, head[1], until_eof=False) == b"hello world"
    assert [(seen.method, seen.fault) for seen in proxy.seen] == \
        [("PUT", None), ("GET", None), ("GET", None)]


def test_attempts_counts_every_request(proxy: FaultProxy, url: str, tally: Tally) -> None:
    """`S3Store(attempts=N)` (docs/releases.md: "5 attempts") must make N requests in all when
    every one of them is throttled, not N + 1."""
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=2)
    with proxy.faults(FaultRule(["slowdown"], probability=1.0, methods=["HEAD"])) as (rule,):
        outcome = attempt(tally, partial(faulty.has_blob, "0" * 64))
    assert isinstance(outcome, PipelineError)
    assert rule.matched == 2, f"{rule.matched} requests for attempts=2"


# ---------------------------------------------------------------- publish


def test_publish_succeeds_through_transient_upload_faults(
        proxy: FaultProxy, url: str, direct: S3Store, big_file: tuple[Path, str],
        tmp_path: Path, tally: Tally) -> None:
    """~30% of blob uploads (multipart parts included) answer 503/500 or drop the
    connection, but never more than twice for one request: with 3 attempts the retries
    always win."""
    big, big_digest = big_file
    sources = [*small_sources(tmp_path, 4, "small"), BlobSource("model", big, None, big_digest)]
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=3)
    rule = FaultRule(ERRORS, probability=0.3, methods=BLOB_WRITES, path="/blobs/sha256/",
                     seed=7, per_target=2)
    with proxy.faults(rule):
        outcome = attempt(tally, lambda: publish(faulty, sources))
    assert not isinstance(outcome, PipelineError), f"retries should have won: {outcome}"
    assert rule.injected > 0
    assert (outcome.uploaded_blobs, outcome.skipped_blobs) == (5, 0)
    assert list_releases(direct, NAME) == [outcome.release_id]
    assert present(direct, sources) == {source.digest for source in sources}
    assert_consistent(direct, tally)
    # Everything is there: the same publish again uploads nothing.
    again = publish(faulty, sources)
    assert (again.uploaded_blobs, again.skipped_blobs) == (0, 5)
    assert_consistent(direct, tally)


def test_publish_that_fails_midway_leaves_no_release_and_a_rerun_uploads_the_rest(
        proxy: FaultProxy, url: str, direct: S3Store, big_file: tuple[Path, str],
        tmp_path: Path, tally: Tally) -> None:
    """One blob's upload fails on every attempt (after the multipart blob went up through
    transient faults): publish fails with one line and no manifest; a rerun without
    faults uploads exactly the missing blobs."""
    big, big_digest = big_file
    small = small_sources(tmp_path, 4, "part")
    sources = [small[0], BlobSource("model", big, None, big_digest), small[1], small[2],
               small[3]]
    doomed = small[2].digest
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=2)
    with proxy.faults(FaultRule(ERRORS, probability=1.0, methods=BLOB_WRITES,
                                path=f"/blobs/sha256/{doomed}", seed=3),
                      FaultRule(ERRORS, probability=0.3, methods=BLOB_WRITES,
                                path="/blobs/sha256/", seed=11, per_target=1)):
        outcome = attempt(tally, lambda: publish(faulty, sources))
    assert isinstance(outcome, PipelineError), "the doomed blob cannot have been uploaded"
    assert doomed[:12] in str(outcome)
    assert list_releases(direct, NAME) == []
    there = present(direct, sources)
    assert there == {small[0].digest, big_digest, small[1].digest}
    assert_consistent(direct, tally)
    # The rerun, faults gone (through the proxy still): only what is missing goes up.
    rerun = publish(S3Store(url, endpoint_url=proxy.url), sources)
    assert (rerun.uploaded_blobs, rerun.skipped_blobs) == (len(sources) - len(there),
                                                           len(there))
    assert rerun.uploaded_bytes == sum(size(s) for s in sources if s.digest not in there)
    assert list_releases(direct, NAME) == [rerun.release_id]
    assert_consistent(direct, tally)


@pytest.mark.parametrize("kind", ERRORS)
@pytest.mark.parametrize("request_path", ["uploads", "partNumber=3"])
def test_multipart_upload_that_exhausts_retries_is_a_store_error(
        proxy: FaultProxy, url: str, direct: S3Store, big_file: tuple[Path, str],
        kind: str, request_path: str, tally: Tally) -> None:
    """CreateMultipartUpload (or one part) fails on every attempt: publish must fail as
    a StoreError with one line, leave no object and no pending multipart upload."""
    big, big_digest = big_file
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=1)
    with proxy.faults(FaultRule([kind], probability=1.0, methods=BLOB_WRITES,
                                path=re.escape(request_path))):
        outcome = attempt(tally, lambda: publish(
            faulty, [BlobSource("model", big, None, big_digest)]))
    assert isinstance(outcome, PipelineError)
    assert not direct.has_blob(big_digest)
    assert list_releases(direct, NAME) == []
    pending = direct.client.list_multipart_uploads(Bucket=direct.bucket).get("Uploads", [])
    assert pending == [], "an aborted upload was left behind"
    assert_consistent(direct, tally)


def test_lost_reply_to_the_manifest_write_is_not_a_failed_publish(
        proxy: FaultProxy, url: str, direct: S3Store, tmp_path: Path, tally: Tally) -> None:
    """The manifest PUT reaches S3 and is applied, but its reply is lost: botocore
    retries, and `If-None-Match: *` now answers 412. A publish reported as failed must
    not have left a visible release behind."""
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=3)
    with proxy.faults(FaultRule(schedule=["lose"], methods=["PUT"],
                                path="/releases/")) as (rule,):
        outcome = attempt(tally, lambda: publish(faulty, small_sources(tmp_path, 2, "m")))
    assert rule.injected == 1
    releases = list_releases(direct, NAME)
    if isinstance(outcome, PipelineError):
        tally.add("inconsistencies", len(releases))
        assert releases == [], f"publish failed ({outcome}) but released {releases}"
    else:
        assert releases == [outcome.release_id]
    assert_consistent(direct, tally)


# ---------------------------------------------------------------- pointers


def seed_releases(direct: S3Store, tmp_path: Path, count: int) -> list[str]:
    return [publish(direct, small_sources(tmp_path, 2, f"r{number}")).release_id
            for number in range(count)]


def test_promote_and_rollback_under_faults_keep_the_pointer_valid(
        proxy: FaultProxy, url: str, direct: S3Store, tmp_path: Path, tally: Tally) -> None:
    """Every request of promote and rollback (pointer reads and CAS writes, manifest
    reads, blob HEADs, audit writes) may get 503/500/drop. Each operation either
    succeeds or fails with one line; the pointer is then at its old or its new release,
    its history a chain."""
    releases = seed_releases(direct, tmp_path, 3)
    move_pointer(direct, NAME, "staging", releases[0], PointerAction.PROMOTE, "seed")
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=2)
    outcomes: list[str] = []
    with proxy.faults(FaultRule(ERRORS, probability=0.3, path="/(environments|audit|releases|"
                                "blobs)/", seed=5)):
        for step in range(14):
            before, _ = read_pointer(direct, NAME, "staging")
            action: Callable[[], Moved]
            try:
                target = rollback_target(before) if step % 3 == 2 else None
            except PipelineError:       # nothing to roll back to yet: promote instead
                target = None
            if target is not None:
                action = partial(rollback, faulty, NAME, "staging", None, f"op{step}")
            else:
                target = releases[(releases.index(str(before.current)) + 1) % len(releases)]
                action = partial(move_pointer, faulty, NAME, "staging", target,
                                 PointerAction.PROMOTE, f"op{step}")
            outcome = attempt(tally, action)
            after, _ = read_pointer(direct, NAME, "staging")
            assert_chain(after, tally)
            valid = after.current in (before.current, target)
            tally.add("inconsistencies", not valid)
            assert valid, f"pointer at {after.current}, not {before.current} or {target}"
            if isinstance(outcome, PipelineError):
                outcomes.append("moved-then-failed" if after.current != before.current
                                else "failed")
                if isinstance(outcome, ConflictError):  # "nothing was changed" must be true
                    assert after.events == before.events
            else:
                outcomes.append("ok")
                assert after.current == target and after.events[:-1] == before.events
                assert after.events[-1] == outcome.event
    print(f"\n  outcomes: {outcomes}")
    assert "ok" in outcomes
    assert_consistent(direct, tally)


@pytest.mark.parametrize("key", ["environments", "audit"])
def test_lost_reply_to_a_pointer_move_is_not_reported_as_a_lost_race(
        proxy: FaultProxy, url: str, direct: S3Store, tmp_path: Path, key: str,
        tally: Tally) -> None:
    """The pointer's `If-Match` PUT (or the audit entry's `If-None-Match` PUT) is applied
    but its reply is lost; botocore's retry then gets 412. The promotion did happen: a
    ConflictError saying "nothing was changed" (exit 4) would be false."""
    releases = seed_releases(direct, tmp_path, 2)
    move_pointer(direct, NAME, "staging", releases[0], PointerAction.PROMOTE, "seed")
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=3)
    with proxy.faults(FaultRule(schedule=["lose"], methods=["PUT"],
                                path=f"/{key}/")) as (rule,):
        outcome = attempt(tally, lambda: move_pointer(faulty, NAME, "staging", releases[1],
                                                      PointerAction.PROMOTE, "ci"))
    assert rule.injected == 1
    after, _ = read_pointer(direct, NAME, "staging")
    assert_chain(after, tally)
    assert after.current in releases
    if isinstance(outcome, PipelineError):
        moved = after.current == releases[1]
        tally.add("inconsistencies", moved)
        assert not moved, f"reported {type(outcome).__name__}: {outcome}; yet the " \
                          f"pointer moved to {after.current}"
    assert_consistent(direct, tally)


# ---------------------------------------------------------------- reads


@pytest.fixture
def stored_blob(direct: S3Store) -> tuple[str, bytes]:
    data = os.urandom(3 * 2**20 + 17)
    digest, _ = direct.put_blob_bytes(data)
    return digest, data


def blob_gets(digest: str) -> str:
    return f"/blobs/sha256/{digest}"


def test_a_body_cut_mid_stream_is_never_accepted(
        proxy: FaultProxy, url: str, stored_blob: tuple[str, bytes], tmp_path: Path,
        tally: Tally) -> None:
    """GET of a blob: headers with the full Content-Length, half the body, close."""
    digest, data = stored_blob
    faulty = S3Store(url, endpoint_url=proxy.url)
    destination = tmp_path / "fetched"
    cut_once = FaultRule(schedule=["cut"], methods=["GET"], path=blob_gets(digest))
    with proxy.faults(cut_once):
        read = attempt(tally, lambda: faulty.read_blob(digest))
    assert isinstance(read, PipelineError) or read == data
    with proxy.faults(FaultRule(schedule=["cut"], methods=["GET"], path=blob_gets(digest))):
        problem = faulty.verify_blob(digest)
    assert problem is not None and digest[:12] in problem
    one_line(problem)
    # download_file retries a cut body itself: a single cut still ends in the right bytes.
    with proxy.faults(FaultRule(schedule=["cut"], methods=["GET"], path=blob_gets(digest))):
        fetched = attempt(tally, lambda: faulty.fetch_blob(digest, destination))
    if isinstance(fetched, PipelineError):
        assert not destination.exists()
    else:
        assert hashlib.sha256(destination.read_bytes()).hexdigest() == digest
    # Random cuts: every read either fails with one line or returns exactly the blob.
    with proxy.faults(FaultRule(["cut"], probability=0.5, methods=["GET"],
                                path=blob_gets(digest), seed=13)) as (rule,):
        for _ in range(8):
            read = attempt(tally, lambda: faulty.read_blob(digest))
            assert isinstance(read, PipelineError) or read == data
            problem = faulty.verify_blob(digest)
            assert problem is None or digest[:12] in problem
    assert rule.injected > 0


def test_a_body_cut_on_every_attempt_is_a_store_error(
        proxy: FaultProxy, url: str, stored_blob: tuple[str, bytes], tmp_path: Path,
        tally: Tally) -> None:
    """Every GET of the blob is cut: all three readers refuse, with one-line
    StoreErrors, and fetch_blob leaves no file behind."""
    digest, _ = stored_blob
    faulty = S3Store(url, endpoint_url=proxy.url, attempts=2)
    destination = tmp_path / "fetched"
    with proxy.faults(FaultRule(["cut"], probability=1.0, methods=["GET"],
                                path=blob_gets(digest))):
        assert isinstance(attempt(tally, lambda: faulty.read_blob(digest)), PipelineError)
        assert faulty.verify_blob(digest) is not None
        outcome = attempt(tally, lambda: faulty.fetch_blob(digest, destination))
    assert isinstance(outcome, PipelineError)
    assert not destination.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_cut_range_of_a_multipart_download_is_retried_or_refused(
        proxy: FaultProxy, url: str, direct: S3Store, big_file: tuple[Path, str],
        tmp_path: Path, tally: Tally) -> None:
    """fetch_blob of the 70 MiB blob uses parallel ranged GETs; one range is cut."""
    big, big_digest = big_file
    direct.put_blob(big, big_digest)
    faulty = S3Store(url, endpoint_url=proxy.url)
    destination = tmp_path / "model.bin"
    with proxy.faults(FaultRule(schedule=[None, "cut"], methods=["GET"],
                                path=blob_gets(big_digest))) as (rule,):
        outcome = attempt(tally, lambda: faulty.fetch_blob(big_digest, destination))
    assert rule.injected == 1
    if isinstance(outcome, PipelineError):
        assert not destination.exists()
    else:
        hasher = hashlib.sha256()
        with destination.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
        assert hasher.hexdigest() == big_digest


def test_a_cut_manifest_or_pointer_read_is_a_store_error(
        proxy: FaultProxy, url: str, direct: S3Store, tmp_path: Path, tally: Tally) -> None:
    releases = seed_releases(direct, tmp_path, 1)
    move_pointer(direct, NAME, "staging", releases[0], PointerAction.PROMOTE, "seed")
    faulty = S3Store(url, endpoint_url=proxy.url)
    with proxy.faults(FaultRule(["cut"], probability=1.0, methods=["GET"],
                                path="/(releases|environments)/")):
        for key in (f"releases/{NAME}/{releases[0]}.json", f"environments/{NAME}/staging.json"):
            outcome = attempt(tally, partial(faulty.read, key))
            assert isinstance(outcome, PipelineError), f"{key}: accepted {outcome!r}"
