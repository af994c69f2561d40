"""`compare`: serve each kind from the same spec, check parity, measure in interleaved
windows, and write the comparison record under .serve-pipeline/runs/<id>/."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline.compare import adapters
from pipeline.compare.exception_probe import probe_model_exception
from pipeline.compare.measure import (
    Contender,
    Measured,
    best_merged_rps,
    capacity_search,
    measure,
)
from pipeline.compare.plan import interleaved, load_points
from pipeline.compare.summary import (
    capacity_figures,
    compute_units,
    failure_path,
    server_figures,
    verdict_and_plan,
)
from pipeline.compare.translate import Translated, settings, translate
from pipeline.errors import PipelineError, ServerError, UsageError
from pipeline.measure.targets import spec_target
from pipeline.record import runs_dir
from pipeline.release.manifest import iso, utc_now
from pipeline.runner import new_run_id
from pipeline.spec.models import LoadedSpec, Spec
from pipeline.spec.strings import STRING
from pipeline.stage_result import Status

RECORD_FILE = "comparison.json"


@dataclass(frozen=True)
class Options:
    rounds: int = 3
    window_s: float | None = None         # default: stages.saturation.probe_duration
    max_concurrency: int | None = None    # default: stages.saturation.max_concurrency
    instances: Mapping[str, int] | None = None   # per kind, in place of server.instances
    exception_probe: bool = True          # start each kind once more with a raising model
    tuned: bool = False                   # run `tune` for each kind first
    capacity: bool = True                 # then each server's open-loop capacity search

    def check(self) -> None:
        if not 2 <= self.rounds <= 8:
            raise UsageError(f"--rounds: {self.rounds}: expected 2..8 (the spread needs two, "
                             "and the exact test enumerates every split)")
        if self.window_s is not None and self.window_s <= 0:
            raise UsageError(f"--window: {self.window_s}: expected seconds > 0")
        if self.max_concurrency is not None and not 1 <= self.max_concurrency <= 1024:
            raise UsageError(f"--max-concurrency: {self.max_concurrency}: expected 1..1024")


def payload_encoding(spec: Spec) -> str:
    """How each server's requests are encoded: the load is the same, the bodies are not."""
    if any(tensor.dtype == STRING for tensor in spec.model.inputs):
        return ("payload encoding: each server's own body (Triton: KServe v2 binary tensors, "
                "strings length-prefixed; TorchServe: JSON, as .npy cannot carry text)")
    return ("payload encoding: each server's own binary body (Triton: KServe v2 binary "
            "tensors; TorchServe: .npy/.npz)")


