"""Who is acting: the identity every audit event records next to the names it claims.

`--by` is a name someone typed. The acting identity is what can be checked about who
ran the command: inside GitHub Actions the OIDC token's claims, verified against the
issuer's keys; elsewhere `user@host` (unverified), with GITHUB_* variables recorded as
a claim; with an S3 store also the STS caller identity of the store's credentials (or
why STS did not answer; a move never fails for that).
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping
from typing import Any

from pipeline.release.oidc import verified_claims
from pipeline.release.store.base import Store


def in_github_actions(env: Mapping[str, str]) -> bool:
    return env.get("GITHUB_ACTIONS") == "true" and bool(env.get("GITHUB_ACTOR"))


def acting_user(env: Mapping[str, str]) -> str:
    """`GITHUB_ACTOR` inside GitHub Actions, else `user@host`."""
    if in_github_actions(env):
        return env["GITHUB_ACTOR"]
    return local_user(env)


def local_user(env: Mapping[str, str]) -> str:
    user = env.get("USER") or env.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    return f"{user}@{socket.gethostname()}"


def claimed_name(by: str | None, env: Mapping[str, str]) -> str:
    """The name an event is recorded under: `--by`, else `SERVE_PIPELINE_ACTOR`, else the
    acting user (so that, by default, `by` and `created_by` are the acting identity)."""
    return by or env.get("SERVE_PIPELINE_ACTOR") or acting_user(env)


def claimed_github(env: Mapping[str, str]) -> dict[str, str]:
    """What GITHUB_* variables say: anyone can set them, so it is only ever a claim."""
    names = {"GITHUB_ACTOR": "actor", "GITHUB_REPOSITORY": "repository",
             "GITHUB_RUN_ID": "run_id"}
    return {field: env[var] for var, field in names.items() if env.get(var)}


def acting_identity(env: Mapping[str, str], store: Store | None = None,
                    with_token: bool = False) -> dict[str, Any]:
    """The `actor` of an audit event and of a manifest's `created_by_actor`.

    `verified` is true only for an identity checked cryptographically here: the GitHub
    Actions OIDC token (pipeline.release.oidc). `verified_identities` are the names
    distinct_from_creator compares (`github:<login>`); GITHUB_* variables without a
    token are recorded under `claimed`. Raises IdentityError for a token that does not
    verify (an expired one, one for another audience). `with_token`: the OIDC token
    itself under `oidc_token`, for a signed approval to carry, so that whoever judges the
    approval can check the issuer's signature on the identity again."""
    claims = verified_claims(env)
    token = claims.get("token") if claims is not None else None
    identity: dict[str, Any] = {"user": local_user(env) if claims is None else
                                f"{claims.get('actor', claims['sub'])}@github-actions",
                                "via": "github-actions" if claims else "local",
                                "verified": claims is not None}
    if claims is not None:
        # The token goes only where it is asked for (an approval carries it: approve.py);
        # everywhere else the verified claims are enough.
        claims = {key: value for key, value in claims.items() if key != "token"}
        identity["oidc"] = claims
        if with_token and token:
            identity["oidc_token"] = token
        identity["verified_identities"] = [f"github:{claims['actor']}"] \
            if claims.get("actor") else [f"oidc:{claims['sub']}"]
        if claims.get("repository") and claims.get("run_id"):
            identity["run_url"] = (f"{env.get('GITHUB_SERVER_URL') or 'https://github.com'}/"
                                   f"{claims['repository']}/actions/runs/{claims['run_id']}")
    else:
        claimed = claimed_github(env)
        if claimed:
            identity["claimed"] = claimed
    caller = store.caller_identity() if store is not None else None
    if caller is not None:
        identity["aws_caller"] = {**caller, "verified": "arn" in caller}
    return identity


def names_of(claimed: str | None, identity: Mapping[str, Any] | None) -> set[str]:
    """Every name a person goes by in a record: the claimed one, the acting user, and the
    acting user without its host (`rita` is `rita@laptop`). Compared case-insensitively."""
    names = {claimed} if claimed else set()
    user = str((identity or {}).get("user") or "")
    if user:
        names |= {user, user.split("@", 1)[0]}
    return {name.strip().lower() for name in names if name.strip()}


def verifying_issuer(identity: Mapping[str, Any]) -> str:
    """The OIDC issuer that verified a recorded identity ("" when none did)."""
    oidc = identity.get("oidc")
    return str(oidc.get("issuer") or "").rstrip("/") if isinstance(oidc, Mapping) else ""
