"""The spec layer knows the server kinds only as the data it is handed (`KindSpecs`): a kind
it is given is accepted with its own ports and rules, and one it is not given is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest
from pydantic import ValidationError

from pipeline.errors import SpecError
from pipeline.servers.kinds import KIND_SPECS
from pipeline.spec import loading
from pipeline.spec.kind_specs import KindSpec, KindSpecs
from pipeline.spec.models import Spec, json_schema, validate_spec
from pipeline.spec.positions import PositionedDocument, parse_document
from pipeline.spec.problems import Problem
from pipeline.spec.strict import StrictModel

REPO = Path(__file__).resolve().parents[2]


def no_preferred_sizes(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    if spec.server.batching.preferred_batch_sizes:
        yield (("server", "batching", "preferred_batch_sizes"), "echo has no preferred sizes")


class EchoSettings(StrictModel):
    volume: int = 1


def quiet(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    settings = spec.server.section("echo")
    if isinstance(settings, EchoSettings) and settings.volume > 10:
        yield (("server", "echo", "volume"), "too loud")


ECHO = KindSpec(name="echo", production_ports=MappingProxyType({"web": 9000}),
                settings_rules=(no_preferred_sizes,), section=EchoSettings,
                section_rules=(quiet,))
WITH_ECHO: KindSpecs = MappingProxyType({**KIND_SPECS, "echo": ECHO})


def echo_spec(project: Path, ports: str = "{}") -> Path:
    path = project / "serve.yaml"
    text = path.read_text().replace("kind: triton", "kind: echo", 1)
    path.write_text(text.replace("ports: {}", f"ports: {ports}", 1))
    return path


def issues_of(path: Path, kinds: KindSpecs) -> list[str]:
    with pytest.raises(SpecError) as caught:
        loading.load_spec(path, None, kinds)
    return [f"{issue.path}: {issue.message}" for issue in caught.value.issues]


def test_a_kind_handed_in_is_checked_by_its_own_rules_and_ports(project: Path) -> None:
    path = echo_spec(project, "{web: 9100, http: 8000}")
    assert issues_of(path, WITH_ECHO) == [
        "server.batching.preferred_batch_sizes: echo has no preferred sizes",
        "server.ports.http: unknown port name; echo's are web"]
    path.write_text(path.read_text().replace("preferred_batch_sizes: [8, 16]",
                                             "preferred_batch_sizes: []")
                    .replace("ports: {web: 9100, http: 8000}", "ports: {web: 9100}"))
    assert loading.load_spec(path, None, WITH_ECHO).spec.server.kind == "echo"


def test_a_kind_not_handed_in_is_refused_with_the_kinds_that_were(project: Path) -> None:
    assert issues_of(project / "serve.yaml", MappingProxyType({"echo": ECHO})) == [
        "server.kind: expected one of 'echo', got 'triton'"]
    path = echo_spec(project)
    assert issues_of(path, KIND_SPECS) == [
        "server.kind: expected one of 'triton' or 'torchserve', got 'echo'"]
    path.write_text(path.read_text().replace("kind: echo", "kind: trito", 1))
    assert issues_of(path, WITH_ECHO) == [
        "server.kind: expected one of 'triton', 'torchserve' or 'echo', got 'trito'; "
        "did you mean 'triton'?"]


def test_the_schema_lists_the_kinds_it_is_given() -> None:
    kind = json_schema(WITH_ECHO)["$defs"]["ServerSpec"]["properties"]["kind"]
    assert kind["enum"] == ["triton", "torchserve", "echo"] and kind["type"] == "string"


def test_a_spec_is_not_validated_without_the_kinds() -> None:
    example = parse_document((REPO / "serve.yaml.example").read_text(), "example").data
    assert validate_spec(example, KIND_SPECS).server.kind == "triton"
    with pytest.raises(ValidationError):
        validate_spec(example, ["torchserve"])
    with pytest.raises(TypeError, match="known server kinds"):
        Spec.model_validate(example)


def test_a_kinds_own_block_is_read_by_the_model_it_declares(project: Path) -> None:
    path = project / "serve.yaml"
    text = path.read_text().replace("  ports: {}", "  ports: {}\n  echo: {volume: 3}", 1)
    path.write_text(text)
    loaded = loading.load_spec(path, None, WITH_ECHO)
    assert loaded.spec.server.section("echo") == EchoSettings(volume=3)
    assert loaded.spec.model_dump(mode="json")["server"]["echo"] == {"volume": 3}
    path.write_text(text.replace("{volume: 3}", "{volume: 30}"))
    assert issues_of(path, WITH_ECHO) == ["server.echo.volume: too loud"]
    path.write_text(text.replace("{volume: 3}", "{volume: loud}"))
    assert issues_of(path, WITH_ECHO) == [
        "server.echo.volume: expected an integer, got 'loud' (str)"]
    # A kind that is not handed in has no block.
    assert issues_of(path, KIND_SPECS)[0].startswith("server.echo: unknown key 'echo'")


def test_the_schema_holds_each_kinds_block_and_no_other_key() -> None:
    server = json_schema(WITH_ECHO)["$defs"]["ServerSpec"]
    assert server["additionalProperties"] is False
    assert server["properties"]["echo"]["properties"]["volume"]["type"] == "integer"
    assert {"triton", "torchserve"} <= set(server["properties"])
