"""The release store: reachable, the bucket or folder there, the credentials able to read
and write under the prefix, the environment pointer readable, and (for a policy that takes
a release from another environment) that release present. Nothing is written."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import PipelineError, PolicyError, StoreError
from pipeline.preflight.checks import POLICY, SETUP, STORE, Check
from pipeline.preflight.promotion import promotion_checks
from pipeline.preflight.scope import Scope
from pipeline.release.manifest import read_manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.policy import source_release
from pipeline.release.store.base import Store
from pipeline.release.store.local import LocalStore, unwritable_reason
from pipeline.spec.models import LoadedSpec

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

    from pipeline.release.store.s3 import S3Store

NAME = "store"
# A dead endpoint must fail in seconds, not after the store's 5 patient attempts.
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 5
ATTEMPTS = 2
_REFUSED_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                        "ExpiredToken", "InvalidClientTokenId", "AuthFailure")


def store_checks(loaded: LoadedSpec, scope: Scope) -> list[Check]:
    if not (scope.publishes or scope.needs_release):
        return [Check.skipped(NAME, "this command reads and writes no release")]
    url = loaded.spec.publish.store
    if url.startswith("s3://"):
        store, check = _s3(url, loaded.spec.publish.endpoint_url)
    elif url.startswith("file://"):
        store, check = _local(url, loaded.workspace)
    else:
        return [Check.failed(NAME, f"{url}: unknown scheme: publish.store takes file://PATH "
                                   "or s3://BUCKET/PREFIX", SETUP)]
    checks = [check]
    if store is None:
        return checks
    if scope.environment is not None:
        checks.append(_pointer(store, loaded, scope.environment))
    if scope.needs_release and scope.environment is not None and checks[-1].status == "ok":
        checks.append(_release(store, loaded, scope.environment))
        if checks[-1].status == "ok":
            release_id = source_release(store, loaded, None)
            checks += promotion_checks(store, loaded, scope.environment, release_id)
    return checks


def _local(url: str, workspace: Path) -> tuple[Store | None, Check]:
    location = Path(url.removeprefix("file://"))
    root = location if location.is_absolute() else workspace / location
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return None, Check.failed(NAME, f"{url}: {existing} is not a folder: fix publish.store",
                                  STORE)
    if not os.access(existing, os.W_OK | os.X_OK):
        return None, Check.failed(NAME, f"{url}: {existing} {unwritable_reason(existing)}, "
                                        "or change publish.store", STORE)
    shown = "exists" if existing == root else f"will be created in {existing}"
    return LocalStore(root, url), Check.ok(NAME, f"{url}: {root} {shown}, writable")


def _s3(url: str, endpoint_url: str | None) -> tuple[Store | None, Check]:
    import boto3
    from botocore.config import Config

    from pipeline.release.store.s3 import S3Store

    try:
        store = S3Store(url, endpoint_url, attempts=ATTEMPTS)
    except StoreError as error:
        return None, Check.failed(NAME, f"{error}: fix publish.store", SETUP)
    store.client = boto3.client(
        "s3", endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
                      connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S))
    problem = _s3_problem(store)
    if problem is not None:
        return None, Check.failed(NAME, problem, STORE)
    where = store.client.meta.endpoint_url
    return store, Check.ok(NAME, f"{url} at {where}: bucket found, credentials can list, "
                                 "read and write under the prefix")


def _s3_problem(store: S3Store) -> str | None:
    """List one key under the prefix (reachable, bucket, credentials, list permission), then
    a write that S3 authorises before it refuses it on its precondition: If-Match on a key
    that does not exist. A store that writes it anyway ignores conditional writes, which
    compare-and-swap needs."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    prefix = f"{store.prefix}/" if store.prefix else ""
    endpoint = store.client.meta.endpoint_url
    try:
        store.client.list_objects_v2(Bucket=store.bucket, Prefix=prefix, MaxKeys=1)
    except EndpointConnectionError:
        return (f"{store.url}: cannot connect to {endpoint}: start the store, or fix "
                "publish.endpoint_url / AWS_ENDPOINT_URL_S3")
    except ClientError as error:
        return _refusal(store, error, "list", "s3:ListBucket on the bucket")
    except BotoCoreError as error:
        return str(store._fail("list the bucket", error))
    probe = f"{prefix}.serve-pipeline-preflight-{secrets.token_hex(8)}"
    try:
        store.client.put_object(Bucket=store.bucket, Key=probe, Body=b"",
                                IfMatch='"preflight-no-such-etag"')
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "PreconditionFailed", "412"):
            return None
        return _refusal(store, error, "write", f"s3:PutObject on arn:aws:s3:::{store.bucket}/"
                                               f"{prefix}*")
    except BotoCoreError as error:
        return str(store._fail("write a probe", error))
    store.client.delete_object(Bucket=store.bucket, Key=probe)
    return (f"{store.url}: the store ignored If-Match on a missing key, so it would not "
            "protect environment pointers from racing writers: use a store with conditional "
            "writes (AWS S3, MinIO, Ceph)")


def _refusal(store: S3Store, error: ClientError, action: str, permission: str) -> str:
    detail = error.response.get("Error", {})
    code = str(detail.get("Code", "?"))
    where = f"s3://{store.bucket}/{store.prefix}" if store.prefix else f"s3://{store.bucket}"
    if code in ("NoSuchBucket", "404"):
        return (f"{store.url}: bucket {store.bucket} does not exist at "
                f"{store.client.meta.endpoint_url}: create it, or fix publish.store")
    if code in _REFUSED_CREDENTIALS:
        return (f"{store.url}: the credentials were refused ({code}): fix AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY (or the profile or role)")
    if code in ("AccessDenied", "403", "AllAccessDisabled"):
        return (f"{store.url}: the credentials may not {action} under {where}/ ({code}): "
                f"grant {permission}")
    return str(store._fail(f"{action} under {where}/", error))


def _pointer(store: Store, loaded: LoadedSpec, environment: str) -> Check:
    name = f"{NAME}.pointer"
    try:
        pointer, _ = read_pointer(store, loaded.spec.name, environment)
    except StoreError as error:
        return Check.failed(name, f"cannot read the {environment} pointer: {error}", STORE)
    current = pointer.current or "nothing yet"
    return Check.ok(name, f"{environment} points at {current}")


def _release(store: Store, loaded: LoadedSpec, environment: str | None) -> Check:
    name = f"{NAME}.release"
    source = ", ".join(loaded.policy.requires)
    try:
        release_id = source_release(store, loaded, None)
        read_manifest(store, loaded.spec.name, release_id)
    except PolicyError as error:
        return Check.failed(name, f"{error} (environments/{environment}.yaml requires "
                                  f"{source})", POLICY)
    except PipelineError as error:   # the pointer names a release the store lacks
        return Check.failed(name, str(error), STORE)
    return Check.ok(name, f"release {release_id} is current in {source}")
