"""`server.triton.config`: config.pbtxt fields the spec does not model are read through
Triton's ModelConfig protobuf at validate time (a typo is an error at its file:line), refused
where the spec sets the field (naming both keys), and merged into the rendered config."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pipeline.servers.base import BuiltArtifact
from pipeline.servers.docker.images import ImageDigests
from pipeline.servers.specs import json_schema, load_spec
from pipeline.servers.triton.config import (
    check_model_config,
    config_text,
    render_model_config,
    write_model_repository,
)
from pipeline.servers.triton.kind import TRITON
from pipeline.servers.triton.passthrough import server_flags
from pipeline.servers.triton.server import TritonInstallation, TritonServer
from pipeline.spec.positions import parse_document
from tests.support.spec_edits import line_of, spec_issues, with_server_block

PASSTHROUGH = """  triton:
    config:
      response_cache: {enable: true}
      model_warmup:
        - name: one-item
          batch_size: 1
          inputs:
            features: {data_type: TYPE_FP32, dims: [16], random_data: true}
      dynamic_batching: {priority_levels: 2, default_priority_level: 1}
      instance_group: [{rate_limiter: {resources: [{name: R1, count: 2}]}}]
      optimization: {input_pinned_memory: {enable: false}}
      parameters: {EXECUTION_ENV_PATH: {string_value: env.tar.gz}}
    cache_size: 8MiB
"""


def with_block(project: Path, block: str) -> Path:
    return with_server_block(project / "serve.yaml", block)


def test_the_fields_are_merged_into_the_rendered_config(project: Path) -> None:
    spec = load_spec(with_block(project, PASSTHROUGH)).spec
    text = config_text(render_model_config(spec, "model.pt", None))
    assert "response_cache {\n  enable: true\n}" in text
    assert 'name: "one-item"' in text and "random_data: true" in text
    assert "priority_levels: 2" in text and "max_queue_delay_microseconds: 2000" in text
    # The one group the spec renders, with the pass-through's rate limiter in it.
    assert text.count("instance_group {") == 1
    assert "count: 2\n  kind: KIND_CPU\n  rate_limiter {" in text
    assert "input_pinned_memory {" in text
    assert 'key: "EXECUTION_ENV_PATH"' in text and 'key: "model_file"' in text
    assert check_model_config(text, spec) == []
    assert server_flags(spec) == ["--cache-config=local,size=8388608"]


def test_the_local_tritonserver_gets_its_bundled_cache(project: Path, tmp_path: Path) -> None:
    server_dir = tmp_path / "pytriton" / "tritonserver"
    installation = TritonInstallation(server_dir / "bin" / "tritonserver",
                                      server_dir / "backends" / "python", tmp_path / "stub", ())
    argv = TritonServer(installation, tmp_path / "repository",
                        load_spec(with_block(project, PASSTHROUGH)),
                        {"http": 1, "grpc": 2, "metrics": 3}, tmp_path / "run", {}).local.argv
    assert argv[-2:] == ["--cache-config=local,size=8388608",
                         f"--cache-directory={server_dir / 'caches'}"]


def test_no_cache_flag_without_a_response_cache(project: Path) -> None:
    assert server_flags(load_spec(project / "serve.yaml").spec) == []
    spec = load_spec(with_block(project, "  triton:\n    config: {response_cache: "
                                         "{enable: false}}\n")).spec
    assert server_flags(spec) == []


def test_a_misspelt_field_is_refused_where_it_is_written(project: Path) -> None:
    path = with_block(project, PASSTHROUGH.replace("response_cache:", "respons_cache:")
                      .replace("TYPE_FP32", "TYPE_FP23").replace("random_data", "random"))
    assert spec_issues(path) == [
        f"serve.yaml:{line_of(path, 'respons_cache')}:7: server.triton.config.respons_cache: "
        "ModelConfig has no field 'respons_cache'; did you mean 'response_cache'?",
        f"serve.yaml:{line_of(path, 'TYPE_FP23')}:24: "
        "server.triton.config.model_warmup[0].inputs.features.data_type: 'TYPE_FP23' is not "
        "a DataType; did you mean 'TYPE_FP32'?",
        f"serve.yaml:{line_of(path, 'TYPE_FP23')}:58: "
        "server.triton.config.model_warmup[0].inputs.features.random: ModelWarmup.Input has "
        "no field 'random'; did you mean 'random_data'?"]


def test_a_value_triton_cannot_read_is_refused_at_the_block(project: Path) -> None:
    path = with_block(project, "  triton:\n    config: {dynamic_batching: "
                               "{priority_levels: many}}\n")
    [issue] = spec_issues(path)
    assert issue.startswith(f"serve.yaml:{line_of(path, 'priority_levels')}:")
    assert "server.triton.config: not a Triton ModelConfig:" in issue
    assert "priority_levels" in issue or "priorityLevels" in issue


def test_fields_the_spec_sets_are_refused_naming_both_places(project: Path) -> None:
    path = with_block(project, """  triton:
    config:
      max_batch_size: 4
      dynamic_batching: {max_queue_delay_microseconds: 100}
      instance_group: [{count: 3}]
      parameters: {model_file: {string_value: other.pt}}
      input: [{name: x, data_type: TYPE_FP32, dims: [1]}]
