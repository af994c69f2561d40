"""A model with a variable-length integer input and string (BYTES) inputs and outputs,
promoted on real servers: Triton gets TYPE_STRING and the binary tensor extension's
length-prefixed strings, TorchServe JSON strings; parity compares the strings exactly, so
a served model whose text differs from the source model's fails on its named gate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeline import servers
from pipeline.model.tensors import load_samples, take
from pipeline.servers.base import send
from pipeline.servers.specs import load_spec
from pipeline.spec.strings import string_array
from tests.support.cli import cli, latest_record
from tests.support.processes import TORCHSERVE, TRITON, processes_under
from tests.support.specs import SHORT_RUN_ERROR_RATE, with_stages

pytestmark = pytest.mark.integration

# Short: these tests are about the tensors, not measurement (a percentile a 2 s window
# leaves undecided is accepted within its threshold).
STAGES = """
stages:
  readiness: {timeout: 240s}
  parity: {atol: 1e-4, rtol: 1e-4}
  failure: {probes: [wrong_shape, wrong_dtype, missing_input, unknown_model]}
  latency: {data: requests.jsonl, concurrency: 2, warmup: 500ms, duration: 2s,
            stability: {windows: 1, max_windows: 2}, verdict: {accept_inconclusive: true}}
  saturation: {enabled: false}
"""
SPECS = {"triton": "serve.yaml", "torchserve": "serve.torchserve.yaml"}
# Agrees with the reference in the pipeline's process, but the server's copy answers
# another label: what a stale artifact or a changed tokenizer does.
SERVED_DIFFERENTLY = """import sys

import torch


class Labeller(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 3)

    def forward(self, tokens: torch.Tensor, text: list[str]):
        scores = self.linear(tokens.float().mean(dim=1, keepdim=True))
        served = any(name in sys.modules for name in ("triton_python_backend_utils", "ts"))
        return scores, [("served " if served else "") + line.lower() for line in text]


def build() -> torch.nn.Module:
    return Labeller()
