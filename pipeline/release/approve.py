"""`serve-pipeline approve`: sign an approval of a release for one environment.

The approval is refused here already when it could not count at promotion (a key the
environment does not trust, not among its approvers, the creator's own identity); the
promotion checks it again, since anything may have changed in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.errors import PolicyError
from pipeline.release.chain import approval_rules, check_attestation, trusted_keys
from pipeline.release.manifest import manifest_digest, read_manifest
from pipeline.release.pointers import read_pointer
from pipeline.release.signing.approval_record import Approval
from pipeline.release.signing.approvals import write_approval
from pipeline.release.signing.dsse import Signer
from pipeline.release.store.base import Store
from pipeline.spec.models import LoadedSpec


def approve_release(store: Store, loaded: LoadedSpec, release_id: str, environment: str,
                    signer: Signer, by: str, identity: Mapping[str, Any],
                    note: str = "") -> Approval:
    name = loaded.spec.name
    where = f"environments/{environment}.yaml"
    manifest = read_manifest(store, name, release_id)
    rules = approval_rules(loaded, environment)
    key = next((k for k in rules.keys if k.keyid == signer.keyid), None)
    if key is None:
        raise PolicyError(f"the key {signer.keyid[:19]} is not trusted in {where} "
                          "approval.keys: an approval signed with it would not count")
    if rules.approvers and key.name not in rules.approvers:
        raise PolicyError(f"key {key.name} is not among {where} approval.approvers")
    if rules.distinct_from_creator:
        attestation = check_attestation(store, manifest, trusted_keys(
            loaded.policy.attestation.keys, loaded, where), where)
        mine = {f"key:{key.keyid}", *([key.owner] if key.owner else []),
                *(identity.get("verified_identities") or [])}
        same = mine & attestation.creators
        if same:
            raise PolicyError(f"release {release_id} was created by the same verified "
                              f"identity ({', '.join(sorted(same))}): {where} "
                              "approval.distinct_from_creator needs someone else's approval")
    pointer, _ = read_pointer(store, name, environment)
    return write_approval(store, name, release_id, manifest_digest(store, name, release_id),
                          environment, pointer, signer, by, identity, note)
