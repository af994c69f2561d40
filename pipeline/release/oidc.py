"""GitHub Actions OIDC tokens, verified against the issuer's published keys (JWKS).

A job with `permissions: id-token: write` gets ACTIONS_ID_TOKEN_REQUEST_URL and
ACTIONS_ID_TOKEN_REQUEST_TOKEN; the token it asks for is an RS256 JWT from
https://token.actions.githubusercontent.com whose claims (sub, repository, actor,
run_id) say who runs the job. `SERVE_PIPELINE_OIDC_TOKEN` gives a token directly, and
`SERVE_PIPELINE_OIDC_ISSUER` names another issuer (GitHub Enterprise, or a test's).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from pipeline.errors import PolicyError
from pipeline.spec.models import GITHUB_OIDC_ISSUER

GITHUB_ISSUER = GITHUB_OIDC_ISSUER
DEFAULT_AUDIENCE = "serve-pipeline"
TOKEN_ENV = "SERVE_PIPELINE_OIDC_TOKEN"
ISSUER_ENV = "SERVE_PIPELINE_OIDC_ISSUER"
AUDIENCE_ENV = "SERVE_PIPELINE_OIDC_AUDIENCE"
REQUEST_URL_ENV = "ACTIONS_ID_TOKEN_REQUEST_URL"
REQUEST_TOKEN_ENV = "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
TIMEOUT_S = 10.0
CLAIMS = ("sub", "repository", "actor", "actor_id", "run_id", "workflow_ref", "environment",
          "ref")


class IdentityError(PolicyError):
    """An identity token was offered and did not verify: never recorded as anyone."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OidcSettings:
        return cls(env.get(ISSUER_ENV) or GITHUB_ISSUER,
                   env.get(AUDIENCE_ENV) or DEFAULT_AUDIENCE)


def _get_json(url: str, headers: Mapping[str, str], what: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            body = json.loads(reply.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise IdentityError(f"{what}: {exc}") from None
    if not isinstance(body, dict):
        raise IdentityError(f"{what}: the answer is not a JSON object")
    return body


def offered_token(env: Mapping[str, str], settings: OidcSettings) -> tuple[str, str] | None:
    """(token, where it came from), or None when no token is on offer."""
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV], TOKEN_ENV
    url, bearer = env.get(REQUEST_URL_ENV), env.get(REQUEST_TOKEN_ENV)
    if not url or not bearer:
        return None
    joiner = "&" if "?" in url else "?"
    full = f"{url}{joiner}audience={urllib.parse.quote(settings.audience)}"
    body = _get_json(full, {"Authorization": f"bearer {bearer}"},
                     f"requesting an OIDC token from {REQUEST_URL_ENV}")
    value = body.get("value")
    if not isinstance(value, str):
        raise IdentityError(f"{REQUEST_URL_ENV} answered without a token")
    return value, REQUEST_URL_ENV


def verify_token(token: str, settings: OidcSettings, source: str,
                 at: float | None = None) -> dict[str, Any]:
    """The token's claims after checking signature (issuer's JWKS), iss, aud, exp, nbf;
    `at` (a Unix time): valid then rather than now (a token kept in a signed approval is
    checked again later, at the moment the approval says it was given)."""
    issuer = settings.issuer.rstrip("/")
    where = f"OIDC token from {source}"
    config = _get_json(f"{issuer}/.well-known/openid-configuration", {},
                       f"{where}: reading the issuer's configuration")
    jwks_uri = config.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise IdentityError(f"{where}: issuer {issuer} publishes no jwks_uri")
    try:
        key = jwt.PyJWKClient(jwks_uri, timeout=int(TIMEOUT_S)).get_signing_key_from_jwt(token)
        claims: dict[str, Any] = jwt.decode(
            token, key.key, algorithms=["RS256"], audience=settings.audience, issuer=issuer,
            options={"require": ["exp", "iat", "iss", "aud", "sub"],
                     "verify_exp": at is None, "verify_nbf": at is None}, leeway=30)
        if at is not None and not claims["iat"] - 30 <= at <= claims["exp"] + 30:
            raise jwt.ExpiredSignatureError("not valid at the time given")
    except jwt.ExpiredSignatureError:
        raise IdentityError(f"{where}: expired") from None
    except jwt.InvalidAudienceError:
        raise IdentityError(f"{where}: its audience is not {settings.audience!r} "
                            f"({AUDIENCE_ENV})") from None
    except jwt.InvalidIssuerError:
        raise IdentityError(f"{where}: not issued by {issuer}") from None
    except jwt.PyJWTError as exc:
        raise IdentityError(f"{where}: {exc}") from None
    return claims


def verified_claims(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The verified identity claims of this process, None when no token is on offer;
    raises IdentityError when one is offered and does not verify. The token itself is
    under `token`, for an approval to carry (pipeline.release.signing.approvals)."""
    settings = OidcSettings.from_env(env)
    offered = offered_token(env, settings)
    if offered is None:
        return None
    token, source = offered
    claims = verify_token(token, settings, source)
    found = {name: str(claims[name]) for name in CLAIMS if name in claims}
    return {"issuer": settings.issuer, "audience": settings.audience, **found, "token": token}


def claims_again(identity: Mapping[str, Any], issuers: set[str], at: float) -> str | None:
    """Why the OIDC token an approval carries does not prove its recorded identity (checked
    again against the issuer's keys, as valid at `at`, the approval's time), or None. The
    claims alone are text its signer wrote; only the issuer's signature on them is not."""
    oidc = identity.get("oidc_token")
    claims = identity.get("oidc") if isinstance(identity.get("oidc"), Mapping) else {}
    if not isinstance(oidc, str) or not isinstance(claims, Mapping):
        return "it carries no OIDC token to check its identity against"
    issuer = str(claims.get("issuer") or "").rstrip("/")
    if issuer not in issuers:
        return f"its identity was verified by {issuer!r}, an issuer not trusted here"
    settings = OidcSettings(issuer, str(claims.get("audience") or DEFAULT_AUDIENCE))
    try:
        proven = verify_token(oidc, settings, "the approval", at)
    except IdentityError as exc:
        return str(exc)
    if any(str(proven.get(name)) != str(claims[name]) for name in CLAIMS if name in claims):
        return "its recorded identity is not the one its OIDC token says"
    return None
