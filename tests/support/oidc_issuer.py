"""A local OIDC issuer for tests: a loopback HTTP server publishing the discovery document
and a JWKS for an RSA key the test generates, minting GitHub-Actions-shaped tokens, and
answering as ACTIONS_ID_TOKEN_REQUEST_URL does (`?audience=...` with a bearer token)."""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.http_server import serving

KID = "test-key-1"


@dataclass
class Issuer:
    url: str
    key: rsa.RSAPrivateKey
    request_token: str

    def mint(self, audience: str = "serve-pipeline", actor: str = "rita",
             expires_in: float = 300, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": audience, "sub": f"repo:acme/fraud:environment:{actor}",
                "repository": "acme/fraud", "actor": actor, "run_id": "4242", "iat": now - 5,
                "nbf": now - 5, "exp": int(now + expires_in), **claims}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": KID})

    def env(self, token: str | None = None) -> dict[str, str]:
        """Variables for a CLI run that offers `token` directly, or (None) as a GitHub job
        does, through the token request URL."""
        env = {"SERVE_PIPELINE_OIDC_ISSUER": self.url}
        if token is not None:
            env["SERVE_PIPELINE_OIDC_TOKEN"] = token
        else:
            env["ACTIONS_ID_TOKEN_REQUEST_URL"] = f"{self.url}/token?api-version=2.0"
            env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = self.request_token
        return env


def _handler(issuer: list[Issuer]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            me = issuer[0]
            url = urllib.parse.urlparse(self.path)
            if url.path == "/.well-known/openid-configuration":
                self._send(200, {"issuer": me.url, "jwks_uri": f"{me.url}/.well-known/jwks"})
            elif url.path == "/.well-known/jwks":
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(me.key.public_key()))
                self._send(200, {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]})
            elif url.path == "/token":
                if self.headers.get("Authorization") != f"bearer {me.request_token}":
                    self._send(401, {"message": "bad request token"})
                    return
                audience = urllib.parse.parse_qs(url.query).get("audience", [""])[0]
                self._send(200, {"value": me.mint(audience=audience)})
            else:
                self._send(404, {})

    return Handler


@contextmanager
def local_issuer() -> Iterator[Issuer]:
    holder: list[Issuer] = []
    with serving(_handler(holder)) as url:
        holder.append(Issuer(url, rsa.generate_private_key(public_exponent=65537,
                                                           key_size=2048),
                             secrets.token_hex(8)))
        yield holder[0]
