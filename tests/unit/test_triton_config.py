from __future__ import annotations

from pathlib import Path

from pipeline.servers.specs import load_spec
from pipeline.servers.triton.config import (
    check_model_config,
    config_text,
    render_model_config,
    write_model_repository,
)


def test_rendered_config_carries_the_spec_in_tritons_units(project: Path) -> None:
    spec = load_spec(project / "serve.yaml").spec
    text = config_text(render_model_config(spec, "model.pt", None))
    assert 'name: "fraud-mlp"' in text
    assert "max_batch_size: 32" in text
    assert "max_queue_delay_microseconds: 2000" in text
    assert "preferred_batch_size: 8" in text and "preferred_batch_size: 16" in text
    assert "count: 2" in text and "KIND_CPU" in text
    assert "TYPE_FP32" in text and "dims: 16" in text and "dims: 4" in text
    assert check_model_config(text, spec) == []


def test_config_check_catches_a_hand_edited_config(project: Path) -> None:
    spec = load_spec(project / "serve.yaml").spec
    text = config_text(render_model_config(spec, "model.pt", None))
    edited = text.replace("max_queue_delay_microseconds: 2000",
                          "max_queue_delay_microseconds: 2")
    assert any("max_queue_delay" in p for p in check_model_config(edited, spec))
    assert check_model_config("this is { not pbtxt", spec)[0].startswith("config.pbtxt does")


def test_model_repository_layout(project: Path, tmp_path: Path) -> None:
    loaded = load_spec(project / "serve.yaml")
    repository = write_model_repository(loaded.spec, project / "examples/mlp/model.pt", None,
                                        tmp_path / "repo")
    names = sorted(p.relative_to(tmp_path / "repo").as_posix()
                   for p in (tmp_path / "repo").rglob("*") if p.is_file())
    assert names == ["fraud-mlp/1/model.pt", "fraud-mlp/1/model.py",
                     "fraud-mlp/1/model_runtime.py", "fraud-mlp/config.pbtxt"]
    assert repository.config_path.read_text().startswith('name: "fraud-mlp"')
