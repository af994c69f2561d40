"""What Argo Rollouts would refuse, or silently ignore, in an `AnalysisTemplate`, checked
strictly.

The wrapper is checked against Argo Rollouts' own API types (argoproj.io/v1alpha1, Go
package pkg/apis/rollouts/v1alpha1, analysis_types.go at release v1.9.1, commit
b6bd3bcf8f60d717a98763d26acc983db7f97cb0; unchanged in these fields up to v1.10's
candidates), written down below as the JSON keys their `json` tags give: a key the type
does not have is an error, and a key whose tag has no `omitempty` (and no `+optional`) is
required. The job provider's `metadata` and `spec` are Kubernetes' `ObjectMeta` and
`batchv1.JobSpec`, checked against the kubernetes 35.0.0 SDK's models by
tests/support/kserve_schema.py's TypeChecker, strictly, as `export kserve`'s objects are.
A provider other than the job is not modelled here, so using one is an error.

Then what the types leave to Argo's validation (utils/analysis/factory.go ValidateMetrics:
metrics present, unique names, one provider each, failureLimit >= -1, count > 1 needs an
interval), to argument resolution (every `{{args.NAME}}` declared in `spec.args`), and to
Kubernetes' Job validation (a podFailurePolicy needs restartPolicy Never; its exit codes).
And one rule of meaning: Argo's job provider decides a measurement by whether the Job
completed or failed (metricproviders/job/job.go), so successCondition, failureCondition and
inconclusiveLimit on a job metric are never evaluated: setting them is a problem here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests.support.kserve_schema import Model, TypeChecker, _metadata_problems

API_VERSION = "argoproj.io/v1alpha1"
INT_OR_STRING = "object"        # intstr.IntOrString, as the Kubernetes SDK types it
UNMODELLED = "not modelled here"


def _model(name: str, fields: Mapping[str, str], required: tuple[str, ...] = ()) -> Model:
    return Model(name, {key: (key, kind) for key, kind in fields.items()}, frozenset(required))


ARGO_MODELS: dict[str, Model] = {model.name: model for model in (
    _model("AnalysisTemplate", {"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                                "spec": "AnalysisTemplateSpec"}, ("spec",)),
    _model("AnalysisTemplateSpec", {
        "metrics": "list[Metric]", "args": "list[Argument]", "dryRun": "list[DryRun]",
        "measurementRetention": "list[MeasurementRetention]",
        "templates": "list[AnalysisTemplateRef]"}),
    _model("Metric", {
        "name": "str", "interval": "str", "initialDelay": "str", "count": INT_OR_STRING,
        "successCondition": "str", "failureCondition": "str", "failureLimit": INT_OR_STRING,
        "inconclusiveLimit": INT_OR_STRING, "consecutiveErrorLimit": INT_OR_STRING,
        "provider": "MetricProvider", "consecutiveSuccessLimit": INT_OR_STRING},
        ("name", "provider")),
    _model("MetricProvider", {
        "job": "JobMetric", **{key: f"{UNMODELLED}: {key}" for key in (
            "prometheus", "kayenta", "web", "datadog", "wavefront", "newRelic",
            "cloudWatch", "graphite", "influxdb", "skywalking", "plugin")}}),
    _model("JobMetric", {"metadata": "V1ObjectMeta", "spec": "V1JobSpec"}, ("spec",)),
    _model("Argument", {"name": "str", "value": "str", "valueFrom": "ValueFrom"}, ("name",)),
    _model("ValueFrom", {"secretKeyRef": "SecretKeyRef", "fieldRef": "FieldRef"}),
    _model("SecretKeyRef", {"name": "str", "key": "str"}, ("name", "key")),
    _model("FieldRef", {"fieldPath": "str"}, ("fieldPath",)),
    _model("DryRun", {"metricName": "str"}, ("metricName",)),
    _model("MeasurementRetention", {"metricName": "str", "limit": "int"},
           ("metricName", "limit")),
    _model("AnalysisTemplateRef", {"templateName": "str", "clusterScope": "bool"}),
)}
ARGUMENT_USE = re.compile(r"\{\{\s*args\.([^}\s]+)\s*\}\}")
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
IGNORED_ON_A_JOB = ("successCondition", "failureCondition", "inconclusiveLimit")
POD_FAILURE_ACTIONS = {"FailJob", "FailIndex", "Ignore", "Count"}


def _int(value: Any, default: int) -> int | None:
    """An IntOrString's value as Argo reads it (`IntValue`); None for one it cannot read."""
    if value is None:
        return default
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _pod_failure_problems(job: Mapping[str, Any], where: str) -> list[str]:
    policy = job.get("podFailurePolicy")
    if not isinstance(policy, Mapping):
        return []
    pod = job.get("template", {}).get("spec", {})
    found = []
    if pod.get("restartPolicy") != "Never":
        found.append(f"{where}.template.spec.restartPolicy: a podFailurePolicy needs Never")
    containers = {c.get("name") for c in pod.get("containers", []) if isinstance(c, Mapping)}
    for i, rule in enumerate(policy.get("rules", [])):
        at = f"{where}.podFailurePolicy.rules.{i}"
        if rule.get("action") not in POD_FAILURE_ACTIONS:
            found.append(f"{at}.action: {rule.get('action')!r} is not one of "
                         f"{sorted(POD_FAILURE_ACTIONS)}")
        codes = rule.get("onExitCodes")
        if (codes is None) == (rule.get("onPodConditions") is None):
            found.append(f"{at}: exactly one of onExitCodes and onPodConditions")
        if isinstance(codes, Mapping):
            values = codes.get("values", [])
            if codes.get("operator") not in ("In", "NotIn"):
                found.append(f"{at}.onExitCodes.operator: In or NotIn")
            if not values or values != sorted(set(values)) or (
                    codes.get("operator") == "In" and 0 in values):
                found.append(f"{at}.onExitCodes.values: {values!r} must be sorted, unique, "
                             "and without 0 for In")
            name = codes.get("containerName")
            if name is not None and name not in containers:
                found.append(f"{at}.onExitCodes.containerName: no container {name!r}")
    return found