"""


def text_project(project: Path, kind: str) -> Path:
    folder = project / "examples" / "bag_of_words"
    spec = folder / SPECS[kind]
    spec.write_text(with_stages(spec.read_text().replace(*SHORT_RUN_ERROR_RATE), STAGES))
    return spec


def stage(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in record["stages"] if s["name"] == name)
    return found


@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_a_text_model_promotes_with_string_tensors(project: Path, kind: str) -> None:
    """With the data file and the replay log shipped beside the example."""
    spec = text_project(project, kind)
    # The subject is the strings, through every stage: the replay's open-loop tail on a
    # busy 2-core machine (its client behind the log, a p99 of 160 ms seen) is not.
    text = re.sub(r"\n  p99: \d+ms\n  p95: \d+ms\n", "\n  p99: 1s\n  p95: 600ms\n",
                  spec.read_text(), count=1)
    spec.write_text(text.replace(
        "  saturation: {enabled: false}",
        "  replay: {log: arrivals.jsonl, warmup: 500ms}\n  saturation: {enabled: false}"))
    result = cli(["promote", "staging", "-f", str(spec)], project)
    assert result.returncode == 0, result.stdout + result.stderr
    record = latest_record(spec.parent)
    assert record["status"] == "passed", record["stages"]
    parity = stage(record, "parity")
    gates = {g["name"]: g for g in parity["gates"]}
    assert gates["parity.output_dtype"]["observed"] == "scores float32, label string"
    assert gates["parity.output_contract"]["passed"]
    assert parity["metrics"]["parity_mismatched"] == 0
    probes = {p["probe"]: p for p in parity["details"]["probes"]}
    for name in ("wrong_shape", "wrong_dtype", "missing_input"):
        assert all(400 <= e["status"] < 500 for e in probes[name]["by_size"]), probes[name]
    assert list(stage(record, "latency")["details"]["sizes"]) == ["4", "16", "64"]
    replay = stage(record, "replay")
    logged = len((spec.parent / "arrivals.jsonl").read_text().splitlines())
    assert replay["status"] == "passed", replay
    assert replay["metrics"]["requests"] == logged and replay["metrics"]["errors"] == 0
    if kind == "triton":
        wrote = cli(["materialize", "staging", "--to", "served", "-f", str(spec)], project)
        assert wrote.returncode == 0, wrote.stderr
        config = (project / "served" / "bag-of-words" / "config.pbtxt").read_text()
        assert config.count("data_type: TYPE_STRING") == 2, config
    marks = TRITON if kind == "triton" else TORCHSERVE
    assert processes_under(spec.parent, marks) == []


@pytest.mark.parametrize("kind", ["triton", "torchserve"])
def test_a_served_model_answering_other_strings_fails_parity(project: Path, kind: str
                                                            ) -> None:
    import torch

    spec = text_project(project, kind)
    (spec.parent / "labeller.py").write_text(SERVED_DIFFERENTLY)
    torch.manual_seed(0)
    torch.save({f"linear.{k}": v for k, v in torch.nn.Linear(1, 3).state_dict().items()},
               spec.parent / "labeller.pt")
    text = spec.read_text().replace("source: model.pt", "source: labeller.pt").replace(
        "format: torchscript", "format: eager\n  entrypoint: labeller.py:build")
    spec.write_text(text)
    result = cli(["run", "--stages", "parity", "-f", str(spec)], project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    parity = stage(latest_record(spec.parent), "parity")
    failed = {g["name"]: g for g in parity["gates"] if not g["passed"]}
    assert set(failed) == {"parity.mismatched_elements"}, failed
    # Every label differs, every score agrees: at each of 3 sizes, the first 8 of the 16
    # samples alone, then all 16 in two batches of 8 (max_batch_size).
    assert failed["parity.mismatched_elements"]["observed"] == 3 * (8 + 16)


def test_grpc_load_sends_length_prefixed_strings_to_triton(project: Path) -> None:
    """gRPC carries a BYTES tensor in its raw contents, each string after its length; a
    spec with variable sizes sends over HTTP, so this variant fixes the token count."""
    spec = text_project(project, "triton")
    text = spec.read_text().replace("{name: tokens, dtype: int64, shape: [-1]}",
                                    "{name: tokens, dtype: int64, shape: [8]}")
    sizes = text.index("  sizes:")
    text = text[:sizes] + text[text.index("\nserver:", sizes) + 1:]
    spec.write_text(text.replace("latency: {data: requests.jsonl,", "latency: {protocol: grpc,"))
    result = cli(["run", "--stages", "parity,latency", "-f", str(spec)], project)
    record = latest_record(spec.parent)
    assert stage(record, "parity")["status"] == "passed", result.stdout + result.stderr
    latency = stage(record, "latency")
    gates = {g["name"]: g for g in latency["gates"]}
    assert gates["latency.error_rate"]["passed"], latency
    assert latency["metrics"]["errors"] == 0 and latency["metrics"]["server_requests"] > 0


def test_compare_serves_the_text_model_on_both_servers(project: Path) -> None:
    spec = project / "examples" / "bag_of_words" / "serve.yaml"
    result = cli(["compare", "-f", str(spec), "--rounds", "2", "--window", "0.5",
                  "--max-concurrency", "2", "--no-capacity", "--format", "json"], project,
                 timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record: dict[str, Any] = json.loads(result.stdout)
    assert "TorchServe: JSON" in record["client"]["differs"]
    for kind in ("triton", "torchserve"):
        server = record["servers"][kind]
        assert server["status"] == "measured", server
        assert server["throughput_at_slo"] is not None, server
        raised = server["failure_path"]["model_exception"]
        # The stand-in answers the handler's all-empty warm-up strings, raises on text.
        assert raised["status"] == 500 and raised["stays_up"] is True, raised
    assert processes_under(spec.parent, TRITON) == []
    assert processes_under(spec.parent, TORCHSERVE) == []


def test_triton_refuses_strings_that_are_not_utf8_in_their_own_request(project: Path,
                                                                      tmp_path: Path) -> None:
    loaded = load_spec(text_project(project, "triton"))
    samples = load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
    good = take(samples, 2)
    bad = {**good, "text": string_array([b"late \xff parcel", b"fine"], (2, 1))}
    with servers.serving(loaded, tmp_path) as server:
        refused = send(server.infer_request(bad), 30.0)
        answered = send(server.infer_request(good), 30.0)
        assert refused.status == 400, refused.text()
        assert "input 'text': not UTF-8 text" in refused.text()
        assert answered.status == 200, answered.text()
        assert server.alive() and server.is_ready()
