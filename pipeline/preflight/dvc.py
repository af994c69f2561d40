"""The model source: a local file exists and looks like the declared format
(pipeline.model.file_kind); a DVC source resolves at its rev (the git revision exists and
tracks the path). Only metadata is read, nothing is downloaded."""

from __future__ import annotations

from pipeline.model.file_kind import format_problem
from pipeline.model.source import dvc_repo
from pipeline.preflight.checks import Check
from pipeline.spec.models import LoadedSpec


def dvc_checks(loaded: LoadedSpec) -> list[Check]:
    source = loaded.spec.model.source
    location = source.dvc
    if location is None:
        file = loaded.resolve(str(source.path))
        if not file.is_file():
            return [Check.failed("model.source", f"model file not found: {file}")]
        try:
            problem = format_problem(file, loaded.spec.model.format)
        except OSError as error:
            problem = f"cannot be read: {error.strerror or error}"
        if problem is not None:
            return [Check.failed("model.source", f"{file}: {problem}")]
        return [Check.ok("model.source", f"{file} ({loaded.spec.model.format})")]
    where = f"{location.path}@{location.rev or 'HEAD'} in {location.repo}"
    try:
        from dvc.api import DVCFileSystem

        filesystem = DVCFileSystem(dvc_repo(loaded, location), rev=location.rev)
        info = filesystem.info(location.path)
    except Exception as error:  # dvc raises many kinds; each is the user's source
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return [Check.failed("model.source", f"model.source.dvc: cannot resolve {where}: "
                                             f"{reason} (fix rev, path or repo, or push the "
                                             "rev)")]
    size = info.get("size")
    shown = f", {int(size) / 2**20:.1f} MiB" if isinstance(size, int) else ""
    return [Check.ok("model.source", f"{where} resolves (md5 {info.get('md5')}{shown})")]
