"""The command line's own texts: `--version`, help that shows what its docstrings say
(Typer reads help as Rich markup, which swallows an unescaped `[staging]`), the example."""

from __future__ import annotations

import re
import signal
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pipeline import __version__
from pipeline.cli.app import app, main
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction

REPO = Path(__file__).resolve().parents[2]
BRACKETED = re.compile(r"\\*\[([^\]\n]+)\]")


def test_version_prints_the_distribution_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    declared = version("serve-pipeline")     # the installed metadata, from pyproject.toml
    assert result.output.strip() == f"serve-pipeline {declared}" == f"serve-pipeline {__version__}"


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and subcommand (Typer's own click types: read by their attributes)."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, command in getattr(group, "commands", {}).items():
        path = (*prefix, name)
        found.append((path, command))
        found += _commands(command, path)
    return found


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_every_bracketed_text_of_a_docstring_or_option_reaches_the_help() -> None:
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 10
    lost = []
    for path, command in commands:
        shown = _flat(CliRunner().invoke(app, [*path, "--help"], terminal_width=400).output)
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        for text in texts:
            for inner in BRACKETED.findall(text):
                if f"[{_flat(inner)}]" not in shown:
                    lost.append(f"{' '.join(path)}: [{inner}]")
    assert lost == []


def test_promote_help_names_the_required_environment() -> None:
    shown = _flat(CliRunner().invoke(app, ["promote", "--help"], terminal_width=400).output)
    assert "overlay has `requires: [staging]`" in shown


def test_the_example_spec_offers_every_server_kind() -> None:
    from pipeline.servers.kinds import KINDS

    text = (REPO / "serve.yaml.example").read_text()
    assert "not in this version" not in text
    kind_line = next(line for line in text.splitlines() if line.strip().startswith("kind:"))
    assert all(kind in kind_line for kind in KINDS), kind_line


def test_a_rollback_keeps_its_note_in_the_event_the_audit_and_history(project: Path) -> None:
    from pipeline.digest import sha256_bytes
    from pipeline.release.manifest import BlobSource, publish_release, utc_now
    from pipeline.release.pointers import audit_key, move_pointer, read_pointer
    from pipeline.release.policy import rollback
    from pipeline.release.store import open_store

    store = open_store("file://.serve-pipeline/store", project)
    releases = [publish_release(store, "fraud-mlp",
                                [BlobSource("model", None, body, sha256_bytes(body))],
                                Manifest.from_json({"run_id": "r"}), utc_now()).release_id
                for body in (b"model-1", b"model-2")]
    for release in releases:
        move_pointer(store, "fraud-mlp", "staging", release, PointerAction.PROMOTE, "ci")
    event = rollback(store, "fraud-mlp", "staging", None, "rita",
                     note="p99 doubled after the deploy [INC-42]").event
    assert event.release_id == releases[0]
    pointer, _ = read_pointer(store, "fraud-mlp", "staging")
    assert pointer.events[-1].note == "p99 doubled after the deploy [INC-42]"
    audit = store.read(audit_key("fraud-mlp", "staging", pointer.events[-1]))
    assert audit is not None and b"p99 doubled after the deploy [INC-42]" in audit
    shown = CliRunner().invoke(app, ["history", "staging", "-f", "serve.yaml"],
                               terminal_width=400)
    assert shown.exit_code == 0, shown.output
    assert "p99 doubled after the deploy [INC-42]" in _flat(shown.output)


def test_rollback_takes_a_note() -> None:
    shown = _flat(CliRunner().invoke(app, ["rollback", "--help"], terminal_width=400).output)
    assert "--note" in shown


def test_a_removed_working_folder_is_one_line_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    monkeypatch.setenv("PWD", str(gone))
    gone.rmdir()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exited:
            main(["validate"])
    finally:
        for sig, handler in handlers.items():     # main() installs its own
            signal.signal(sig, handler)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{gone}: the working folder no longer exists" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["history", "staging"], ["releases"], ["store", "verify"]])
def test_a_command_that_only_reads_leaves_no_store_behind(project: Path,
                                                          command: list[str]) -> None:
    shown = CliRunner().invoke(app, [*command, "-f", "serve.yaml"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    assert not (project / ".serve-pipeline" / "store").exists()
