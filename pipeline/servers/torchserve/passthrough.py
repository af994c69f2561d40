"""`server.torchserve.config` and `.model`: config.properties keys and model-level settings
the spec does not model, checked against TorchServe's own names (those of the
torchserve 0.12 frontend's ConfigManager and Model, and its launcher's vmargs and
plugins_path) and refused where the spec or serve-pipeline sets the key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from difflib import get_close_matches

from pipeline.servers.torchserve.settings import KIND_NAME, PropertyValue, torchserve_settings
from pipeline.spec.models import Spec
from pipeline.spec.positions import KeyPath, PositionedDocument, format_path
from pipeline.spec.problems import Problem

SECTION: KeyPath = ("server", KIND_NAME)

PROPERTIES = (
    "allowed_urls", "async_logging", "blacklist_env_vars", "certificate_file",
    "cors_allowed_headers", "cors_allowed_methods", "cors_allowed_origin", "cpp_log_config",
    "cpu_launcher_args", "cpu_launcher_enable", "debug", "decode_input_request",
    "default_response_timeout", "default_service_handler", "default_startup_timeout",
    "default_workers_per_model", "disable_system_metrics", "disable_token_authorization",
    "enable_envvars_config", "enable_grpc_ssl", "enable_metrics_api", "enable_model_api",
    "grpc_inference_address", "grpc_inference_max_connection_age_grace_ms",
    "grpc_inference_max_connection_age_ms", "grpc_inference_port", "grpc_management_address",
    "grpc_management_max_connection_age_grace_ms", "grpc_management_max_connection_age_ms",
    "grpc_management_port", "inference_address", "initial_distribution_port",
    "initial_worker_port", "install_py_dep_per_model", "io_ratio", "ipex_enable",
    "ipex_gpu_enable", "job_queue_size", "keystore", "keystore_pass", "keystore_type",
    "limit_max_image_pixels", "load_models", "management_address", "max_request_size",
    "max_response_size", "metric_time_interval", "metrics_address", "metrics_config",
    "metrics_mode", "model_metrics_auto_detect", "model_server_home", "model_snapshot",
    "model_store", "models", "netty_client_threads", "number_of_gpu",
    "number_of_netty_threads", "plugins_path", "prefer_direct_buffer", "private_key_file",
    "service_envelope", "system_metrics_cmd", "token_expiration_min",
    "ts_header_key_sequence_end", "ts_header_key_sequence_id", "ts_header_key_sequence_start",
    "ts_open_inference_protocol", "unregister_model_timeout", "use_env_allowed_urls",
    "use_native_io", "vmargs", "workflow_store",
)
"""Every config.properties key TorchServe reads."""

_PORTS = (("server", "ports"), " (each named port, the management API on loopback)")
_ARCHIVE = (None, " (the release's own .mar; its settings go in server.torchserve.model)")
_METRICS = (None, " (it reads TorchServe's Prometheus metrics)")
SET_BY_SPEC: Mapping[str, tuple[KeyPath | None, str]] = {
    **{key: _PORTS for key in (
        "inference_address", "management_address", "metrics_address",
        "grpc_inference_address", "grpc_inference_port", "grpc_management_address",
        "grpc_management_port")},
    "model_store": _ARCHIVE, "load_models": _ARCHIVE, "models": _ARCHIVE,
    "default_workers_per_model": (("server", "instances"), ""),
    "enable_model_api": (("server", "model_api"), ""),
    "metrics_mode": _METRICS, "model_metrics_auto_detect": _METRICS,
    "disable_token_authorization": (None, " (token authorization stays on)"),
    "install_py_dep_per_model": (None, " (the model's dependencies are the release's)"),
}
"""The keys render_properties writes: the spec key each comes from (None: serve-pipeline
itself sets it), and why."""

MODEL_SETTINGS: Mapping[str, type] = {
    "responseTimeout": int, "startupTimeout": int, "parallelLevel": int, "runtimeType": str}
"""The model-level settings this block may hold, with the type TorchServe reads."""

MODEL_SET_BY_SPEC: Mapping[str, KeyPath] = {
    "minWorkers": ("server", "instances"), "maxWorkers": ("server", "instances"),
    "batchSize": ("server", "batching", "max_batch_size"),
    "maxBatchDelay": ("server", "batching", "max_queue_delay"),
    "marName": ("name",), "defaultVersion": ("name",),
}


def property_lines(spec: Spec) -> list[str]:
    """`key=value` for each pass-through key, as Java's Properties reads it back."""
    return [f"{key}={_property_text(value)}"
            for key, value in torchserve_settings(spec).config.items()]


def model_settings(spec: Spec) -> dict[str, PropertyValue]:
    return dict(torchserve_settings(spec).model)


def _property_text(value: PropertyValue) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text.replace("\\", "\\\\")


def settings_problems(spec: Spec, document: PositionedDocument) -> Iterator[Problem]:
    settings = torchserve_settings(spec)
    for key, value in settings.config.items():
        path = (*SECTION, "config", key)
        if key not in PROPERTIES:
            yield (path, _unknown(key, PROPERTIES, "config.properties key"))
        elif key in SET_BY_SPEC:
            yield (path, _set_by(key, *SET_BY_SPEC[key], document))
        elif isinstance(value, str) and ("\n" in value or "\r" in value):
            yield (path, "a config.properties value is one line")
    for key, value in settings.model.items():
        path = (*SECTION, "model", key)
        if key in MODEL_SET_BY_SPEC:
            yield (path, _set_by(key, MODEL_SET_BY_SPEC[key], "", document))
        elif key not in MODEL_SETTINGS:
            yield (path, _unknown(key, (*MODEL_SETTINGS, *MODEL_SET_BY_SPEC),
                                  "model-level setting"))
        elif MODEL_SETTINGS[key] is int and (isinstance(value, bool) or not isinstance(
                value, int) or value < 1):
            yield (path, f"{key} is a whole number of at least 1, got {value!r}")
        elif not isinstance(value, MODEL_SETTINGS[key]):
            yield (path, f"{key} is a string, got {value!r}")


def _unknown(key: str, known: tuple[str, ...], what: str) -> str:
    close = get_close_matches(key, known, n=1, cutoff=0.6)
    return f"unknown {what} '{key}'" + (f"; did you mean '{close[0]}'?" if close else
                                         f" (TorchServe's: {', '.join(known)})")


def _set_by(key: str, owner: KeyPath | None, why: str, document: PositionedDocument) -> str:
    if owner is None:
        return f"{key} is set by serve-pipeline{why}; leave it out"
    return (f"{key} is set by {format_path(owner)} ({document.written_at(owner)}){why}; "
            "set it there")
