"""config.pbtxt fields the spec does not model (`server.triton.config`), on a real
tritonserver: a response cache and a warm-up sample reach the config the server serves and
the released config, the server runs with its cache on, and the promotion passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.servers import http
from tests.support.cli import cli, latest_record, stage_details, start_cli, wait_for_stage

pytestmark = pytest.mark.integration

PASSTHROUGH = """  triton:
    config:
      response_cache: {enable: true}
      model_warmup:
        - name: one-random-item
          batch_size: 1
          inputs:
            features: {data_type: TYPE_FP32, dims: [16], random_data: true}
    cache_size: 8MiB
"""


def test_a_response_cache_and_a_warmup_reach_the_served_config(fast_project: Path) -> None:
    spec = fast_project / "serve.yaml"
    text = spec.read_text()
    # A longer warm-up keeps the server up (the latency stage) while its config is read.
    assert text.count("warmup: 500ms") == 1 and text.count("\nslo:") == 1
    spec.write_text(text.replace("warmup: 500ms", "warmup: 5s")
                    .replace("\nslo:", "\n" + PASSTHROUGH + "\nslo:"))
    process = start_cli(["promote", "staging"], fast_project)
    try:
        started = stage_details(wait_for_stage(fast_project, "latency"), "start")
        reply = http.call("GET", f"http://127.0.0.1:{started['ports']['http']}"
                          "/v2/models/fraud-mlp/config", timeout_s=10)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert reply.status == 200, reply.text()
    served = json.loads(reply.body)
    assert served["response_cache"] == {"enable": True}
    assert [w["name"] for w in served["model_warmup"]] == ["one-random-item"]
    assert served["model_warmup"][0]["inputs"]["features"]["random_data"] is True
    assert served["max_batch_size"] == 32
    assert served["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert process.returncode == 0, stdout + stderr

    # A model's response_cache is silently off unless tritonserver starts with a cache.
    cache_lines = [line for line in Path(started["log"]).read_text().splitlines()
                   if line.startswith("| cache_enabled ")]
    assert [line.split("|")[2].strip() for line in cache_lines] == ["1"]

    record = latest_record(fast_project)
    assert record["status"] == "passed" and record["release_id"] is not None
    shown = cli(["report", record["release_id"], "--format", "html"], fast_project)
    assert shown.returncode == 0, shown.stderr
    assert "response_cache {" in shown.stdout and 'name: "one-random-item"' in shown.stdout
