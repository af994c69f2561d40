"""`serve-pipeline export argo`: an Argo Rollouts `AnalysisTemplate` (argoproj.io/v1alpha1)
whose one metric runs `serve-pipeline judge` as a Kubernetes Job (the job provider) against
the canary and the stable endpoints.

How a Job's end becomes Argo's verdict (Argo Rollouts' job provider): a Job that completes
is a Successful measurement, a Job that fails a Failed one. Argo reads no exit code, value
or condition of a Job: successCondition, failureCondition and inconclusiveLimit are
evaluated on a provider's value, and a job measurement has none; Argo's Inconclusive (the
Rollout pauses for a human) comes from a job (from v1.10) only when its pod cannot pull its
image or when the analysis terminates it. So the exit codes are mapped in the Job itself, by
its podFailurePolicy:
- 0 pass: the Job completes: Successful, the Rollout goes on;
- 1 fail and 2 inconclusive: the Job fails at once (FailJob, no retry): Failed, the Rollout
  aborts. An inconclusive judgement refuses the canary as an inconclusive regression gate
  refuses a promotion; measuring again until it passes would spend the verdict's error
  rate once per try;
- 4 bad spec or arguments: fails at once too (a retry cannot fix it);
- 3 an endpoint not answering or not ready, and a pod evicted: retried (backoffLimit), a
  new judgement from the start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeline.errors import JudgeInputError, UsageError
from pipeline.export.kserve import PINNED, release_annotations, release_spec
from pipeline.regression.canary import EXIT_CODES, checked_url
from pipeline.release.manifest import manifest_digest
from pipeline.release.manifest_record import Manifest
from pipeline.release.store.base import Store
from pipeline.spec.models import Spec

API_VERSION = "argoproj.io/v1alpha1"
METRIC_NAME = "not-worse"
CONTAINER_NAME = "judge"
CANARY_ARG, STABLE_ARG = "canary-url", "stable-url"
# A Job's tries when an endpoint is not ready yet (exit 3) or its pod is evicted.
RETRIES = 2
NO_RETRY_EXIT_CODES = (EXIT_CODES["fail"], EXIT_CODES["inconclusive"], JudgeInputError.exit_code)
# The judge's own run: both endpoints' readiness, the warm-ups, every round at the cap; the
# deadline allows twice that per try (windows start and end, a busy node), plus a minute.
DEADLINE_FACTOR = 2.0
DEADLINE_SLACK_S = 60
# A load generator short of CPU measures itself: the judge asks for one core.
JUDGE_REQUESTS = {"cpu": "1", "memory": "1Gi"}


@dataclass(frozen=True)
class JudgeJob:
    """What the Job runs: the judge's image (pinned by digest: it holds serve-pipeline, the
    spec and its representative inputs), the spec's path in it, and the overlay."""

    image: str
    spec_path: str
    environment: str | None


def judge_deadline_s(spec: Spec) -> int:
    """activeDeadlineSeconds of the Job, over all its tries."""
    stages = spec.stages
    window_s = stages.regression.window.seconds
    run_s = (2 * stages.readiness.timeout.seconds + stages.latency.warmup.seconds
             + min(stages.latency.warmup.seconds, 1.0)
             + 2 * stages.regression.max_rounds * window_s)
    return math.ceil((RETRIES + 1) * DEADLINE_FACTOR * run_s) + DEADLINE_SLACK_S


def judge_arguments(job: JudgeJob) -> list[str]:
    arguments = ["judge", "--canary", f"{{{{args.{CANARY_ARG}}}}}",
                 "--stable", f"{{{{args.{STABLE_ARG}}}}}", "--file", job.spec_path]
    return arguments + (["--env", job.environment] if job.environment else [])


def job_spec(spec: Spec, job: JudgeJob) -> dict[str, Any]:
    container = {
        "name": CONTAINER_NAME, "image": job.image, "command": ["serve-pipeline"],
        "args": judge_arguments(job),
        "resources": {"requests": dict(JUDGE_REQUESTS)},
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "backoffLimit": RETRIES,
        "activeDeadlineSeconds": judge_deadline_s(spec),
        "podFailurePolicy": {"rules": [
            {"action": "FailJob",
             "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                             "values": list(NO_RETRY_EXIT_CODES)}},
            {"action": "Ignore",
             "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]},
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }


def argument(name: str, value: str | None) -> dict[str, str]:
    """A template argument; without a value the Rollout's analysis step passes it."""
    return {"name": name} if value is None else {"name": name, "value": value}


def analysis_template(store: Store, manifest: Manifest, job: JudgeJob,
                      canary_url: str | None, stable_url: str | None) -> dict[str, Any]:
    """The AnalysisTemplate that judges a canary of `manifest`'s release."""
    if not PINNED.match(job.image):
        raise UsageError(f"--judge-image {job.image}: not pinned by digest "
                         "(REPOSITORY@sha256:<64 hex>): the judge that decides a rollout must "
                         "be the one that was reviewed")
    for role, url in (("canary-url", canary_url), ("stable-url", stable_url)):
        try:
            if url is not None:
                checked_url(role, url)
        except JudgeInputError as exc:
            raise UsageError(str(exc)) from None
    spec = release_spec(store, manifest)
    notes = release_annotations(manifest, manifest_digest(store, manifest.name,
                                                          manifest.release_id))
    labels = {"app.kubernetes.io/name": spec.name,
              "app.kubernetes.io/managed-by": "serve-pipeline"}
    return {
        "apiVersion": API_VERSION, "kind": "AnalysisTemplate",
        "metadata": {"name": f"{spec.name}-judge", "labels": dict(labels),
                     "annotations": dict(notes)},
        "spec": {
            "args": [argument(CANARY_ARG, canary_url), argument(STABLE_ARG, stable_url)],
            "metrics": [{
                "name": METRIC_NAME,
                "failureLimit": 0,
                "provider": {"job": {"metadata": {"labels": dict(labels),
                                                  "annotations": dict(notes)},
                                     "spec": job_spec(spec, job)}},
            }],
        },
    }