""")
    batch_line = line_of(path, "max_batch_size: 32")
    delay_line = line_of(path, "max_queue_delay: 2ms")
    instances_line = line_of(path, "instances: 2")
    assert spec_issues(path) == [
        f"serve.yaml:{line_of(path, 'max_batch_size: 4')}:7: "
        "server.triton.config.max_batch_size: max_batch_size is set by "
        f"server.batching.max_batch_size (serve.yaml:{batch_line}); set it there",
        f"serve.yaml:{line_of(path, 'delay_microseconds: 100')}:26: "
        "server.triton.config.dynamic_batching.max_queue_delay_microseconds: "
        "dynamic_batching.max_queue_delay_microseconds is set by "
        f"server.batching.max_queue_delay (serve.yaml:{delay_line}); set it there",
        f"serve.yaml:{line_of(path, 'count: 3')}:25: "
        "server.triton.config.instance_group[0].count: instance_group.count is set by "
        f"server.instances (serve.yaml:{instances_line}); set it there",
        f"serve.yaml:{line_of(path, 'model_file')}:20: "
        "server.triton.config.parameters.model_file: parameters['model_file'] is set by "
        "serve-pipeline for the python backend (from model.format, model.source, "
        "model.entrypoint and model.trusted); leave it out",
        f"serve.yaml:{line_of(path, 'input: [')}:7: server.triton.config.input: input is set "
        f"by model.inputs (serve.yaml:{line_of(path, 'inputs:')}); set it there"]


def test_another_scheduler_or_a_second_group_is_refused(project: Path) -> None:
    path = with_block(project, "  triton:\n    config:\n      sequence_batching: {}\n"
                               "      instance_group: [{}, {}]\n")
    issues = spec_issues(path)
    assert len(issues) == 2
    assert "sequence_batching would replace dynamic_batching, which server.batching renders " \
           f"(serve.yaml:{line_of(path, 'batching:')})" in issues[0]
    assert "instance_group takes one entry here" in issues[1]


def test_a_warmup_sample_names_the_models_inputs(project: Path) -> None:
    path = with_block(project, PASSTHROUGH.replace("features:", "feature:"))
    assert spec_issues(path) == [
        f"serve.yaml:{line_of(path, 'feature:')}:13: "
        "server.triton.config.model_warmup[0].inputs.feature: the model has no input "
        "'feature' (model.inputs: features)"]


def test_the_block_is_checked_in_a_spec_served_by_another_kind(project: Path) -> None:
    """compare serves one spec on both kinds: each kind's block is checked, whichever kind
    the spec names."""
    path = with_block(project, "  triton:\n    config: {respons_cache: {}}\n")
    path.write_text(path.read_text().replace("kind: triton", "kind: torchserve", 1)
                    .replace("preferred_batch_sizes: [8, 16]", "preferred_batch_sizes: []"))
    assert any("server.triton.config.respons_cache" in issue for issue in spec_issues(path))


def test_a_release_with_other_passthrough_fields_is_told_apart(project: Path) -> None:
    plain = load_spec(project / "serve.yaml").spec
    spec = load_spec(with_block(project, PASSTHROUGH)).spec
    with_fields = config_text(render_model_config(spec, "model.pt", None))
    without = config_text(render_model_config(plain, "model.pt", None))
    missing = check_model_config(without, spec)
    assert "response_cache.enable is not as server.triton.config sets it" in missing
    assert "instance_group[0].rate_limiter.resources is not as server.triton.config sets it" \
        in missing
    beyond = check_model_config(with_fields, plain)
    assert "response_cache is set, and server.triton.config does not set it" in beyond
    assert "model_warmup is set, and server.triton.config does not set it" in beyond


def test_an_unknown_server_key_still_suggests_the_nearest(project: Path) -> None:
    path = with_block(project, "  trition: {config: {}}\n")
    assert spec_issues(path) == [f"serve.yaml:{line_of(path, 'trition')}:3: server.trition: "
                               "unknown key 'trition'; did you mean 'triton'?"]


def test_the_serving_image_starts_tritonserver_with_the_cache(project: Path,
                                                               tmp_path: Path) -> None:
    path = with_block(project, PASSTHROUGH + "  image: {base: 'local/triton-cpu:test'}\n")
    path.write_text(path.read_text().replace("runtime: process", "runtime: docker", 1))
    loaded = load_spec(path)
    repository = write_model_repository(loaded.spec, project / "examples/mlp/model.pt", None,
                                        tmp_path / "repo")
    text = repository.config_path.read_text()
    artifact = BuiltArtifact("triton-model-repository", repository.root, tmp_path / "repo.tar",
                             "sha256:0", "config.pbtxt", text, "sha256:1",
                             project / "examples/mlp/model.pt", "sha256:2")
    context = TRITON.image_context(loaded, artifact, ImageDigests("a", "b", "c", "d"))
    [command] = [line for line in context.dockerfile.splitlines() if line.startswith("CMD")]
    assert json.loads(command.removeprefix("CMD "))[-1] == "--cache-config=local,size=8388608"
    assert "response_cache" in context.files["models/fraud-mlp/config.pbtxt"].decode()


def test_the_schema_describes_the_block(project: Path) -> None:
    schema = json_schema()
    data = parse_document(with_block(project, PASSTHROUGH).read_text(), "serve.yaml").data
    jsonschema.validate(data, schema)
    data["server"]["trition"] = {}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)
    triton = schema["$defs"]["ServerSpec"]["properties"]["triton"]["properties"]
    assert "response_cache" in triton["config"]["description"]
    assert "--cache-config" in triton["cache_size"]["description"]


def test_an_unknown_key_of_the_block_suggests_the_nearest(project: Path) -> None:
    path = with_block(project, "  triton: {confg: {}, cache_size: 8MiB}\n")
    assert spec_issues(path) == [f"serve.yaml:{line_of(path, 'confg')}:12: server.triton.confg: "
                               "unknown key 'confg'; did you mean 'config'?"]
