"""`validate` and `schema`: the spec on its own."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out


def validate(file: SpecFile = DEFAULT_SPEC,
             env: Annotated[str | None, typer.Option("--env", help="Merge this environment's "
                                                     "overlay first.")] = None) -> None:
    """Check a spec (and an environment overlay); exit 2 with file:line:col on errors."""
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, env)
    spec = loaded.spec
    queue = spec.slo.queue_budget()
    out().print(f"{' + '.join(loaded.files)}: valid ({spec.name}, {spec.server.kind}, "
              f"queue budget {queue} for max_queue_delay "
              f"{spec.server.batching.max_queue_delay})")


def schema() -> None:
    """Print the JSON schema of serve.yaml version 1."""
    from pipeline.servers.specs import json_schema
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
