"""Another config on a running TorchServe: its model API (off in production configs,
`enable_model_api`) unregisters the model and registers the config's own archive."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlencode

from pipeline.servers.reconfiguration import call_api
from pipeline.servers.torchserve.artifact import build_archive
from pipeline.servers.torchserve.properties import max_batch_delay_ms, model_entry
from pipeline.spec.models import LoadedSpec


def register_config(management_url: str, auth: dict[str, str], store: Path,
                    loaded: LoadedSpec, model_file: Path, scratch: Path, label: str,
                    timeout_s: float) -> None:
    spec = loaded.spec
    artifact = build_archive(loaded, model_file, scratch)
    archive = f"{spec.name}-{scratch.name}.mar"
    shutil.copyfile(artifact.archive, store / archive)
    call_api("torchserve", "DELETE", f"{management_url}/models/{spec.name}", b"", auth,
             timeout_s, label)
    query = urlencode({"url": archive, "model_name": spec.name,
                       "batch_size": spec.server.batching.max_batch_size,
                       "max_batch_delay": max_batch_delay_ms(spec),
                       "initial_workers": spec.server.instances,
                       "response_timeout": model_entry(spec)["responseTimeout"],
                       "synchronous": "true"})
    call_api("torchserve", "POST", f"{management_url}/models?{query}", b"", auth, timeout_s,
             label)
