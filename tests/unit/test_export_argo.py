"""`export argo`: the AnalysisTemplate runs the judge as Argo's job provider reads a Job, and
the strict checker behind it (tests/support/argo_schema.py) refuses what Argo or Kubernetes
would refuse or ignore. Against the kubernetes SDK's own models: in
tests/integration/test_canary_analysis.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli.app import main
from pipeline.errors import JudgeInputError, UsageError
from pipeline.export.argo import JudgeJob, analysis_template, judge_deadline_s
from pipeline.regression.canary import EXIT_CODES
from pipeline.release.manifest import manifest_digest
from tests.support.argo_schema import template_problems
from tests.support.kserve_exports import release
from tests.support.kserve_schema import Model

JUDGE_IMAGE = "registry.example/ml/judge@sha256:" + "ab" * 32
CANARY, STABLE = "http://fraud-mlp-canary.ml.svc:8000", "http://fraud-mlp-stable.ml.svc:8000"
# Stand-ins for the SDK's models (the real ones in the integration test): the keys the
# template sets, each taking any value.
STAND_INS = {"V1ObjectMeta": ("name", "labels", "annotations"),
             "V1JobSpec": ("backoffLimit", "activeDeadlineSeconds", "podFailurePolicy",
                           "template")}


@pytest.fixture
def open_models() -> dict[str, Model]:
    return {name: Model(name, {key: (key, "object") for key in keys}, frozenset())
            for name, keys in STAND_INS.items()}


def template(project: Path, environment: str | None = "production",
             canary: str | None = CANARY, stable: str | None = STABLE) -> dict[str, Any]:
    example = release(project, "triton")
    return analysis_template(example.store, example.manifest,
                             JudgeJob(JUDGE_IMAGE, "serve.yaml", environment), canary, stable)


def test_the_metric_runs_the_judge_as_a_job_in_the_pinned_image(project: Path) -> None:
    example = release(project, "triton")
    document = analysis_template(example.store, example.manifest,
                                 JudgeJob(JUDGE_IMAGE, "/project/serve.yaml", "production"),
                                 CANARY, None)
    [metric] = document["spec"]["metrics"]
    job = metric["provider"]["job"]["spec"]
    [container] = job["template"]["spec"]["containers"]
    assert container["image"] == JUDGE_IMAGE
    assert [*container["command"], *container["args"]] == [
        "serve-pipeline", "judge", "--canary", "{{args.canary-url}}", "--stable",
        "{{args.stable-url}}", "--file", "/project/serve.yaml", "--env", "production"]
    # The URLs given are the arguments' defaults; one not given, the Rollout passes.
    assert document["spec"]["args"] == [{"name": "canary-url", "value": CANARY},
                                        {"name": "stable-url"}]
    notes = {"serve-pipeline.dev/release-id": example.release_id,
             "serve-pipeline.dev/manifest-sha256": manifest_digest(
                 example.store, "fraud-mlp", example.release_id),
             "serve-pipeline.dev/attestation-sha256": example.manifest.attestation_digest}
    assert document["metadata"]["annotations"] == notes
    assert metric["provider"]["job"]["metadata"]["annotations"] == notes
    assert document["metadata"]["name"] == "fraud-mlp-judge"


def test_the_exit_codes_map_onto_the_jobs_end(project: Path) -> None:
    """Argo's job provider: a Job that completes is Successful, one that fails is Failed.
    So pass completes it, fail and inconclusive (and a bad spec) fail it at once, and only
    an endpoint not ready yet (or an eviction) is tried again."""
    [metric] = template(project)["spec"]["metrics"]
    job = metric["provider"]["job"]["spec"]
    fail_at_once, evicted = job["podFailurePolicy"]["rules"]
    assert fail_at_once == {"action": "FailJob", "onExitCodes": {
        "containerName": "judge", "operator": "In",
        "values": [EXIT_CODES["fail"], EXIT_CODES["inconclusive"], JudgeInputError.exit_code]}}
    assert evicted["action"] == "Ignore"
    assert job["backoffLimit"] == 2 and job["template"]["spec"]["restartPolicy"] == "Never"
    assert metric["failureLimit"] == 0
    assert not {"successCondition", "failureCondition", "inconclusiveLimit", "count",
                "interval"} & set(metric)


def test_the_deadline_covers_every_try_at_the_cap_of_rounds(project: Path) -> None:
    example = release(project, "triton")
    spec = template(project)
    deadline = spec["spec"]["metrics"][0]["provider"]["job"]["spec"]["activeDeadlineSeconds"]
    stages = example.loaded.spec.stages
    one_run_s = (2 * stages.readiness.timeout.seconds
                 + 2 * stages.regression.max_rounds * stages.regression.window.seconds)
    assert deadline == judge_deadline_s(example.loaded.spec) > 3 * one_run_s


def test_an_environment_is_passed_as_the_judges_overlay_a_release_is_not(
        project: Path) -> None:
    args = template(project, None)["spec"]["metrics"][0]["provider"]["job"]["spec"][
        "template"]["spec"]["containers"][0]["args"]
    assert "--env" not in args


@pytest.mark.parametrize(("image", "canary", "complaint"), [
    ("registry.example/ml/judge:latest", CANARY, "--judge-image registry.example/ml/judge:"
                                                 "latest: not pinned by digest"),
    (JUDGE_IMAGE, "https://canary:8000", "--canary-url https://canary:8000: expected http://"),
])
def test_an_unpinned_judge_or_a_url_it_cannot_measure_is_refused(
        project: Path, image: str, canary: str, complaint: str) -> None:
    example = release(project, "triton")
    with pytest.raises(UsageError, match=complaint):
        analysis_template(example.store, example.manifest, JudgeJob(image, "serve.yaml", None),
                          canary, STABLE)


def test_the_command_prints_the_template_as_yaml(project: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    example = release(project, "triton")
    with pytest.raises(SystemExit) as exited:
        main(["export", "argo", "production", "--judge-image", JUDGE_IMAGE,
              "--canary-url", CANARY, "--stable-url", STABLE])
    assert exited.value.code in (0, None)
    out = capsys.readouterr().out
    assert "&id" not in out                           # no YAML anchors: plain objects
    assert yaml.safe_load(out) == analysis_template(
        example.store, example.manifest, JudgeJob(JUDGE_IMAGE, "serve.yaml", "production"),
        CANARY, STABLE)
    with pytest.raises(SystemExit) as exited:
        main(["export", "argo", "production", "--judge-image", "judge:latest"])
    assert exited.value.code == 2


def test_the_checker_takes_the_template(project: Path, open_models: dict[str, Model]) -> None:
    assert template_problems(template(project), open_models) == []
    assert template_problems(template(project, canary=None, stable=None), open_models) == []


def _set(document: dict[str, Any], where: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    node: Any = changed
    for key in where[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[where[-1]]
    else:
        node[where[-1]] = value
    return changed


_DELETE = object()
METRIC = ("spec", "metrics", 0)
JOB = (*METRIC, "provider", "job", "spec")


@pytest.mark.parametrize(("where", "value", "complaint"), [
    ((*METRIC, "successCondition"), "result == 0", "spec.metrics.0.successCondition: never "
                                                    "evaluated on a job metric"),
    ((*METRIC, "inconclusiveLimit"), 1, "inconclusiveLimit: never evaluated"),
    ((*METRIC, "provider"), _DELETE, "spec.metrics.0: 'provider' is a required property"),
    ((*METRIC, "provider", "web"), {"url": "http://x"}, "exactly one provider"),
    ((*METRIC, "failureLimit"), -2, "failureLimit: must be >= 0, or -1"),
    ((*METRIC, "count"), 3, "interval: must be given when count > 1"),
    ((*METRIC, "interval"), "5 minutes", "'5 minutes' is not a Go duration"),
    ((*METRIC, "timeout"), "5m", "spec.metrics.0.timeout: unknown field (not in Metric)"),
    (("spec", "args", 0, "value"), 8000, "8000 is not of type 'str'"),
    (("spec", "args"), [{"name": "stable-url"}], "{{args.canary-url}} is used but spec.args "
                                                 "does not declare it"),
    (("spec", "metrics"), [], "spec.metrics: no metrics specified"),
    (("spec", "templates"), [{"name": "x"}], "templates.0.name: unknown field"),
    (("kind",), "ClusterAnalysisTemplate", "is not AnalysisTemplate"),
    (("apiVersion",), "argoproj.io/v1beta1", "is not argoproj.io/v1alpha1"),
    ((*JOB, "template", "spec", "restartPolicy"), "OnFailure", "a podFailurePolicy needs Never"),
    ((*JOB, "podFailurePolicy", "rules", 0, "onExitCodes", "values"), [2, 1],
     "must be sorted, unique"),
    ((*JOB, "podFailurePolicy", "rules", 0, "onExitCodes", "containerName"), "main",
     "no container 'main'"),
    ((*JOB, "podFailurePolicy", "rules", 0, "action"), "Fail", "'Fail' is not one of"),
])
def test_the_checker_refuses_what_argo_would_refuse_or_ignore(
        project: Path, open_models: dict[str, Model], where: tuple[str | int, ...],
        value: Any, complaint: str) -> None:
    found = template_problems(_set(template(project), where, value), open_models)
    assert any(complaint in problem for problem in found), found
