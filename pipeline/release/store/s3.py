"""The release store on the S3 API (AWS, MinIO, Ceph, ...), through boto3.

- Credentials: boto3's standard chain. Endpoint: `publish.endpoint_url`, else
  boto3's own `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`.
- Blobs: uploaded unless the store holds exactly these bytes, with multipart and
  parallel parts for large files; S3 verifies a SHA-256 checksum of every part.
  After the upload, S3's own checksum of the object must equal the one computed
  from our bytes; it is kept in the manifest (see s3_checksum). Reads hash what
  they get and refuse a mismatch. Before a pointer moves (check_blob), a
  multipart blob's S3 checksum is compared with the manifest's (one HEAD, no
  copy); a single-part blob (under 64 MiB) is re-hashed.
- Manifests are created with `If-None-Match: *`; environment pointers are
  replaced with `If-Match: <etag>`: a lost race is a ConflictError, not a
  silent overwrite.
- Throttling, 5xx, dropped connections and answers not begun within 20 s are retried
  with exponential backoff (botocore's standard retry mode, 5 attempts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    FlexibleChecksumError,
    NoCredentialsError,
)

from pipeline.errors import ConflictError, StoreError
from pipeline.release.store.base import Leftover, blob_key, read_verified
from pipeline.release.store.s3_checksum import (
    MULTIPART_THRESHOLD,
    PART_SIZE,
    b64,
    expected_checksum,
    store_answer,
    stored_record,
)
from pipeline.release.store.s3_multipart import upload_create_only

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

# botocore "standard" mode: exponential backoff with jitter for throttling, 5xx and
# dropped connections. 5 attempts keep a dead endpoint's error under ~15 s.
ATTEMPTS = 5
CONNECT_TIMEOUT_S = 5
# Waiting for an answer, not for a transfer: a large upload's or download's bytes keep
# flowing; S3 answers a request within seconds, and keeps a long CompleteMultipartUpload
# alive with whitespace.
READ_TIMEOUT_S = 20
CHUNK = 1 << 20


def _is_missing(error: ClientError) -> bool:
    code = str(error.response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def _is_precondition(error: ClientError) -> bool:
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "412", "ConditionalRequestConflict") or \
        status in (409, 412)


class S3Store:
    def __init__(self, url: str, endpoint_url: str | None = None,
                 attempts: int = ATTEMPTS) -> None:
        self.url = url
        bucket_and_prefix = url.removeprefix("s3://")
        self.bucket, _, prefix = bucket_and_prefix.partition("/")
        if not self.bucket:
            raise StoreError(f"store {url}: no bucket name")
        self.prefix = prefix.strip("/")
        # botocore's "max_attempts" counts retries; "total_max_attempts" counts requests.
        # An endpoint that accepts connections and never answers costs READ_TIMEOUT_S per
        # attempt: about 2 minutes in all with the backoff, where botocore's default 60 s
        # made it 5 minutes of silence.
        config = Config(retries={"mode": "standard", "total_max_attempts": attempts},
                        connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                        max_pool_connections=32,
                        request_checksum_calculation="when_supported")
        self.client: S3Client = boto3.client("s3", endpoint_url=endpoint_url, config=config)
        self.transfer = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD,
                                       multipart_chunksize=PART_SIZE, max_concurrency=10,
                                       use_threads=True,
                                       preferred_transfer_client="classic")
        self._records: dict[str, dict[str, str]] = {}

    def _key(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"invalid store key {key!r}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, action: str, error: Exception) -> StoreError:
        if isinstance(error, NoCredentialsError):
            return StoreError(f"store {self.url}: no AWS credentials found (set "
                              "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or a role)")
        if isinstance(error, ClientError):
            detail = error.response.get("Error", {})
            code = detail.get("Code", "?")
            message = detail.get("Message", "")
            return StoreError(f"store {self.url}: cannot {action}: {code} {message}".rstrip())
        return StoreError(f"store {self.url}: cannot {action}: {error}")

    # ------------------------------------------------------------------ blobs

    def has_blob(self, digest: str) -> bool:
        return self._exists(blob_key(digest))

    def _exists(self, key: str) -> bool:
        return self._head_object(key, f"check {key}") is not None

    def _head_object(self, key: str, action: str,
                     checksum: bool = False) -> dict[str, Any] | None:
        """The object's HEAD (with S3's checksum when asked); None when it is absent."""
        try:
            if checksum:
                head = self.client.head_object(Bucket=self.bucket, Key=self._key(key),
                                               ChecksumMode="ENABLED")
            else:
                head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as error:
            if _is_missing(error):
                return None
            raise self._fail(action, error) from None
        except BotoCoreError as error:
            raise self._fail(action, error) from None
        return dict(head)

    def put_blob(self, path: Path, digest: str) -> bool:
        """Upload `path` under its digest unless the store holds exactly these bytes already
        (its checksum says so); then check the checksum S3 computed against ours."""
        key = blob_key(digest)
        size = path.stat().st_size
        present = self._head(digest)
        if present is not None and present.get("ContentLength") == size and \
                self._holds(digest, size, present, lambda: expected_checksum(path, digest, size)):
            self._records[digest] = stored_record(present)
            return False
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="checksum") as pool:
            # Hashing overlaps the upload (hashlib releases the GIL on large chunks).
            expected = pool.submit(expected_checksum, path, digest, size)
            try:
                if size < MULTIPART_THRESHOLD:
                    data = path.read_bytes()
                    if hashlib.sha256(data).hexdigest() != digest:
                        raise StoreError(f"{path} changed while it was published")
                    self._put_blob_object(digest, data)
                else:
                    self.client.upload_file(
                        str(path), self.bucket, self._key(key), Config=self.transfer,
                        ExtraArgs={"Metadata": {"sha256": digest},
                                   "ChecksumAlgorithm": "SHA256"})
            except (ClientError, BotoCoreError, Boto3Error) as error:
                raise self._fail(f"upload blob {digest[:12]}", error) from None
            self._confirm(digest, expected.result())
        return True

    def put_blob_bytes(self, data: bytes) -> tuple[str, bool]:
        digest = hashlib.sha256(data).hexdigest()
        present = self._head(digest)
        if present is not None and self._holds(digest, len(data), present, lambda: b64(digest)):
            self._records[digest] = stored_record(present)
            return digest, False
        try:
            self._put_blob_object(digest, data)
        except (ClientError, BotoCoreError) as error:
            raise self._fail(f"upload blob {digest[:12]}", error) from None
        self._confirm(digest, b64(digest))
        return digest, True

    def _put_blob_object(self, digest: str, data: bytes) -> None:
        """One PUT of a blob's bytes, with the SHA-256 checksum S3 is to check them against."""
        self.client.put_object(Bucket=self.bucket, Key=self._key(blob_key(digest)), Body=data,
                               ChecksumAlgorithm="SHA256", ChecksumSHA256=b64(digest),
                               Metadata={"sha256": digest})

    def _head(self, digest: str) -> dict[str, Any] | None:
        """The blob's HEAD with S3's checksum; None when it is absent."""
        return self._head_object(blob_key(digest), f"check blob {digest[:12]}", checksum=True)

    def _holds(self, digest: str, size: int, head: dict[str, Any],
               expected: Callable[[], str]) -> bool:
        """Whether a blob already present is exactly ours, so that publish may skip it."""
        if size < MULTIPART_THRESHOLD:
            return self.verify_blob(digest) is None
        answer = store_answer(head)
        return answer is not None and answer == expected()

    def _confirm(self, digest: str, expected: str) -> None:
        """After an upload: S3's own checksum, when it reports one, must be the one our bytes
        give (a store without SHA-256 checksums records none; promotion then re-hashes)."""
        head = self._head(digest)
        answer = None if head is None else store_answer(head)
        if head is None or answer not in (None, expected):
            raise StoreError(f"store {self.url}: blob {digest[:12]} does not hold the bytes "
                             f"just uploaded (S3 SHA-256 checksum {answer}, expected "
                             f"{expected}); nothing was published")
        self._records[digest] = stored_record(head)

    def blob_record(self, digest: str) -> dict[str, str] | None:
        """S3's checksum, ETag and version of a blob as published (kept in the manifest)."""
        if digest not in self._records:
            head = self._head(digest)
            if head is None:
                raise StoreError(f"store {self.url}: blob {digest[:12]} is missing")
            self._records[digest] = stored_record(head)
        return self._records[digest]

    def read_blob(self, digest: str) -> bytes:
        return read_verified(self, digest)

    def fetch_blob(self, digest: str, destination: Path) -> None:
        """Download a blob (multipart-parallel when large), then check its digest."""
        try:
            self.client.download_file(self.bucket, self._key(blob_key(digest)),
                                      str(destination), Config=self.transfer)
        except ClientError as error:
            destination.unlink(missing_ok=True)
            if _is_missing(error):
                raise StoreError(f"store {self.url}: blob {digest[:12]} is missing") from None
            raise self._fail(f"download blob {digest[:12]}", error) from None
        except (BotoCoreError, Boto3Error) as error:
            destination.unlink(missing_ok=True)
            cause = getattr(error, "last_exception", None) or error
            raise self._fail(f"download blob {digest[:12]}", cause) from None
        hasher = hashlib.sha256()
        with destination.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                hasher.update(chunk)
        if hasher.hexdigest() != digest:
            destination.unlink()
            raise StoreError(f"store {self.url}: blob {digest[:12]} does not match its digest")

    def check_blob(self, digest: str, size: int, recorded: str | None = None) -> str | None:
        """Before a pointer moves, as strongly as publish checked the bytes.

        A multipart blob: the composite SHA-256 S3 computed from the stored parts must be
        the one recorded at publish. S3 checks every part's SHA-256 against its bytes, so a
        writer cannot make it report the recorded value with other bytes. One HEAD, no copy.
        A single-part blob (under 64 MiB) is downloaded and re-hashed: its checksum is one
        the uploader sends, and not every S3 API checks it (moto 5 keeps any value).
        Where S3 reports no usable checksum, the blob is re-hashed too."""
        return self._check_object(blob_key(digest), f"blob {digest[:12]}", digest, size,
                                  recorded)

    def _check_object(self, key: str, label: str, digest: str, size: int | None,
                      recorded: str | None) -> str | None:
        """check_blob's check for any key: one HEAD where a multipart checksum was
        recorded, else the object streamed and re-hashed."""
        if size is None or size < MULTIPART_THRESHOLD or not recorded:
            return self._verify_object(key, label, digest)
        try:
            head = self._head_object(key, f"check {label}", checksum=True)
        except StoreError as error:
            return str(error)
        if head is None:
            return f"{label} is missing"
        if head.get("ContentLength") != size:
            return f"{label} has {head.get('ContentLength')} bytes, not {size}"
        answer = store_answer(head)
        if answer is None:
            return self._verify_object(key, label, digest)
        if answer != recorded:
            return (f"{label} is not the one published (S3 SHA-256 checksum "
                    f"{answer} differs from {recorded} recorded at publish; replaced in the "
                    "bucket?)")
        return None

    def create_file(self, key: str, path: Path, digest: str) -> dict[str, str] | None:
        """`path` written create-only under `key`. A file under 64 MiB is one PUT (None:
        nothing store-computed to keep, its check re-hashes it); a larger one is uploaded
        in parts (s3_multipart) and S3's composite checksum, checked against our bytes,
        is returned to be kept, so that later checks need one HEAD, not a download."""
        size = path.stat().st_size
        if size < MULTIPART_THRESHOLD:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                raise StoreError(f"{path} changed while it was published")
            self.create(key, data)
            return None
        try:
            upload_create_only(self.client, self.bucket, self._key(key), path, digest)
        except ClientError as error:
            if _is_precondition(error):
                raise ConflictError(f"store {self.url}: {key} already exists") from None
            raise self._fail(f"create {key}", error) from None
        except BotoCoreError as error:
            raise self._fail(f"create {key}", error) from None
        head = self._head_object(key, f"check {key}", checksum=True)
        answer = None if head is None else store_answer(head)
        expected = expected_checksum(path, digest, size)
        if head is None or answer not in (None, expected):
            raise StoreError(f"store {self.url}: {key} does not hold the bytes just uploaded "
                             f"(S3 SHA-256 checksum {answer}, expected {expected})")
        return {"bytes": str(size), **stored_record(head)} if answer else None

    def check_file(self, key: str, digest: str,
                   recorded: dict[str, str] | None = None) -> str | None:
        """A file `create_file` wrote, against its digest and what it returned."""
        size = int(recorded["bytes"]) if recorded and recorded.get("bytes") else None
        checksum = recorded.get("checksum_sha256") if recorded else None
        return self._check_object(key, key, digest, size, checksum or None)

    def caller_identity(self) -> dict[str, str]:
        """Who the store's credentials belong to, as STS answers (boto3's standard chain and
        endpoint settings); what went wrong when it does not answer. Never raises."""
        try:
            sts = boto3.client("sts", config=Config(
                retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=3,
                read_timeout=5))
            reply = sts.get_caller_identity()
        except (ClientError, BotoCoreError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            return {"unavailable": f"STS GetCallerIdentity failed: {reason}"}
        return {"arn": str(reply.get("Arn", "")), "account": str(reply.get("Account", "")),
                "user_id": str(reply.get("UserId", ""))}

    def verify_blob(self, digest: str) -> str | None:
        """Stream the blob and hash it; None when intact."""
        return self._verify_object(blob_key(digest), f"blob {digest[:12]}", digest)

    def _verify_object(self, key: str, label: str, digest: str) -> str | None:
        hasher = hashlib.sha256()
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            for chunk in body["Body"].iter_chunks(CHUNK):
                hasher.update(chunk)
        except ClientError as error:
            if _is_missing(error):
                return f"{label} is missing"
            return str(self._fail(f"read {label}", error))
        except FlexibleChecksumError:
            # botocore checks the bytes it read against the checksum the object carries.
            return (f"{label} is corrupt (its bytes do not match the checksum "
                    "stored with it)")
        except BotoCoreError as error:
            return str(self._fail(f"read {label}", error))
        if hasher.hexdigest() != digest:
            return f"{label} is corrupt (sha256 {hasher.hexdigest()[:12]})"
        return None

    # ------------------------------------------------------------------ keys

    def create(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                   IfNoneMatch="*")
        except ClientError as error:
            if _is_precondition(error):
                if self._retried_own_write(error, key, data):
                    return
                raise ConflictError(f"store {self.url}: {key} already exists") from None
            raise self._fail(f"create {key}", error) from None
        except BotoCoreError as error:
            raise self._fail(f"create {key}", error) from None

    def read(self, key: str) -> bytes | None:
        found = self.read_versioned(key)
        return None if found is None else found[0]

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            data = reply["Body"].read()
        except ClientError as error:
            if _is_missing(error):
                return None
            raise self._fail(f"read {key}", error) from None
        except BotoCoreError as error:
            raise self._fail(f"read {key}", error) from None
        length = reply.get("ContentLength")
        if length is not None and length != len(data):
            raise StoreError(f"store {self.url}: {key} arrived cut ({len(data)} of {length} "
                             "bytes)")
        return data, str(reply["ETag"])

    def write_if(self, key: str, data: bytes, expected_etag: str | None) -> None:
        condition = {"IfNoneMatch": "*"} if expected_etag is None else {"IfMatch": expected_etag}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                   **condition)  # type: ignore[arg-type]
        except ClientError as error:
            if (_is_precondition(error) or _is_missing(error)) and \
                    self._retried_own_write(error, key, data):
                return
            if _is_precondition(error) or _is_missing(error):
                raise ConflictError(
                    f"store {self.url}: {key} changed since it was read (another promotion "
                    "or rollback won the race); nothing was changed") from None
            raise self._fail(f"update {key}", error) from None
        except BotoCoreError as error:
            raise self._fail(f"update {key}", error) from None

    def _retried_own_write(self, error: ClientError, key: str, data: bytes) -> bool:
        """A conditional PUT whose reply was lost is retried by botocore and then fails its
        own precondition. If the key now holds exactly our bytes, the write succeeded
        (manifests, audit entries and pointer bodies are unique to each call)."""
        retried = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
        if not retried:
            return False
        try:
            found = self.read(key)
        except StoreError:
            return False
        return found == data

    def leftovers(self) -> list[Leftover]:
        """Multipart uploads under the prefix that were started and never completed or
        aborted (a writer killed mid-upload): S3 keeps and bills their parts until a
        lifecycle rule (AbortIncompleteMultipartUpload) or an abort removes them."""
        now = datetime.now(timezone.utc)
        strip = f"{self.prefix}/" if self.prefix else ""
        found = []
        try:
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                    Bucket=self.bucket, Prefix=strip):
                for upload in page.get("Uploads", []):
                    key = str(upload.get("Key", "")).removeprefix(strip)
                    started = upload.get("Initiated")
                    age = (now - started).total_seconds() if started is not None else 0.0
                    found.append(Leftover(f"incomplete upload of {key}", key, age,
                                          str(upload.get("UploadId", ""))))
        except (ClientError, BotoCoreError) as error:
            raise self._fail("list its incomplete uploads", error) from None
        return sorted(found, key=lambda leftover: -leftover.age_s)

    def remove_leftover(self, leftover: Leftover) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(leftover.key),
                                               UploadId=leftover.handle)
        except (ClientError, BotoCoreError) as error:
            raise self._fail(f"abort the upload of {leftover.key}", error) from None

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        folder = prefix.rstrip("/")
        # As a folder: "releases/m" must not list "releases/m2/...".
        full = self._key(folder) + "/" if folder else (f"{self.prefix}/" if self.prefix else "")
        strip = f"{self.prefix}/" if self.prefix else ""
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full):
                keys += [item["Key"].removeprefix(strip) for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as error:
            raise self._fail(f"list {prefix}", error) from None
        return sorted(keys)
