"""A Triton-only install (no extras) imports what it runs: with every optional part's
modules blocked (`sys.modules[name] = None` makes `import name` fail as a missing package
does), the CLI, the runner, preflight, the registry of server kinds and the store import.
In a child process, so that the blocked modules leave this one as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline.preflight.extras import EXTRAS
from pipeline.servers.kinds import KINDS

REPO = Path(__file__).resolve().parents[2]


def test_a_core_install_imports_the_cli_runner_and_preflight() -> None:
    optional = sorted({module for extra in EXTRAS for module in extra.modules} |
                      {module for kind in KINDS.values() if kind.optional_part
                       for module in kind.optional_part.modules} | {"ray"})
    code = (f"import sys\nfor name in {optional!r}: sys.modules[name] = None\n"
            "import pipeline.cli.app, pipeline.runner, pipeline.preflight.run, "
            "pipeline.servers.kinds, pipeline.release.store\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
