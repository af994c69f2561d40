"""Where the model file comes from: a path next to the spec, or DVC at a git revision.

A DVC source is read with `dvc.api` at the given rev (from the repository's
remote, with credentials from the environment), written into the run folder,
and recorded as path@rev with the resolved commit and DVC's own checksum.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.spec.models import DvcLocation, LoadedSpec

CHUNK = 1 << 20
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://|^git@")


@dataclass(frozen=True)
class ResolvedSource:
    file: Path
    description: str
    provenance: dict[str, Any]


def resolve_model_source(loaded: LoadedSpec, destination: Path) -> ResolvedSource:
    source = loaded.spec.model.source
    if source.path is not None:
        file = loaded.resolve(source.path)
        if not file.is_file():
            raise PipelineError(f"model.source: model file not found: {file}")
        return ResolvedSource(file, source.path, {"kind": "path", "path": source.path})
    assert source.dvc is not None
    return _from_dvc(loaded, source.dvc, destination)


def dvc_repo(loaded: LoadedSpec, location: DvcLocation) -> str:
    """A URL as given; a local path relative to the spec's folder."""
    return location.repo if _URL.match(location.repo) else str(loaded.resolve(location.repo))


def _from_dvc(loaded: LoadedSpec, location: DvcLocation, destination: Path) -> ResolvedSource:
    try:
        from dvc.api import DVCFileSystem
    except ImportError:  # pragma: no cover - dvc is a dependency
        raise PipelineError("model.source.dvc: the dvc package is not installed") from None
    repo = dvc_repo(loaded, location)
    where = f"{location.path}@{location.rev or 'HEAD'} in {location.repo}"
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / Path(location.path).name
    hasher = hashlib.sha256()
    try:
        filesystem = DVCFileSystem(repo, rev=location.rev)
        info = filesystem.info(location.path)
        with filesystem.open(location.path, mode="rb") as remote, target.open("wb") as local:
            while chunk := remote.read(CHUNK):
                hasher.update(chunk)
                local.write(chunk)
        commit = _commit_of(filesystem, location.rev or "HEAD")
    except PipelineError:
        raise
    except Exception as exc:  # dvc raises many kinds; each is the user's source, in one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PipelineError(f"model.source.dvc: cannot read {where}: {reason}") from None
    provenance = {"kind": "dvc", "path": location.path, "repo": location.repo,
                  "rev": location.rev, "commit": commit,
                  "dvc_md5": info.get("md5"), "size": info.get("size")}
    description = f"{location.path}@{location.rev or commit or 'HEAD'}"
    return ResolvedSource(target, description, provenance)


def _commit_of(filesystem: Any, rev: str) -> str | None:
    try:
        return str(filesystem.repo.scm.resolve_rev(rev))
    except Exception:  # not every repository kind exposes it; provenance keeps the rev
        return None
