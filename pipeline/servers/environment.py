"""The environment a server and the model code it runs get: an allowlist, never ours.

The pipeline's own environment holds the store's credentials (AWS_*), tokens of the CI
(GITHUB_TOKEN, ACTIONS_ID_TOKEN_REQUEST_*) and settings of our own (SERVE_PIPELINE_*).
Model code is the user's: it gets what running needs and nothing else. Triton passes its
environment on to the python-backend stubs, TorchServe to its Java frontend and from there
to the Python workers.
"""

from __future__ import annotations

from collections.abc import Mapping

# Running: where programs and libraries are, the user's home (torch's caches), locale and
# time zone, temp folders. Threads: torch and its math libraries read these. GPUs: which
# devices the process may see. Java: TorchServe's frontend (`java` on PATH, or JAVA_HOME).
ALLOWED = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "TMPDIR", "TEMP", "TMP", "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME",
    "JAVA_HOME",
})


def server_environment(base: Mapping[str, str], **settings: str) -> dict[str, str]:
    """The allowlisted part of `base`, with the server's own `settings` over it."""
    allowed = {key: value for key, value in base.items() if key in ALLOWED}
    return {**allowed, **settings}
