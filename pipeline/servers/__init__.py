"""Model servers: render their configs, start them, watch them."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pipeline.model.source import resolve_model_source
from pipeline.servers.base import ModelServer, ServerKind
from pipeline.servers.ports import loopback_ports
from pipeline.spec.models import LoadedSpec


def server_kind(name: str) -> ServerKind:
    from pipeline.servers.kinds import KINDS

    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown server kind {name!r}") from None


@contextmanager
def serving(loaded: LoadedSpec, workdir: Path, *, model_file: Path | None = None,
            ports: Mapping[str, int] | None = None,
            env: Mapping[str, str] | None = None) -> Iterator[ModelServer]:
    """Build the spec's artifact in `workdir/build`, serve it from `workdir/server` as a
    local process on loopback (`ports` where given, free ones otherwise), wait until it is
    ready (the spec's readiness timeout), yield it, and stop it.

    `workdir` must not hold an earlier build; `model_file` defaults to the spec's
    `model.source` (a path, or fetched from DVC into `workdir/model-source`)."""
    kind = server_kind(loaded.spec.server.kind)
    source = model_file or resolve_model_source(loaded, workdir / "model-source").file
    artifact = kind.build(loaded, source, workdir / "build")
    server = kind.launch(loaded, artifact, loopback_ports(kind.port_names, ports),
                         workdir / "server", dict(os.environ if env is None else env))
    with server:
        yield server
