"""Who is acting: the identity every audit event records next to the names it claims.

`--by` and `--approved-by` are names someone typed. The acting identity is what
the environment says about who ran the command: inside GitHub Actions
(`GITHUB_ACTIONS=true`) the `GITHUB_ACTOR` and the run's URL; elsewhere
`user@host`; with an S3 store also the caller STS names for the store's
credentials (or why STS did not answer; a move never fails for that).
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping
from typing import Any

from pipeline.release.store.base import Store


def in_github_actions(env: Mapping[str, str]) -> bool:
    return env.get("GITHUB_ACTIONS") == "true" and bool(env.get("GITHUB_ACTOR"))


def acting_user(env: Mapping[str, str]) -> str:
    """`GITHUB_ACTOR` inside GitHub Actions, else `user@host`."""
    if in_github_actions(env):
        return env["GITHUB_ACTOR"]
    user = env.get("USER") or env.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    return f"{user}@{socket.gethostname()}"


def run_url(env: Mapping[str, str]) -> str | None:
    parts = [env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")]
    if not in_github_actions(env) or not all(parts):
        return None
    server, repository, run_id = parts
    return f"{server}/{repository}/actions/runs/{run_id}"


def claimed_name(by: str | None, env: Mapping[str, str]) -> str:
    """The name an event is recorded under: `--by`, else `SERVE_PIPELINE_ACTOR`, else the
    acting user (so that, by default, `by` and `created_by` are the acting identity)."""
    return by or env.get("SERVE_PIPELINE_ACTOR") or acting_user(env)


def acting_identity(env: Mapping[str, str], store: Store | None = None) -> dict[str, Any]:
    """The `actor` of an audit event and of a manifest's `created_by_actor`."""
    identity: dict[str, Any] = {
        "user": acting_user(env),
        "via": "github-actions" if in_github_actions(env) else "local",
    }
    url = run_url(env)
    if url:
        identity["run_url"] = url
    caller = store.caller_identity() if store is not None else None
    if caller is not None:
        identity["aws_caller"] = caller
    return identity


def names_of(claimed: str | None, identity: Mapping[str, Any] | None) -> set[str]:
    """Every name a person goes by in a record: the claimed one, the acting user, and the
    acting user without its host (`rita` is `rita@laptop`). Compared case-insensitively."""
    names = {claimed} if claimed else set()
    user = str((identity or {}).get("user") or "")
    if user:
        names |= {user, user.split("@", 1)[0]}
    return {name.strip().lower() for name in names if name.strip()}
