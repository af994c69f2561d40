"""The examples published to a project's local store and exported for KServe, for the tests of
`export kserve` (tests/unit/test_export_kserve.py, tests/integration/test_kserve_schemas.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pipeline.export.kserve import export_kserve
from tests.support.example_releases import ExampleRelease, publish_example

STORAGE = "s3://models/serving/fraud-mlp/release"
EXAMPLES = {"triton": "serve.yaml", "torchserve": "examples/torchserve/serve.yaml"}


def release(project: Path, kind: str, **options: Any) -> ExampleRelease:
    spec = project / EXAMPLES[kind]
    scratch = Path(tempfile.mkdtemp(prefix=f".build-{kind}-", dir=project))
    return publish_example(spec, spec.parent / ".serve-pipeline" / "store", scratch,
                           **options)


def exported(example: ExampleRelease, canary: int | None = None) -> list[dict[str, Any]]:
    return export_kserve(example.store, example.manifest, STORAGE, canary).documents()


def ask_for_gpu_and_memory(project: Path) -> None:
    """The Triton example on device gpu with a serving-image memory limit of 8g."""
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("  device: cpu\n", "  device: gpu\n").replace(
        "  ports: {}", "  ports: {}\n  image: {memory_limit: 8g}"))
