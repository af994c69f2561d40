"""`serve-pipeline verify RELEASE`: the chain of custody checked offline, with public keys.

It needs the store (a copied directory will do) and the public keys: those the
environment overlays next to the spec trust, and any given with --public-key. Nothing
is written and no network is used.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import PipelineError, UsageError
from pipeline.release.chain import VerifiedChain, trusted_keys, verify_offline
from pipeline.release.signing.keys import TrustedKey, load_public_key
from pipeline.release.store import open_store, store_for
from pipeline.release.store.base import Store
from pipeline.servers.specs import load_spec
from pipeline.spec.loading import environment_names
from pipeline.spec.models import LoadedSpec


def given_keys(paths: list[Path]) -> list[TrustedKey]:
    return [TrustedKey(path.stem, load_public_key(str(path.resolve()), Path.cwd(),
                                                  f"--public-key {path}")) for path in paths]


def _release_name(store: Store, release_id: str) -> str:
    names = {key.split("/")[1] for key in store.list("releases/")
             if key.endswith(f"/{release_id}.json")}
    if len(names) != 1:
        raise UsageError(f"no single release {release_id} in {store.url} "
                         f"({'found in ' + ', '.join(sorted(names)) if names else 'none found'})")
    return names.pop()


def _overlay_keys(loaded: LoadedSpec, environments: list[str], every: bool = True
                  ) -> tuple[list[TrustedKey], dict[str, list[TrustedKey]]]:
    """The keys the overlays of `environments` trust. Over `every` overlay next to the
    spec, one that cannot be read (a key file missing) trusts nothing, so that it does not
    stop the others' checks (its own commands and `validate --env` name the problem)."""
    attestation: list[TrustedKey] = []
    approvers: dict[str, list[TrustedKey]] = {}
    for environment in environments:
        where = f"environments/{environment}.yaml"
        try:
            overlay = load_spec(loaded.path, environment)
            found = (trusted_keys(overlay.policy.attestation.keys, overlay, where),
                     trusted_keys(overlay.policy.approval.keys, overlay, where))
        except PipelineError:
            if not every:
                raise
            continue
        attestation += found[0]
        approvers[environment] = found[1]
    return attestation, approvers


def verify_release_offline(spec: Path, release_id: str, store_url: str | None,
                           public_keys: list[Path], environment: str | None
                           ) -> tuple[Store, VerifiedChain]:
    extra = given_keys(public_keys)
    attestation: list[TrustedKey] = list(extra)
    approvers: dict[str, list[TrustedKey]] = {}
    if spec.exists():
        loaded = load_spec(spec, None)
        store = open_store(store_url, Path.cwd()) if store_url else store_for(loaded)
        name = loaded.spec.name
        environments = [environment] if environment else environment_names(loaded.workspace)
        overlay_attestation, approvers = _overlay_keys(loaded, environments,
                                                       every=environment is None)
        attestation += overlay_attestation
    elif store_url:
        store = open_store(store_url, Path.cwd())
        name = _release_name(store, release_id)
    else:
        raise UsageError(f"no spec at {spec}: give --store URL (and --public-key)")

    def keys_for(environment: str) -> list[TrustedKey]:
        return [*approvers.get(environment, []), *extra]

    return store, verify_offline(store, name, release_id, attestation, keys_for)


def approver_keys_by_environment(loaded: LoadedSpec) -> dict[str, list[TrustedKey]]:
    """For `store verify`: the approver keys each overlay next to the spec trusts."""
    return _overlay_keys(loaded, environment_names(loaded.workspace))[1]
