"""Content digests: files, directory trees as deterministic tars, canonical JSON."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def deterministic_tar(root: Path, destination: Path) -> str:
    """Tar `root`'s contents with fixed order, times and owners; return its sha256.

    Same files in, same bytes out: a rebuild of an unchanged model gives the
    same digest and uploads nothing.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts or path.is_symlink():
                continue
            info = tarfile.TarInfo(relative)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                archive.addfile(info)
            else:
                data = path.read_bytes()
                info.size = len(data)
                info.mode = 0o644
                archive.addfile(info, io.BytesIO(data))
    payload = buffer.getvalue()
    destination.write_bytes(payload)
    return sha256_bytes(payload)


# Archive members that record when and by what an archive was built, not what it serves:
# torch-model-archiver's MANIFEST.json carries its build time.
_BUILD_NOTES = frozenset({"MAR-INF/MANIFEST.json"})


def content_digest(archive: Path) -> str | None:
    """The sha256 of what an artifact archive (tar or zip) holds: every file's name and
    bytes in name order, apart from its build notes; two builds of the same files give the
    same digest even where the archive's own bytes carry a build time. None when `archive`
    is neither, or cannot be read."""
    files: dict[str, str] = {}
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as bundle:
                for member in bundle.getmembers():
                    extracted = bundle.extractfile(member) if member.isfile() else None
                    if extracted is not None:
                        files[member.name] = sha256_bytes(extracted.read())
        elif zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as bundle:
                for name in bundle.namelist():
                    if not name.endswith("/"):
                        files[name] = sha256_bytes(bundle.read(name))
        else:
            return None
    except (OSError, tarfile.TarError, zipfile.BadZipFile):
        return None
    listed = {name: digest for name, digest in files.items() if name not in _BUILD_NOTES}
    return sha256_bytes(canonical_json(listed))
