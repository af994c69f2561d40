"""parity: served outputs against the source model run in-process, then the failure path.

Reference and server see the same batches: the first samples one at a time, then every
sample in batches of `max_batch_size`, at the smallest, the middle and the largest of
`model.sizes` when an input has a variable dimension. An item's answer alone must be its
answer in a batch (`parity.batch_invariant`): dynamic batching mixes clients' requests.
Both sides' outputs are held to the spec's names, per-item shapes (`parity.output_contract`)
and dtypes (`parity.output_dtype`) and must be finite unless the spec allows otherwise
(`parity.finite_outputs`); the same batches sent again must give the same outputs (within
the tolerance). A reference that raises fails the stage in one line naming the sample
batch. Failure probes send what a broken client would send; each must get a 4xx and the
server must stay ready.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.measure.memory import process_tree_memory
from pipeline.model.batch_invariance import BatchInvariance
from pipeline.model.contract import ContractCheck
from pipeline.model.nonfinite import FiniteCheck
from pipeline.model.reference import ReferenceFailed, expected_outputs
from pipeline.model.runtime import LoadedModel
from pipeline.model.tensors import NUMPY_DTYPES, Array, Batch, samples_at
from pipeline.outcomes.parity import ParityOutcome
from pipeline.servers import http, server_kind
from pipeline.servers.base import ModelServer, send
from pipeline.spec.models import DECLARED_HUGE_BYTES, OVERSIZED_BODY_BYTES, ProbeName, Spec
from pipeline.spec.strings import dtype_name, is_string
from pipeline.stage_result import Gate, StageResult

NAME = "parity"
LIMIT_PROBES = frozenset({"oversized_body", "declared_huge_shape"})
MEMORY_GUARD_MB = 2048.0
USES_SERVER = True
SINGLE_ITEMS = 8
REQUEST_TIMEOUT_S = 30.0


@dataclass
class Comparison:
    """What parity compared: elements, mismatches, the largest errors, and what went wrong."""

    contract: ContractCheck           # served and reference outputs against the spec
    finite: FiniteCheck               # their NaN and Inf
    batching: BatchInvariance         # an item alone against the same item in a batch
    elements: int = 0                 # output elements compared
    mismatched: int = 0               # of those, outside atol + rtol * |reference|
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    requests: int = 0                 # requests sent (batched and single items)
    problems: list[str] | None = None
    served_dtypes: dict[str, set[str]] = field(default_factory=dict)
    model_dtypes: dict[str, set[str]] = field(default_factory=dict)
    repeated_elements: int = 0
    repeat_differing: int = 0
    repeat_max_abs: float = 0.0

    def add(self, served: np.ndarray[Any, Any], reference: np.ndarray[Any, Any], atol: float,
            rtol: float, label: str) -> None:
        if served.shape != reference.shape:
            self.note(f"{label}: served shape {list(served.shape)} != reference "
                      f"{list(reference.shape)}")
            self.mismatched += reference.size
            self.elements += reference.size
            return
        if is_string(reference) or is_string(served):
            # Text is compared exactly; atol and rtol are for numbers.
            self.elements += reference.size
            self.mismatched += _differing_text(served, reference)
            return
        got = served.astype(np.float64)
        want = reference.astype(np.float64)
        # NaN where the reference has NaN is the same answer; whether either may hold NaN
        # at all is parity.finite_outputs' question.
        self.elements += want.size
        self.mismatched += int(np.count_nonzero(
            ~np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)))
        with np.errstate(invalid="ignore", over="ignore"):
            error = np.abs(got - want)
            finite = np.isfinite(error)
            if np.any(finite):
                self.max_abs_error = max(self.max_abs_error, float(error[finite].max()))
                scale = np.maximum(np.abs(want[finite]), np.finfo(np.float64).tiny)
                self.max_rel_error = max(self.max_rel_error,
                                         float((error[finite] / scale).max()))

    def add_repeat(self, again: np.ndarray[Any, Any], first: np.ndarray[Any, Any], atol: float,
                   rtol: float, label: str) -> None:
        """The same request answered twice: every element within atol + rtol·|first|."""
        self.repeated_elements += first.size
        if again.shape != first.shape or again.dtype != first.dtype:
            self.note(f"{label}: sent again, {again.dtype}{list(again.shape)} instead of "
                      f"{first.dtype}{list(first.shape)}")
            self.repeat_differing += first.size
            return
        if is_string(first):
            differing_text = _differing_text(again, first)
            self.repeat_differing += differing_text
            if differing_text:
                self.note(f"{label}: sent again, {differing_text} of {first.size} strings "
                          "changed")
            return
        got, want = again.astype(np.float64), first.astype(np.float64)
        close = np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
        differing = int(np.count_nonzero(~close))
        if differing:
            self.repeat_differing += differing
            with np.errstate(invalid="ignore"):
                self.repeat_max_abs = max(self.repeat_max_abs,
                                          float(np.nanmax(np.abs(got - want)[~close])))
            self.note(f"{label}: sent again, {differing} of {first.size} values changed")

    def note(self, problem: str) -> None:
        self.problems = [*(self.problems or []), problem]


def _differing_text(got: Array, want: Array) -> int:
    """Elements of two arrays of one shape that are not the same string."""
    pairs = zip(got.reshape(-1).tolist(), want.reshape(-1).tolist(), strict=True)
    return sum(1 for a, b in pairs if not (is_string(got) and is_string(want)) or a != b)


Served = list[tuple[str, Batch, dict[str, Array]]]


@dataclass(frozen=True)
class SampleBatch:
    label: str        # "sample batch 3 of 9 (sample 3)": how messages name it
    batch: Batch
    size: int | None  # the variable dimensions' size (None: fixed, or the data file's)
    samples: tuple[int, ...]   # row j is sample samples[j] of that size's samples

    @property
    def items(self) -> int:
        return len(self.samples)


def sample_batches(spec: Spec, sized: list[tuple[int | None, Batch]]) -> list[SampleBatch]:
    """At each size: the first SINGLE_ITEMS samples one at a time, then every sample in
    batches of max_batch_size, the first always full (wrapping round the samples when
    there are fewer): the largest batch is served, and no sample goes unsent."""
    mbs = spec.server.batching.max_batch_size
    planned: list[tuple[int | None, Batch, tuple[int, ...]]] = []
    for size, samples in sized:
        available = next(iter(samples.values())).shape[0]
        alone = available if mbs == 1 else min(SINGLE_ITEMS, available)
        planned += [(size, samples, (start,)) for start in range(alone)]
        starts = range(0, max(available, 1), mbs) if mbs > 1 else range(0)
        planned += [(size, samples, tuple((start + row) % available for row in range(
            mbs if start == 0 else min(mbs, available - start)))) for start in starts]
    batches = []
    for index, (size, samples, rows) in enumerate(planned):
        which = f"sample {rows[0] + 1}" if len(rows) == 1 else \
            f"{len(rows)} items from sample {rows[0] + 1}"
        if size is not None:
            which = f"size {size}, {which}"
        batches.append(SampleBatch(f"sample batch {index + 1} of {len(planned)} ({which})",
                                   {name: array[list(rows)] for name, array in samples.items()},
                                   size, rows))
    return batches


def compare_outputs(ctx: RunContext, server: ModelServer, reference: LoadedModel,
                    samples: list[tuple[int | None, Batch]]) -> Comparison:
    """Each sample batch through the reference and the server, compared element-wise and
    held to the spec's outputs; ReferenceFailed when the reference raises on one."""
    spec = ctx.loaded.spec
    outputs = spec.model.outputs
    parity = spec.stages.parity
    comparison = Comparison(ContractCheck(outputs), FiniteCheck(outputs),
                            BatchInvariance(parity.atol, parity.rtol))
    answered: Served = []
    for sample in sample_batches(spec, samples):
        computed = expected_outputs(reference, [sample.batch[t.name] for t in spec.model.inputs],
                                    sample.label)
        expected = dict(zip((t.name for t in outputs), computed, strict=True))
        check_answer(comparison, "reference", expected, sample)
        reply = send(server.infer_request(sample.batch), REQUEST_TIMEOUT_S)
        comparison.requests += 1
        for name, want in expected.items():
            comparison.model_dtypes.setdefault(name, set()).add(dtype_name(want))
        if reply.status != 200:
            comparison.note(f"{sample.label}: HTTP {reply.status}: {reply.text()[:200]}")
            comparison.mismatched += sum(a.size for a in expected.values())
            comparison.elements += sum(a.size for a in expected.values())
            continue
        served = server.decode_outputs(reply)
        check_answer(comparison, "served", served, sample)
        if sample.items == 1:
            comparison.batching.single(sample.size, sample.samples[0], served)
        else:
            comparison.batching.batch(sample.size, list(sample.samples), served, sample.label)
        answered.append((sample.label, sample.batch, served))
        compare_answer(spec, comparison, sample.label, served, expected)
    check_repeats(spec, server, answered, comparison)
    return comparison


