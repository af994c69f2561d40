"""The failure path's last probe: what a server does when the model raises.

No input makes an arbitrary model raise, so each server kind is started once more with
a stand-in that always raises, for the spec's own tensors and batching: one request
to it shows the status a client gets and whether the server stays up (it is then
asked again, and for readiness). The stand-in runs after every measured window, one
server at a time, and is stopped before the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.compare import adapters
from pipeline.errors import PipelineError
from pipeline.model.tensors import load_samples, take
from pipeline.servers import http
from pipeline.servers.base import send
from pipeline.spec.models import LoadedSpec, ModelSource

REQUEST_TIMEOUT_S = 30.0
# Zeros in, zeros out: the generated TorchServe handler warms the model up with all-zero
# batches while it loads, and a stand-in that raised then would never load. Any other
# input raises.
RAISING_MODEL = '''"""A stand-in written by `serve-pipeline compare`: it raises on real input."""

import torch

OUTPUTS = {outputs!r}


def blank(x):
    """All zeros, or all empty strings (a string input is a list of str)."""
    return not any(x) if isinstance(x, list) else not bool(x.any())


class AlwaysRaises(torch.nn.Module):
    def forward(self, *inputs):
        if all(blank(x) for x in inputs):
            items = len(inputs[0]) if isinstance(inputs[0], list) else inputs[0].shape[0]
            return [[""] * items if dtype == "string" else
                    torch.zeros((items, *shape), dtype=getattr(torch, dtype))
                    for shape, dtype in OUTPUTS]
        raise RuntimeError("the model raised on purpose (compare's model_exception probe)")


def build() -> torch.nn.Module:
    return AlwaysRaises()
'''


def raising_spec(loaded: LoadedSpec, folder: Path) -> LoadedSpec:
    """`loaded` with its model replaced by the stand-in written into `folder`."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    outputs = [(list(o.item_shape(1)), o.dtype) for o in loaded.spec.model.outputs]
    (folder / "raising.py").write_text(RAISING_MODEL.format(outputs=outputs),
                                       encoding="utf-8")
    torch.save({}, folder / "raising.pt")
    where = folder.resolve().relative_to(loaded.workspace.resolve())
    model = loaded.spec.model.model_copy(update={
        "source": ModelSource(path=str(where / "raising.pt")), "format": "eager",
        "entrypoint": f"{where / 'raising.py'}:build", "trusted": False})
    return replace(loaded, spec=loaded.spec.model_copy(update={"model": model}))


def probe_model_exception(loaded: LoadedSpec, folder: Path,
                          env: Mapping[str, str]) -> dict[str, Any]:
    """{"status", "stays_up", "error"} for one request to a model that raises."""
    stand_in = raising_spec(loaded, folder)
    batch = take(load_samples(loaded.spec.model, loaded.spec.stages.parity,
                              loaded.workspace), 1)
    with ExitStack() as resources:
        try:
            served = adapters.serve(stand_in, folder, env, resources)
        except PipelineError as exc:
            return {"status": None, "stays_up": None,
                    "note": f"not probed: the stand-in did not start ({exc})"}
        server = served.server
        try:
            reply = send(server.infer_request(batch), REQUEST_TIMEOUT_S)
            status: int | None = reply.status
            said = reply.text()[:160]
        except http.Unreachable as exc:
            status, said = None, str(exc)
        try:
            again: int | None = send(server.infer_request(batch), REQUEST_TIMEOUT_S).status
        except http.Unreachable:
            again = None
        stays_up = server.alive() and server.is_ready() and again is not None
    return {"status": status, "stays_up": stays_up, "error": said,
            "sent": "one valid request to a stand-in model that raises on it",
            "status_again": again}
