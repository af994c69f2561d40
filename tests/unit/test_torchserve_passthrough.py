"""`server.torchserve.config` and `.model`: config.properties keys and model-level settings
the spec does not model, checked against TorchServe's own names at validate time (a typo is
an error at its file:line), refused where the spec or serve-pipeline sets the key, and
written into the rendered config.properties."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.properties import (
    check_properties,
    parse_properties,
    render_properties,
)
from pipeline.servers.torchserve.spec import TORCHSERVE_SPEC
from tests.support.spec_edits import line_of, spec_issues, with_server_block

REPO = Path(__file__).resolve().parents[2]
BLOCK = """  torchserve:
    config:
      job_queue_size: 500
      async_logging: true
      vmargs: -Xmx1g -XX:+UseG1GC
    model: {responseTimeout: 30, startupTimeout: 90}
"""


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The TorchServe example's spec, copied with the examples (it reads ../mlp), its
    folder the working directory."""
    shutil.copytree(REPO / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path / "examples" / "torchserve")
    return Path("serve.yaml")


def issues_of(path: Path) -> list[str]:
    return [issue.removeprefix("serve.yaml:") for issue in spec_issues(path)]


def test_keys_and_model_settings_reach_config_properties(example: Path) -> None:
    spec = load_spec(with_server_block(example, BLOCK)).spec
    text = render_properties(spec, TORCHSERVE_SPEC.production_ports, "model-store",
                             loopback_only=False)
    properties = parse_properties(text)
    assert properties["job_queue_size"] == "500"
    assert properties["async_logging"] == "true"
    assert properties["vmargs"] == "-Xmx1g -XX:+UseG1GC"
    entry = json.loads(properties["models"])[spec.name]["1.0"]
    assert entry["responseTimeout"] == 30 and entry["startupTimeout"] == 90
    assert entry["batchSize"] == 16 and entry["maxBatchDelay"] == 5
    assert properties["disable_token_authorization"] == "false"
    assert check_properties(text, spec) == []
    edited = text.replace("job_queue_size=500", "job_queue_size=5")
    assert "job_queue_size= is not 500 (server.torchserve.config)" in \
        check_properties(edited, spec)


def test_a_misspelt_key_is_refused_where_it_is_written(example: Path) -> None:
    path = with_server_block(example, BLOCK.replace("job_queue_size", "job_queue_sise")
                      .replace("startupTimeout", "startupTimeOut"))
    assert issues_of(path) == [
        f"{line_of(path, 'job_queue_sise')}:7: server.torchserve.config.job_queue_sise: "
        "unknown config.properties key 'job_queue_sise'; did you mean 'job_queue_size'?",
        f"{line_of(path, 'startupTimeOut')}:34: server.torchserve.model.startupTimeOut: "
        "unknown model-level setting 'startupTimeOut'; did you mean 'startupTimeout'?"]


def test_keys_the_spec_sets_are_refused_naming_both_places(example: Path) -> None:
    path = with_server_block(example, """  torchserve:
    config:
      inference_address: http://0.0.0.0:9000
      default_workers_per_model: 4
      disable_token_authorization: true
    model: {batchSize: 4, maxWorkers: 8}
""")
    instances = line_of(path, "instances: 2")
    assert issues_of(path) == [
        f"{line_of(path, 'inference_address')}:7: server.torchserve.config.inference_address: "
        "inference_address is set by server.ports (serve.yaml:"
        f"{line_of(path, 'ports: {}')}) (each named port, the management API on loopback); "
        "set it there",
        f"{line_of(path, 'default_workers')}:7: "
        "server.torchserve.config.default_workers_per_model: default_workers_per_model is set "
        f"by server.instances (serve.yaml:{instances}); set it there",
        f"{line_of(path, 'disable_token')}:7: "
        "server.torchserve.config.disable_token_authorization: disable_token_authorization is "
        "set by serve-pipeline (token authorization stays on); leave it out",
        f"{line_of(path, 'batchSize: 4')}:13: server.torchserve.model.batchSize: batchSize is "
        f"set by server.batching.max_batch_size (serve.yaml:{line_of(path, 'max_batch_size')}"
        "); set it there",
        f"{line_of(path, 'maxWorkers')}:27: server.torchserve.model.maxWorkers: maxWorkers is "
        f"set by server.instances (serve.yaml:{instances}); set it there"]


def test_a_value_that_would_add_a_line_or_a_bad_timeout_is_refused(example: Path) -> None:
    path = with_server_block(example, "  torchserve:\n    config: {cors_allowed_origin: \"a\\n"
                               "disable_token_authorization=true\"}\n"
                               "    model: {responseTimeout: 0, runtimeType: 3}\n")
    assert [issue.partition(": ")[2] for issue in issues_of(path)] == [
        "server.torchserve.config.cors_allowed_origin: a config.properties value is one line",
        "server.torchserve.model.responseTimeout: responseTimeout is a whole number of at "
        "least 1, got 0",
        "server.torchserve.model.runtimeType: runtimeType is a string, got 3"]
