from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from pipeline.errors import SpecError
from pipeline.servers.specs import json_schema, load_spec
from pipeline.spec.positions import parse_document

REPO = Path(__file__).resolve().parents[2]


def issues_of(path: Path, environment: str | None = None) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec(path, environment)
    assert caught.value.exit_code == 2
    return [str(issue) for issue in caught.value.issues]


def example_with(project: Path, old: str, new: str) -> Path:
    text = (project / "serve.yaml").read_text()
    assert old in text, old
    path = project / "serve.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def example_plus(project: Path, lines: str) -> Path:
    """The example spec with `lines` appended at its top level."""
    path = project / "serve.yaml"
    path.write_text(path.read_text() + lines)
    return path


def line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(needle)


def test_the_example_is_valid_in_every_environment(project: Path) -> None:
    for environment in (None, "staging", "production"):
        loaded = load_spec(project / "serve.yaml", environment)
        assert loaded.spec.name == "fraud-mlp"
    production = load_spec(project / "serve.yaml", "production")
    assert production.spec.slo.p99.ms == 40
    assert production.policy.requires == ["staging"]
    assert production.policy.approval.required
    assert production.digest != load_spec(project / "serve.yaml", "staging").digest


def test_bare_number_queue_delay_names_file_line_and_key(project: Path) -> None:
    path = example_with(project, "max_queue_delay: 2ms", "max_queue_delay: 2")
    [issue] = issues_of(path)
    line = line_of(path, "max_queue_delay: 2")
    assert issue.startswith(f"serve.yaml:{line}:")
    assert "server.batching.max_queue_delay" in issue
    assert "unit" in issue and "microseconds" in issue


def test_unknown_key_suggests_the_nearest(project: Path) -> None:
    path = example_with(project, "latency: {concurrency: 8", "latency: {concurency: 8")
    [issue] = issues_of(path)
    assert f"serve.yaml:{line_of(path, 'concurency')}:" in issue
    assert "stages.latency.concurency" in issue
    assert "did you mean 'concurrency'?" in issue


def test_unknown_top_level_key_lists_valid_keys(project: Path) -> None:
    [issue] = issues_of(example_plus(project, "zzz_totally_unrelated: 1\n"))
    assert "unknown key 'zzz_totally_unrelated'" in issue and "valid keys:" in issue


def test_wrong_type_says_what_was_expected(project: Path) -> None:
    path = example_with(project, "instances: 2", "instances: two")
    [issue] = issues_of(path)
    assert f"serve.yaml:{line_of(path, 'instances: two')}:" in issue
    assert "server.instances" in issue and "expected an integer" in issue and "'two'" in issue


def test_queue_delay_over_the_latency_budget(project: Path) -> None:
    path = example_with(project, "max_queue_delay: 2ms", "max_queue_delay: 40ms")
    [issue] = issues_of(path)
    assert "server.batching.max_queue_delay" in issue
    assert "exceeds the queue budget 35ms" in issue
    assert f"serve.yaml:{line_of(path, 'max_queue_delay: 40ms')}:" in issue


def test_overlay_tightens_the_budget_and_the_error_points_at_the_overlay(project: Path) -> None:
    (project / "environments" / "production.yaml").write_text(
        "requires: [staging]\nslo:\n  p99: 16ms\n")
    issues = issues_of(project / "serve.yaml", "production")
    [budget] = [issue for issue in issues if "max_queue_delay" in issue]
    assert "queue budget 1ms" in budget
    assert "slo.p99 16ms from environments/production.yaml:3" in budget
    assert any("slo.p95" in issue and "above p99" in issue for issue in issues)


def test_overlay_errors_name_the_overlay_file(project: Path) -> None:
    (project / "environments" / "production.yaml").write_text("slo:\n  p99: fast\n")
    [issue] = issues_of(project / "serve.yaml", "production")
    assert issue.startswith("environments/production.yaml:2:") or \
        "production.yaml:2:" in issue
    assert "slo.p99" in issue


def test_an_unknown_policy_key_is_named_where_it_stands(project: Path) -> None:
    (project / "environments" / "production.yaml").write_text(
        "requires: [staging]\napproval: {required: true, distinct_from_creatr: true}\n")
    [issue] = issues_of(project / "serve.yaml", "production")
    assert "production.yaml:2:" in issue
    assert "approval.distinct_from_creatr: unknown key 'distinct_from_creatr'" in issue
    assert "did you mean 'distinct_from_creator'" in issue