def _metric_problems(metric: Mapping[str, Any], where: str) -> list[str]:
    found = []
    provider = metric.get("provider")
    providers = [key for key, value in (provider or {}).items() if value is not None]
    if len(providers) != 1:
        found.append(f"{where}.provider: exactly one provider, not {providers}")
    failure_limit = _int(metric.get("failureLimit"), 0)
    success_limit = _int(metric.get("consecutiveSuccessLimit"), 0)
    count = _int(metric.get("count"), 0)
    if failure_limit is None or failure_limit < -1:
        found.append(f"{where}.failureLimit: must be >= 0, or -1 to be disabled")
    elif failure_limit == -1 and success_limit == 0:
        found.append(f"{where}: failureLimit and consecutiveSuccessLimit both disabled")
    if count is None:
        found.append(f"{where}.count: {metric.get('count')!r} is not a count")
    elif count > 1 and not metric.get("interval"):
        found.append(f"{where}.interval: must be given when count > 1")
    for key in ("interval", "initialDelay"):
        value = metric.get(key)
        if value and not (isinstance(value, str) and GO_DURATION.match(value)):
            found.append(f"{where}.{key}: {value!r} is not a Go duration")
    job = (provider or {}).get("job")
    if isinstance(job, Mapping):
        found += [f"{where}.{key}: never evaluated on a job metric (its outcome is whether "
                  "the Job completed)" for key in IGNORED_ON_A_JOB if key in metric]
        if isinstance(job.get("spec"), Mapping):
            found += _pod_failure_problems(job["spec"], f"{where}.provider.job.spec")
    return found


def template_problems(document: Mapping[str, Any],
                      sdk_models: Mapping[str, Model]) -> list[str]:
    """Why Argo Rollouts (or the API server) would refuse `document`, or ignore part of it;
    empty when it would take it as written."""
    models = {**sdk_models, **ARGO_MODELS}
    found = TypeChecker(models).model_problems(document, ARGO_MODELS["AnalysisTemplate"], "")
    if document.get("apiVersion") != API_VERSION:
        found.append(f"apiVersion {document.get('apiVersion')!r} is not {API_VERSION}")
    if document.get("kind") != "AnalysisTemplate":
        found.append(f"kind {document.get('kind')!r} is not AnalysisTemplate")
    metadata = document.get("metadata")
    if isinstance(metadata, Mapping):
        found += _metadata_problems(metadata, dns_label=False)
    else:
        found.append("metadata is missing")
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        return found
    metrics = [m for m in spec.get("metrics") or [] if isinstance(m, Mapping)]
    if not metrics:
        found.append("spec.metrics: no metrics specified")
    names = [metric.get("name") for metric in metrics]
    found += [f"spec.metrics: duplicate name {name!r}" for name in sorted(
        {n for n in names if names.count(n) > 1}, key=str)]
    for i, metric in enumerate(metrics):
        found += _metric_problems(metric, f"spec.metrics.{i}")
    declared = {arg.get("name") for arg in spec.get("args") or [] if isinstance(arg, Mapping)}
    used = {name for text in _strings(metrics) for name in ARGUMENT_USE.findall(text)}
    found += [f"{{{{args.{name}}}}} is used but spec.args does not declare it"
              for name in sorted(used - declared)]
    return found
