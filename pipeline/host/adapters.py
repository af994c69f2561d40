"""Every contact the host has with the stages: parity (served outputs against the release's
own model run in-process, then the failure probes) on a server that is already up, through
the runner, as `compare` runs it."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

from pipeline.context import RunContext
from pipeline.runner import new_run_id, run_pipeline
from pipeline.servers.base import ModelServer
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import StageResult


def parity(loaded: LoadedSpec, server: ModelServer, model_file: Path, folder: Path,
           env: Mapping[str, str]) -> StageResult:
    """The parity stage on `server`; its record.json lands in `folder`. The server stays
    up: the runner closes only its own resources."""
    folder.mkdir(parents=True, exist_ok=True)
    with ExitStack() as own:
        ctx = RunContext(loaded=loaded, run_id=new_run_id(), run_dir=folder, env=dict(env),
                         resources=own, server=server)
        ctx.preload_reference(model_file)
        record = run_pipeline(ctx, command="serve", selected=frozenset({"parity"}))
    return next(stage for stage in record.stages if stage.name == "parity")