def test_environment_only_keys_are_refused_in_the_spec(project: Path) -> None:
    [issue] = issues_of(example_plus(project, "requires: [staging]\n"))
    assert "belongs in an environment overlay" in issue


def test_unknown_environment_suggests(project: Path) -> None:
    [issue] = issues_of(project / "serve.yaml", "stagin")
    assert "did you mean 'staging'" in issue


def test_lists_replace_lists_in_overlays(project: Path) -> None:
    (project / "environments" / "staging.yaml").write_text(
        "server:\n  batching:\n    preferred_batch_sizes: [4]\n")
    loaded = load_spec(project / "serve.yaml", "staging")
    assert loaded.spec.server.batching.preferred_batch_sizes == [4]
    assert loaded.spec.server.batching.max_batch_size == 32


@pytest.mark.parametrize(("text", "fragment"), [
    ("version: 1\nname: x\nname: y\n", "duplicate key"),
    ("version: [1\n", "invalid YAML"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
     "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
     "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", "alias bomb"),
])
def test_hostile_yaml_gets_one_clear_issue(write_spec: Callable[[str], Path], text: str,
                                          fragment: str) -> None:
    issues = issues_of(write_spec(text))
    assert any(fragment in issue for issue in issues), issues
    assert all(re.match(r"^serve\.yaml:\d+:\d+: ", issue) for issue in issues)


def test_non_utf8_and_missing_files(project: Path) -> None:
    path = project / "serve.yaml"
    path.write_bytes(b"version: 1\nname: \xff\xfe\n")
    [issue] = issues_of(path)
    assert "serve.yaml:2:" in issue and "UTF-8" in issue
    [missing] = issues_of(project / "nope.yaml")
    assert "file not found" in missing


def test_missing_model_file_is_a_spec_error(project: Path) -> None:
    path = example_with(project, "examples/mlp/model.pt", "examples/mlp/missing.pt")
    [issue] = issues_of(path)
    assert "model.source" in issue and "model file not found" in issue


def test_eager_needs_an_entrypoint(project: Path) -> None:
    path = example_with(project, "format: torchscript", "format: eager")
    issues = issues_of(path)
    assert any("model.entrypoint" in i or "entrypoint" in i for i in issues)


def test_torchserve_needs_whole_milliseconds(project: Path) -> None:
    path = example_with(project, "kind: triton", "kind: torchserve")
    path.write_text(path.read_text().replace("  backend: python", "")
                    .replace("max_queue_delay: 2ms", "max_queue_delay: 1500us"))
    [issue] = issues_of(path)
    assert "server.batching.max_queue_delay" in issue and "whole number of milliseconds" in issue
    path.write_text(path.read_text().replace("max_queue_delay: 1500us", "max_queue_delay: 2ms")
                    .replace("ports: {}", "ports: {http: 8000}"))
    [issue] = issues_of(path)
    assert "server.ports.http" in issue and "inference, management" in issue


def test_triton_needs_whole_microseconds(project: Path) -> None:
    path = example_with(project, "max_queue_delay: 2ms", "max_queue_delay: 1500ns")
    [issue] = issues_of(path)
    assert "whole number of microseconds" in issue


