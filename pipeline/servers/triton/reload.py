"""Another config on a running tritonserver: its model-control API (explicit mode) loads
the model again with a new config.pbtxt."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from pipeline.servers.reconfiguration import call_api
from pipeline.servers.triton.artifact import build_repository
from pipeline.spec.models import LoadedSpec


def reload_model(base_url: str, loaded: LoadedSpec, model_file: Path, scratch: Path,
                 label: str, timeout_s: float) -> None:
    artifact = build_repository(loaded, model_file, scratch)
    config_json = json_format.MessageToJson(text_format.Parse(artifact.config_text,
                                                              pb.ModelConfig()))
    url = f"{base_url}/v2/repository/models/{loaded.spec.name}/load"
    body = json.dumps({"parameters": {"config": config_json}}).encode()
    call_api("triton", "POST", url, body, {"Content-Type": "application/json"}, timeout_s,
             label)
