"""A release store in a local directory: atomic create-only writes, compare-and-swap by a
lock-free rename."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pipeline.errors import ConflictError, StoreError
from pipeline.release.store.base import Leftover, blob_key, read_verified

CHUNK = 1 << 20


def unwritable_reason(folder: Path) -> str:
    """Why this process cannot write into `folder` (os.access said so): a read-only file
    system (permissions would not help: root cannot write there either), or permissions."""
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return "is on a read-only file system (EROFS)"
    return "is not writable by this user (EACCES): fix its permissions"


class LocalStore:
    """A directory. Writes go to a temp file that is fsynced and then linked or renamed
    into place, so a reader never sees half a file and a crash leaves only temp files."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"invalid store key {key!r}")
        return self.root / key

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            if isinstance(exc, FileExistsError):
                raise
            reason = exc.strerror or str(exc)
            raise StoreError(f"store {self.url}: cannot {action}: {reason}") from None

    def _temp(self, final: Path) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        return final.parent / f".{final.name}.{secrets.token_hex(6)}.tmp"

    @staticmethod
    def _fsync_dir(folder: Path) -> None:
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _write_temp(self, final: Path, data: bytes) -> Path:
        """A synced temp file beside `final`; none is left when writing it fails (a full
        disk), so a failed write leaves the store as it was."""
        temp = self._temp(final)
        try:
            with temp.open("wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise
        return temp

    def _write_replacing(self, final: Path, data: bytes) -> None:
        """`data` in place of `final`, atomically: a synced temp file renamed over it."""
        temp = self._write_temp(final, data)
        try:
            os.replace(temp, final)
            self._fsync_dir(final.parent)
        finally:
            temp.unlink(missing_ok=True)

    def has_blob(self, digest: str) -> bool:
        return self._path(blob_key(digest)).is_file()

    def put_blob(self, path: Path, digest: str) -> bool:
        """Copy `path` in under its digest unless present and intact (re-hashed: a corrupt
        copy is replaced now, not found at promotion); True when bytes were written."""
        final = self._path(blob_key(digest))
        if final.is_file() and self.verify_blob(digest) is None:
            return False
        with self._errors(f"write blob {digest[:12]}"):
            self._copy_in(path, digest, final, os.replace)
        return True

    def _copy_in(self, path: Path, digest: str, final: Path,
                 place: Callable[[Path, Path], None]) -> None:
        """`path` copied to a synced temp file beside `final`, hashed on the way (refused
        when it is no longer `digest`), then put in place by `place(temp, final)`."""
        temp = self._temp(final)
        try:
            copied = _copy_hashing(path, temp, durable=True)
            if copied != digest:
                raise StoreError(f"{path} changed while it was published: sha256 "
                                 f"{copied[:12]} is not {digest[:12]}")
            place(temp, final)
            self._fsync_dir(final.parent)
        finally:
            temp.unlink(missing_ok=True)

    def put_blob_bytes(self, data: bytes) -> tuple[str, bool]:
        digest = hashlib.sha256(data).hexdigest()
        final = self._path(blob_key(digest))
        if final.is_file() and self.verify_blob(digest) is None:
            return digest, False
        with self._errors(f"write blob {digest[:12]}"):
            self._write_replacing(final, data)
        return digest, True

    def read_blob(self, digest: str) -> bytes:
        return read_verified(self, digest)

    def fetch_blob(self, digest: str, destination: Path) -> None:
        """Copy a blob out, checking its digest on the way; nothing is left on a mismatch."""
        try:
            copied = _copy_hashing(self._path(blob_key(digest)), destination)
        except FileNotFoundError:
            destination.unlink(missing_ok=True)
            raise StoreError(f"store {self.url}: blob {digest[:12]} is missing") from None
        if copied != digest:
            destination.unlink(missing_ok=True)
            raise StoreError(f"store {self.url}: blob {digest[:12]} does not match its digest")

    def verify_blob(self, digest: str) -> str | None:
        """None if the blob is there and intact, else what is wrong."""
        return self._verify_file(self._path(blob_key(digest)), f"blob {digest[:12]}", digest)

    @staticmethod
    def _verify_file(path: Path, label: str, digest: str) -> str | None:
        hasher = hashlib.sha256()
        try:
            with path.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    hasher.update(chunk)
        except FileNotFoundError:
            return f"{label} is missing"
        except OSError as exc:
            return f"{label} cannot be read: {exc.strerror}"
        if hasher.hexdigest() != digest:
            return f"{label} is corrupt (sha256 {hasher.hexdigest()[:12]})"
        return None

    def create_file(self, key: str, path: Path, digest: str) -> dict[str, str] | None:
        """`path` copied in create-only under `key`, streamed and hashed on the way (a
        file system computes no checksum of its own: None, nothing to keep)."""
        final = self._path(key)
        with self._errors(f"create {key}"):
            try:
                self._copy_in(path, digest, final, os.link)
            except FileExistsError:
                raise ConflictError(f"store {self.url}: {key} already exists") from None
        return None

    def check_file(self, key: str, digest: str,
                   recorded: dict[str, str] | None = None) -> str | None:
        """A file `create_file` wrote, re-hashed (streamed)."""
        return self._verify_file(self._path(key), key, digest)

    def check_blob(self, digest: str, size: int, recorded: str | None = None) -> str | None:
        """Before a pointer moves. A local file system computes no checksum of its own, and
        re-hashing a local file is cheap (about 1 s per GiB), so this is the full check."""
        return self.verify_blob(digest)

    def blob_record(self, digest: str) -> dict[str, str] | None:
        """Nothing store-computed to keep: promotion re-hashes local blobs."""
        return None

    def caller_identity(self) -> dict[str, str] | None:
        """A directory has no credentials to name."""
        return None

    def create(self, key: str, data: bytes) -> None:
        final = self._path(key)
        with self._errors(f"create {key}"):
            temp = self._write_temp(final, data)
            try:
                os.link(temp, final)
                self._fsync_dir(final.parent)
            except FileExistsError:
                raise ConflictError(f"store {self.url}: {key} already exists") from None
            finally:
                temp.unlink(missing_ok=True)

    def read(self, key: str) -> bytes | None:
        with self._errors(f"read {key}"):
            try:
                return self._path(key).read_bytes()
            except FileNotFoundError:
                return None

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        data = self.read(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def write_if(self, key: str, data: bytes, expected_etag: str | None) -> None:
        """Replace `key` only if it still has `expected_etag` (None: only if absent).

        An flock on a lock file serialises writers; the kernel drops it if we die,
        so no stale lock survives a crash. The swap itself is an atomic rename.
        """
        final = self._path(key)
        with self._errors(f"update {key}"):
            final.parent.mkdir(parents=True, exist_ok=True)
            lock_path = final.parent / f".{final.name}.lock"
            with lock_path.open("a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                current = self.read_versioned(key)
                current_etag = None if current is None else current[1]
                if current_etag != expected_etag:
                    raise ConflictError(
                        f"store {self.url}: {key} changed since it was read (another "
                        "promotion or rollback won the race); nothing was changed")
                self._write_replacing(final, data)

    def leftovers(self) -> list[Leftover]:
        """Temp files (`.<name>.<hex>.tmp`) of writers that died before their rename."""
        if not self.root.is_dir():
            return []
        now = time.time()
        found = []
        with self._errors("list its temp files"):
            for path in self.root.rglob(".*.tmp"):
                with contextlib.suppress(FileNotFoundError):   # renamed meanwhile
                    age = now - path.stat().st_mtime
                    found.append(Leftover(f"temp file {path.name}",
                                          path.relative_to(self.root).as_posix(), age))
        return sorted(found, key=lambda leftover: -leftover.age_s)

    def remove_leftover(self, leftover: Leftover) -> None:
        path = self._path(leftover.key)
        if not path.name.endswith(".tmp") or not path.name.startswith("."):
            raise StoreError(f"store {self.url}: {leftover.key} is not a temp file")
        with self._errors(f"remove {leftover.key}"):
            path.unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return []
        with self._errors(f"list {prefix}"):
            return sorted(
                p.relative_to(self.root).as_posix() for p in folder.rglob("*")
                if p.is_file() and not p.name.startswith("."))


def _copy_hashing(source: Path, destination: Path, durable: bool = False) -> str:
    """Copy `source` to `destination` in chunks (fsynced when `durable`); the sha256 hex
    digest of the bytes copied."""
    hasher = hashlib.sha256()
    with source.open("rb") as reader, destination.open("wb") as writer:
        while chunk := reader.read(CHUNK):
            hasher.update(chunk)
            writer.write(chunk)
        if durable:
            writer.flush()
            os.fsync(writer.fileno())
    return hasher.hexdigest()