def run_compare(loaded: LoadedSpec, kinds: tuple[str, str], options: Options,
                env: Mapping[str, str],
                announce: Callable[[str], None]) -> tuple[dict[str, Any], Path]:
    """The comparison record and the run folder it was written to."""
    options.check()
    translated = translate(loaded, kinds, options.instances)
    adapters.preflight([t.loaded for t in translated], env)
    started, clock = utc_now(), time.monotonic()
    run_id = new_run_id()
    run_dir = runs_dir(loaded.workspace) / run_id
    run_dir.mkdir(parents=True)
    spec = loaded.spec
    window_s = options.window_s or spec.stages.saturation.probe_duration.seconds
    points = load_points(options.max_concurrency or spec.stages.saturation.max_concurrency)
    servers: dict[str, dict[str, Any]] = {}
    disqualified: dict[str, str] = {}
    tunings: dict[str, dict[str, Any]] = {}
    if options.tuned:
        translated, tunings = _tune_each(translated, run_dir, env, announce)
    with ExitStack() as resources:
        contenders: dict[str, Contender] = {}
        for item in translated:
            contender = _prepare(item, run_dir, env, resources, servers, announce)
            if contender is None:
                disqualified[item.kind] = servers[item.kind]["message"]
            else:
                contenders[item.kind] = contender
        plan = interleaved(tuple(contenders), points, options.rounds)
        measured = measure(contenders, plan, window_s, announce)
        capacities = _capacities(contenders, measured, options, announce)
        announce("stopping the servers")
    if options.exception_probe:
        for item in translated:
            if servers[item.kind].get("failed_at") != "start":
                announce(f"{item.kind}: the model_exception probe (a stand-in that raises)")
                servers[item.kind].setdefault("failure_path", {})["model_exception"] = \
                    probe_model_exception(item.loaded, run_dir / item.kind / "exception", env)
    for kind, why in measured.died.items():
        servers[kind].update(status="failed", failed_at="measure", message=why)
        disqualified[kind] = why
    _, per_unit = compute_units(spec)
    for kind in contenders:
        servers[kind].update(server_figures(spec, kind, measured, options.rounds, per_unit))
        servers[kind].update(capacities.get(kind, {}))
    for kind, tuning in tunings.items():
        servers[kind]["tuned"] = tuning
    record = _record(loaded, run_id, kinds, servers, measured, disqualified, options,
                     window_s, points)
    record.update(started_at=iso(started), finished_at=iso(utc_now()),
                  duration_s=time.monotonic() - clock)
    (run_dir / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record, run_dir


def _capacities(contenders: Mapping[str, Contender], measured: Measured, options: Options,
                announce: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each server's open-loop capacity at the SLO, one server after the other (never two
    under load at once), searched as promote's saturation stage does; after the windows,
    so that the interleaved plan is unchanged."""
    found: dict[str, dict[str, Any]] = {}
    for kind, contender in contenders.items():
        spec = contender.loaded.spec
        if not options.capacity or not spec.stages.saturation.capacity.enabled:
            why = "--no-capacity" if not options.capacity else \
                "stages.saturation.capacity.enabled is false"
            found[kind] = capacity_figures(None, f"not measured ({why})")
            continue
        if kind in measured.died:
            continue
        knee = best_merged_rps(measured, kind, spec.slo.p99.ms, spec.slo.error_rate.fraction)
        if knee is None:
            found[kind] = capacity_figures(None, "not measured: no load point met the SLO")
            continue
        announce(f"{kind}: open-loop capacity search under {knee:,.0f}/s")
        try:
            search = capacity_search(contender, knee)
        except ServerError as exc:
            measured.died[kind] = f"during the capacity search: {exc}"
            continue
        found[kind] = capacity_figures(search, "")
    return found


def _tune_each(translated: list[Translated], run_dir: Path, env: Mapping[str, str],
               announce: Callable[[str], None],
               ) -> tuple[list[Translated], dict[str, dict[str, Any]]]:
    """Each kind at the config `tune` recommends for it (one kind after the other, as the
    measurement: never two servers under load at once)."""
    tuned, tunings = [], {}
    for item in translated:
        announce(f"{item.kind}: tune (its own search; --tuned)")
        loaded, tunings[item.kind] = adapters.tuned(item.loaded, run_dir / item.kind / "tune",
                                                    env, announce)
        tuned.append(Translated(item.kind, loaded))
    return tuned, tunings


def _prepare(item: Translated, run_dir: Path, env: Mapping[str, str], resources: ExitStack,
             servers: dict[str, dict[str, Any]],
             announce: Callable[[str], None]) -> Contender | None:
    """Build, start and parity-check one kind; None (and why, in `servers`) on failure."""
    kind = item.kind
    folder = run_dir / kind
    folder.mkdir(exist_ok=True)   # tune may have written there first (--tuned)
    entry: dict[str, Any] = {"status": "measured", "log": f"{kind}/server.log"}
    servers[kind] = entry
    announce(f"{kind}: build, start, wait until ready")
    try:
        served = adapters.serve(item.loaded, folder, env, resources)
    except PipelineError as exc:
        entry.update(status="failed", failed_at="start", message=str(exc))
        return None
    artifact = served.artifact
    entry.update(cold_start_s=served.cold_start_s,
                 artifact={"kind": artifact.kind, "sha256": artifact.digest,
                           "bytes": artifact.archive.stat().st_size,
                           "config_name": artifact.config_name},
                 config=artifact.config_text)
    announce(f"{kind}: ready after {served.cold_start_s:.1f}s; parity and failure probes")
    result = adapters.parity(item.loaded, served, folder, env)
    entry.update(parity={"status": result.status.value, "message": result.message},
                 failure_path=failure_path(result.details))
    if result.status is not Status.PASSED:
        entry.update(status="failed", failed_at="parity", message=result.message)
        return None
    entry["message"] = result.message
    return Contender(kind, item.loaded, served.server, spec_target(item.loaded, served.server))


def _record(loaded: LoadedSpec, run_id: str, kinds: tuple[str, str],
            servers: dict[str, dict[str, Any]], measured: Measured,
            disqualified: Mapping[str, str], options: Options, window_s: float,
            points: list[int]) -> dict[str, Any]:
    spec = loaded.spec
    figures = {kind: servers[kind] for kind in kinds
               if "throughput_at_slo_rounds" in servers[kind]}
    outcome = verdict_and_plan(spec, figures, measured, disqualified)
    return {
        "compare_id": run_id, "command": "compare", "tool_version": __version__,
        "name": spec.name, "spec_file": str(loaded.path), "spec_digest": loaded.digest,
        "servers_compared": list(kinds),
        "slo": {"p99_ms": spec.slo.p99.ms, "error_rate": spec.slo.error_rate.fraction},
        "winner": outcome["winner"], "margin": outcome["margin"],
        "verdict": outcome["verdict"],
        "plan": {"load_points": points, "rounds": options.rounds, "window_s": window_s,
                 "warmup_s": spec.stages.latency.warmup.seconds,
                 "interleaved": outcome["interleaved"],
                 "window_order": outcome["window_order"],
                 "one_server_loaded_at_a_time": True},
        "client": {"load": "closed loop, one asyncio client in this process",
                   "protocol": "http",
                   "differs": payload_encoding(spec)},
        "translation": [asdict(setting) for setting in settings(spec, options.instances)],
        "servers": servers,
        "windows": [window.to_json() for window in measured.windows],
    }
