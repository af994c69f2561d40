"""Where a run came from: the git commit of the spec's repository, if it is one."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def git_state(folder: Path) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the git work tree holding `folder`; None outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
