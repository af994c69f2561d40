"""Spec texts for tests: the examples with short measurement settings."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TORCHSERVE_EXAMPLE = REPO / "examples" / "torchserve" / "serve.yaml"

# A short capacity search: on a busy 2-core machine 2 s may confirm no rate, and these
# tests are not about capacity (test_capacity.py is), so an unknown capacity is accepted.
# Nor are they about latency (test_latency_verdicts.py is): two 1 s windows; on a busy
# machine a few thousand correlated requests may leave a verdict undecided, and an undecided
# gate whose measured value is within its threshold is accepted.
FAST_STAGES = """
stages:
  readiness: {timeout: 90s}
  parity: {data: examples/mlp/samples.npz, atol: 1e-5, rtol: 1e-4}
  failure: {}
  latency: {concurrency: 4, warmup: 500ms, duration: LATENCY_DURATION,
            stability: {windows: 2, max_windows: 2}, verdict: {accept_inconclusive: true}}
  saturation: {max_concurrency: 4, probe_duration: 500ms, capacity: {budget: 2s, step: 250ms,
                                                           accept_inconclusive: true},
               burst: {rate: 100/s, duration: 500ms, settle: 250ms}}
"""

# The TorchServe example's measurement, short (for examples/torchserve/serve.yaml), judged
# as FAST_STAGES is; its capacity search as short (the default holds last 20 s or more).
TORCHSERVE_FAST_STAGES = """
stages:
  readiness: {timeout: 180s}
  parity: {data: ../mlp/samples.npz}
  failure: {}
  latency: {concurrency: 8, warmup: 1s, duration: 4s, stability: {windows: 2, max_windows: 4},
            verdict: {accept_inconclusive: true}}
  saturation: {max_concurrency: 4, probe_duration: 1s,
               capacity: {budget: 2s, step: 250ms, accept_inconclusive: true},
               burst: {rate: 100/s, duration: 500ms, settle: 250ms}}
"""

# For TorchServe tests about something else than measurement. Two TorchServes on 2 cores
# answer few requests in 2 s: too few for a p99 bound, so an inconclusive one passes.
QUICK_TORCHSERVE_STAGES = """
stages:
  readiness: {timeout: 240s}
  parity: {data: ../mlp/samples.npz}
  failure: FAILURE
  latency: {concurrency: 2, warmup: 500ms, duration: 2s, verdict: {accept_inconclusive: true}}
  saturation: {enabled: false}
"""


def with_stages(spec: str, stages: str, publish: str | None = None) -> str:
    """`spec` with its `stages:` section replaced by `stages` (which starts with `stages:`),
    and its `publish:` section's body by `publish` when given."""
    head, _, tail = spec.partition("\nstages:\n")
    _, _, kept = tail.partition("\npublish:\n")
    return head + "\n" + stages + "\npublish:\n" + (kept if publish is None else publish)


# An error rate of 0.1% passes its exact bound only after about 3,000 requests without an
# error; the short runs above hold fewer on a busy machine, so their specs allow 1% (the
# tests of the error-rate gate judge a model that fails far more often).
SHORT_RUN_ERROR_RATE = ("  error_rate: 0.1%\n", "  error_rate: 1%\n")


def fast_spec(example: str, latency_duration: str = "2s", instances: int = 1) -> str:
    head = example.replace("instances: 2", f"instances: {instances}")
    head = head.replace(*SHORT_RUN_ERROR_RATE)
    return with_stages(head, FAST_STAGES.replace("LATENCY_DURATION", latency_duration))


def without_saturation(spec: str) -> str:
    """`spec` with its saturation stage off: for tests about releases, the store and the
    regression check, which read nothing the saturation stage measures (test_capacity.py
    and the gate refusals test that stage)."""
    text, replaced = re.subn(r"(?m)^  saturation: .*\n(?:   .*\n)*",
                             "  saturation: {enabled: false}\n", spec)
    assert replaced == 1, "the spec has no one-entry saturation stage to turn off"
    return text


def torchserve_spec(stages: str, name: str | None = None, publish: str | None = None) -> str:
    """The TorchServe example (for examples/<folder>/serve.yaml) with these stages, and
    another model name and `publish:` body when given."""
    example = TORCHSERVE_EXAMPLE.read_text().replace(*SHORT_RUN_ERROR_RATE)
    if name is not None:
        example = example.replace("name: fraud-mlp-torchserve", f"name: {name}")
    return with_stages(example, stages, publish)


def quick_torchserve_spec(name: str | None = None, publish: str | None = None,
                          failure: str = "{}") -> str:
    return torchserve_spec(QUICK_TORCHSERVE_STAGES.replace("FAILURE", failure), name, publish)