def test_schema_accepts_the_example_and_rejects_bare_numbers() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    example = parse_document((REPO / "serve.yaml.example").read_text(), "example").data
    jsonschema.validate(example, schema)
    broken = json.loads(json.dumps(example))
    broken["server"]["batching"]["max_queue_delay"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    broken = json.loads(json.dumps(example))
    broken["stages"]["latency"]["concurency"] = 8
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_schema_documents_every_key_of_the_example() -> None:
    schema = json_schema()
    for name, definition in schema["$defs"].items():
        for key, body in definition.get("properties", {}).items():
            assert "title" in body or "description" in body or "$ref" in body, (name, key)


def test_inputs_outside_the_project_are_refused(
        project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("elsewhere") / "model.pt"
    outside.write_bytes(b"not yours")
    (project / "examples" / "mlp" / "linked.pt").symlink_to(outside)
    path = example_with(project, "examples/mlp/model.pt", "examples/mlp/linked.pt")
    [issue] = issues_of(path)
    assert "model.source" in issue and "outside the project" in issue
    path = example_with(project, "examples/mlp/linked.pt", "../../../../etc/passwd")
    [issue] = issues_of(path)
    assert "outside the project" in issue


def test_parity_data_that_is_not_the_inputs_is_refused_at_validate(project: Path) -> None:
    """Read as parity will, before any server starts: a truncated .npz, and one whose array
    has another dtype than the spec declares."""
    samples = project / "examples" / "mlp" / "samples.npz"
    (project / "examples" / "mlp" / "truncated.npz").write_bytes(samples.read_bytes()[:900])
    path = example_with(project, "data: examples/mlp/samples.npz",
                        "data: examples/mlp/truncated.npz")
    [issue] = issues_of(path)
    assert "stages.parity.data: examples/mlp/truncated.npz: cannot read as .npz" in issue
    path = example_with(project, "data: examples/mlp/truncated.npz",
                        "data: examples/mlp/samples.npz")
    path = example_with(project, "dtype: float32, shape: [16]", "dtype: int64, shape: [16]")
    [issue] = issues_of(path)
    assert "stages.parity.data: examples/mlp/samples.npz:features: float32, the spec says " \
        "int64" in issue


def test_a_value_is_shown_in_the_message_not_its_placeholder(project: Path) -> None:
    path = example_with(project, "p99: 50ms", "p99: -5ms")
    [issue] = issues_of(path)
    assert "'-5ms'" in issue and "{value" not in issue


def test_two_ports_on_one_number_are_refused(project: Path) -> None:
    path = example_with(project, "ports: {}", "ports: {http: 18000, grpc: 18000}")
    [issue] = issues_of(path)
    assert "server.ports" in issue and "http 18000, grpc 18000" in issue


def test_a_value_of_another_type_is_not_coerced(project: Path) -> None:
    """`true` is no concurrency, and a quoted "on" does not switch on unsafe model loading."""
    path = example_with(project, "concurrency: 8", "concurrency: true")
    [issue] = issues_of(path)
    assert "stages.latency.concurrency: expected an integer, got True (bool)" in issue
    path = example_with(project, "concurrency: true", "concurrency: 8")
    path = example_with(project, "format: torchscript", "format: torchscript\n  trusted: 'on'")
    [issue] = issues_of(path)
    assert "model.trusted: expected true or false, got 'on' (str)" in issue


def test_a_latency_measurement_of_no_time_is_refused(project: Path) -> None:
    path = example_with(project, "duration: 10s", "duration: 0s")
    [issue] = issues_of(path)
    assert "stages.latency.duration: the measurement must be longer than 0s" in issue


def test_a_request_too_large_to_hold_is_refused_at_the_shape(project: Path) -> None:
    """An extra zero in a shape: 40,000 x 40,000 float32 is 6 GiB an item."""
    spec = project / "serve.yaml"
    text = spec.read_text()
    spec.write_text(text.replace("shape: [16]", "shape: [40000, 40000]", 1))
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(i) for i in caught.value.issues if "model.inputs[0].shape" in str(i)]
    assert "one item of features is 6.0 GiB (float32 [40000, 40000])" in issue
    assert "over the 1.0 GiB a request may hold here" in issue
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "shape: [16]" in row)
    assert f"serve.yaml:{line}" in issue


def test_a_merge_key_may_be_overridden_but_a_key_written_twice_may_not() -> None:
    """YAML 1.1 merge keys: the anchor idiom `{<<: *base, name: other}` overrides."""
    text = ("inputs: [&in {name: features, dtype: float32, shape: [16]}]\n"
            "outputs: [{<<: *in, name: scores, shape: [4]}]\n")
    parsed = parse_document(text, "serve.yaml")
    assert parsed.data["outputs"] == [{"name": "scores", "dtype": "float32", "shape": [4]}]
    with pytest.raises(SpecError, match=r"serve.yaml:2:35: outputs\[0\].name: duplicate key"):
        parse_document(text.replace("name: scores,", "name: scores, name: x,"), "serve.yaml")


@pytest.mark.parametrize("key", ["explore_window", "budget"])
def test_a_zero_tune_window_or_budget_is_refused_where_it_is_written(project: Path,
                                                                      key: str) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text() + f"\ntune:\n  {key}: 0s\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(i) for i in caught.value.issues]
    assert f"tune.{key}: {key} must be longer than 0s" in issue and "serve.yaml:" in issue


def test_a_preferred_batch_size_choice_no_candidate_can_form_is_refused(project: Path) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text() + "\ntune:\n  max_batch_size: [8]\n"
                    "  preferred_batch_sizes: [[64]]\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(i) for i in caught.value.issues]
    assert "preferred_batch_sizes [64]: every size is over the largest max_batch_size " \
           "choice 8" in issue