def check_answer(comparison: Comparison, side: str, arrays: dict[str, Array],
                 sample: SampleBatch) -> None:
    comparison.contract.check(side, arrays, sample.items, sample.label)
    comparison.finite.check(side, arrays)


def compare_answer(spec: Spec, comparison: Comparison, label: str, served: dict[str, Array],
                   expected: dict[str, Array]) -> None:
    parity = spec.stages.parity
    for name, want in expected.items():
        if name not in served:
            comparison.note(f"{label}: output '{name}' missing")
            comparison.mismatched += want.size
            comparison.elements += want.size
            continue
        got = served[name]
        comparison.served_dtypes.setdefault(name, set()).add(dtype_name(got))
        comparison.add(got, want, parity.atol, parity.rtol, f"{label} {name}")


def check_repeats(spec: Spec, server: ModelServer, answered: Served,
                  comparison: Comparison) -> None:
    """Send every answered batch again: a deterministic model gives the same outputs."""
    parity = spec.stages.parity
    for label, batch, first in answered:
        reply = send(server.infer_request(batch), REQUEST_TIMEOUT_S)
        comparison.requests += 1
        again = server.decode_outputs(reply) if reply.status == 200 else {}
        if reply.status != 200:
            comparison.note(f"{label}: sent again, HTTP {reply.status}: {reply.text()[:200]}")
        for name, array in first.items():
            if name not in again:
                comparison.repeated_elements += array.size
                comparison.repeat_differing += array.size
                continue
            comparison.add_repeat(again[name], array, parity.atol, parity.rtol,
                                  f"{label} {name}")


def dtype_gate(spec: Spec, comparison: Comparison) -> Gate:
    """Every output as the spec types it, both as served and as the model computes it."""
    wrong = []
    for tensor in spec.model.outputs:
        served = comparison.served_dtypes.get(tensor.name, set())
        model = comparison.model_dtypes.get(tensor.name, set())
        if not served:
            wrong.append(f"{tensor.name} never served")
        elif served | model != {tensor.dtype}:
            wrong.append(f"{tensor.name} served {'/'.join(sorted(served))} "
                         f"(model {'/'.join(sorted(model))})")
    expected = ", ".join(f"{t.name} {t.dtype}" for t in spec.model.outputs)
    return Gate("parity.output_dtype", "; ".join(wrong) or expected, expected, not wrong)


def determinism_gate(comparison: Comparison) -> Gate:
    """Elements that changed when the same requests were sent again (0 allowed)."""
    if comparison.repeated_elements == 0:
        return Gate("parity.deterministic", "not evaluated: no answered request to repeat",
                    "0 values changed", False)
    return Gate.at_most("parity.deterministic", float(comparison.repeat_differing), 0.0)


PROBE_TEXT: dict[str, str] = {
    "oversized_body": f"a {OVERSIZED_BODY_BYTES // 2**20} MiB body, far over the largest "
                      "valid request",
    "declared_huge_shape": f"16 values under a shape that needs "
                           f"{DECLARED_HUGE_BYTES // 2**20} MiB",
    "wrong_shape": "an item one element too long in the last dimension",
    "wrong_dtype": "the first input declared with another datatype",
    "missing_input": "the first input left out",
    "batch_over_max": "a batch of max_batch_size + 1",
    "unknown_model": "a model name the server does not have",
}


class MemoryWatch:
    """Peak RSS growth of the server's process tree while a probe is in flight; the server
    is stopped if it grows past MEMORY_GUARD_MB, before it can endanger the machine."""

    def __init__(self, server: ModelServer) -> None:
        self.server = server
        self.baseline = self._rss_mb()
        self.peak_growth = 0.0
        self.tripped = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss_mb(self) -> float | None:
        tree = self.server.process_tree()
        return process_tree_memory(tree)[m.SERVER_RSS_MB] if tree else None

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            now = self._rss_mb()
            if now is None or self.baseline is None:
                continue
            self.peak_growth = max(self.peak_growth, now - self.baseline)
            if self.peak_growth > MEMORY_GUARD_MB:
                self.tripped = True
                self.server.stop()
                return

    def __enter__(self) -> MemoryWatch:
        if self.baseline is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()


def largest_request_bytes(spec: Spec) -> int:
    largest = spec.model.size_values()[-1]
    item = sum(int(np.prod(t.item_shape(largest))) * np.dtype(NUMPY_DTYPES[t.dtype]).itemsize
               for t in spec.model.inputs)
    return item * spec.server.batching.max_batch_size


def limit_verdict(probe: str, status: int | None, watch: MemoryWatch,
                  spec: Spec) -> dict[str, Any]:
    """What a limit probe says about the server, and the size limit to set."""
    growth = round(watch.peak_growth, 1) if watch.baseline is not None else None
    verdict: dict[str, Any] = {"rss_growth_mb": growth if growth is not None
                               else "not measured"}
    if status is not None and not 400 <= status < 500:
        verdict["status_note"] = f"answered {status}, not a 4xx: a client cannot tell its own " \
            "mistake from a server fault"
    if probe == "declared_huge_shape":
        declared_mb = DECLARED_HUGE_BYTES / 2**20
        if growth is None:
            verdict["validated_before_allocating"] = "not measured"
        else:
            verdict["validated_before_allocating"] = growth < 0.1 * declared_mb
            if growth >= 0.1 * declared_mb:
                verdict["finding"] = (f"the server grew by {growth:.0f} MiB for a request "
                                      f"declaring {declared_mb:.0f} MiB with 64 bytes of data: "
                                      "it allocates what a request declares before checking it")
    else:
        largest = largest_request_bytes(spec)
        binary_limit = max(2**20, 2 * largest + 64 * 2**10)
        verdict["limit_enforced"] = status == 413
        verdict["recommended_limit_bytes"] = {"binary": binary_limit, "json": 12 * binary_limit}
        if status != 413:
            where = server_kind(spec.server.kind).request_size_guard
            verdict["finding"] = (f"a {OVERSIZED_BODY_BYTES // 2**20} MiB body was read in "
                                  f"full before it was refused; set a request-size limit of "
                                  f"about {binary_limit // 2**10} KiB (binary) at {where}")
    return verdict


SIZED_PROBES = frozenset({"wrong_shape", "wrong_dtype", "missing_input", "batch_over_max"})


@dataclass(frozen=True)
class ProbeAnswer:
    size: int | None
    status: int | None
    said: str
    ready: bool
    watch: MemoryWatch

    @property
    def clean(self) -> bool:
        return self.status is not None and 400 <= self.status < 500 and self.ready


def send_probe(server: ModelServer, probe: ProbeName, size: int | None) -> ProbeAnswer:
    """The probe at `size` (its variable dimensions), watched for memory."""
    watch = MemoryWatch(server)
    try:
        with watch:
            reply = send(server.probe_request(probe, size), REQUEST_TIMEOUT_S)
        status: int | None = reply.status
        try:
            said = str(json.loads(reply.body).get("error", ""))[:160]
        except (ValueError, AttributeError):
            said = reply.text()[:160]
    except http.Unreachable as exc:
        status, said = None, str(exc)
    if watch.tripped:
        raise ServerError(f"probe {probe}: the server grew by more than {MEMORY_GUARD_MB} "
                          "MiB and was stopped before it could endanger the machine")
    return ProbeAnswer(size, status, said, server.alive() and server.is_ready(), watch)


def run_probes(ctx: RunContext, server: ModelServer) -> tuple[list[Gate], list[dict[str, Any]]]:
    """Each probe once; those that send a valid request but for one thing, at each size
    parity sends when an input has a variable dimension."""
    spec = ctx.loaded.spec
    gates = []
    details = []
    for probe in spec.stages.failure.probes:
        sizes = spec.model.size_values() if probe in SIZED_PROBES else [None]
        answers = [send_probe(server, probe, size) for size in sizes]
        answer = next((a for a in answers if not a.clean), answers[-1])
        status, ready = answer.status, all(a.ready for a in answers)
        shown = "/".join(str(a.status) if a.status is not None else "no answer"
                         for a in answers)
        if len(answers) > 1:
            shown += " at sizes " + "/".join(str(a.size) for a in answers)
        observed = f"{shown}, " + ("server ready" if ready else "server NOT ready")
        if probe in LIMIT_PROBES:
            # The server's limits are reported (with the size limit to set), not gated: the
            # gate is that the server survives them.
            gates.append(Gate(f"failure.{probe}", observed, "an answer, server stays ready",
                              status is not None and ready))
        else:
            gates.append(Gate(f"failure.{probe}", observed, "4xx, server stays ready",
                              all(a.clean for a in answers)))
        entry: dict[str, Any] = {"probe": probe, "sent": PROBE_TEXT[probe], "status": status,
                                 "error": answer.said, "ready_after": ready}
        if len(answers) > 1:
            entry["by_size"] = [{"size": a.size, "status": a.status, "error": a.said,
                                 "ready_after": a.ready} for a in answers]
        if probe in LIMIT_PROBES:
            entry.update(limit_verdict(probe, status, answer.watch, spec))
        details.append(entry)
    return gates, details


def reference_failure(failed: ReferenceFailed, generated: bool) -> StageResult:
    """Parity without expected outputs: failed, in one line naming the batch and the error,
    and, when parity made its inputs up, that a data file sends real ones."""
    observed = (f"raised {failed.error} on {failed.label}" if failed.raised
                else f"{failed.error} ({failed.label})")
    gate = Gate("parity.reference", observed, "outputs for every sample batch", False)
    result = StageResult.judged(NAME, [gate], "", details={"reference_error": failed.error,
                                                           "sample_batch": failed.label})
    result.message = str(failed)
    if generated:
        result.message += (" (parity generated these inputs, within each input's declared "
                           "dtype and shape; stages.parity.data sends real ones)")
    return result


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    server = ctx.require_server()
    samples = samples_at(spec.model, spec.stages.parity, ctx.loaded.workspace)
    reference = ctx.reference_model()
    try:
        comparison = compare_outputs(ctx, server, reference, samples)
    except ReferenceFailed as failed:
        return reference_failure(failed, spec.stages.parity.data is None)
    ctx.require_server()        # a model process that died meanwhile is the server failing
    parity = spec.stages.parity
    gates = [Gate.at_most("parity.mismatched_elements", float(comparison.mismatched), 0.0),
             comparison.contract.gate(), comparison.finite.gate(),
             dtype_gate(spec, comparison), determinism_gate(comparison),
             comparison.batching.gate()]
    probe_details: list[dict[str, Any]] = []
    if spec.stages.failure.enabled:
        probe_gates, probe_details = run_probes(ctx, server)
        gates += probe_gates
    measured = ParityOutcome(
        parity_requests=float(comparison.requests),
        parity_elements=float(comparison.elements),
        parity_mismatched=float(comparison.mismatched),
        parity_max_abs_error=comparison.max_abs_error,
        parity_max_rel_error=comparison.max_rel_error,
        parity_repeated_elements=float(comparison.repeated_elements),
        parity_repeat_differing=float(comparison.repeat_differing),
        parity_repeat_max_abs=comparison.repeat_max_abs,
        parity_nonfinite=float(sum(c.total for c in comparison.finite.counts.values())),
        parity_contract_breaches=float(len(comparison.contract.breaches)),
        failure_probes=float(len(probe_details)),
    )
    sent = sum(next(iter(batch.values())).shape[0] for _, batch in samples)
    message = (f"{comparison.elements} output values of {sent} samples, in "
               f"{comparison.requests} requests, within atol {parity.atol:g} + rtol "
               f"{parity.rtol:g} (max |Δ| {comparison.max_abs_error:.2g}), shaped as "
               "declared, the same when sent again and alone as in a batch; "
               f"{len(probe_details)} bad requests failed cleanly")
    findings = [p["finding"] for p in probe_details if p.get("finding")]
    if findings:
        message += "; " + "; ".join(findings)
    details = {"probes": probe_details, "problems": comparison.problems or [],
               "nonfinite": comparison.finite.details()}
    result = StageResult.judged(NAME, gates, message, measured.to_json(), details)
    if comparison.problems and result.status.value == "failed":
        result.message = comparison.problems[0] + "; " + result.message
    return result
