"""The refusal matrix's helpers: the tally, projects with deliberately bad models, verdicts.

Each bad release must be refused by the gate named for it; refused by anything else (another
gate, a crash, a timeout) counts as `wrong_reason`. The suite ends with one line:

    gates: bad_releases=N refused=N wrong_reason=N good_passed=N
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, latest_record
from tests.support.specs import fast_spec

REPO = Path(__file__).resolve().parents[2]
VERDICTS = ("refused", "wrong_reason", "not_refused")

# One module for every bad model: the example's MLP (so the example's state_dict loads) with
# one behaviour spliced into forward. `self.calls` counts executions in this process only, so
# the in-process parity reference (a handful of calls) never reaches the served behaviours
# that start after the first executions.
MODEL_TEMPLATE = '''"""A deliberately bad release for the refusal matrix."""

import time

import torch
from torch import nn


class Bad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                    nn.Linear(64, 4))
        self.calls = 0
        self.hoard: list[bytes] = []
EXTRA_INIT

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        scores = torch.softmax(self.layers(features), dim=-1)
BEHAVIOUR
        return scores


def build() -> nn.Module:
    return Bad()
'''

BEHAVIOURS = {
    # ~3% of executions stall 40 ms: a slow tail under a fast median.
    "slow_tail": "        if self.calls % 32 == 0:\n            time.sleep(0.04)",
    # After warm-up, every execution in the first 250 ms of each second raises.
    "error_burst": ("        if self.calls > 50 and time.monotonic() % 1.0 < 0.25:\n"
                    "            raise RuntimeError('error burst')"),
    "nondeterministic": "        scores = scores + torch.rand(scores.shape) * 0.01",
    # The spec says float32; the model returns float64 (the server would cast silently).
    "float64_output": "        scores = scores.double()",
    # 1 MiB kept per execution; 5 ms per execution caps the leak near 200 MiB/s.
    "leak": ("        self.hoard.append(b'\\x01' * 2**20)\n"
             "        time.sleep(0.005)"),
    # Alternating 1.5 s phases: fast, then 30 ms per execution.
    "phases": ("        if int(time.monotonic() / 1.5) % 2:\n"
               "            time.sleep(0.03)"),
    # The spec declares shape [4]; every answer has 3 values per item. The reference is the
    # same model, so parity alone agrees with it: only the declared contract catches it.
    "wrong_shape": "        scores = scores[..., :3]",
    # NaN everywhere, on both sides: a match for parity, refused as non-finite.
    "nan_output": "        scores = scores * float('nan')",
    # Each item's scores shifted by the batch's mean features: the same item answers
    # differently with other items beside it. Reference and server agree on every batch;
    # only an item held against itself served alone shows it.
    "batch_dependent": ("        scores = torch.softmax(self.layers(features - "
                        "features.mean(0, keepdim=True)), dim=-1)"),
    "padded": "",
}

# A tight p99 for the latency cases; the queue budget (p99 minus the items) stays above the
# example's 2 ms max_queue_delay.
TIGHT_SLO = """slo:
  p99: 15ms
  error_rate: 0.1%
  budget: {execution: 5ms}
"""


class Matrix:
    """Session-wide verdicts of the matrix (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bad: dict[str, str] = {}
        self.good_passed = 0
        self.good_failed = 0

    def bad_release(self, case: str, verdict: str) -> None:
        assert verdict in VERDICTS, verdict
        with self._lock:
            self.bad[case] = verdict

    def good_release(self, passed: bool) -> None:
        with self._lock:
            if passed:
                self.good_passed += 1
            else:
                self.good_failed += 1

    @property
    def ran(self) -> bool:
        return bool(self.bad) or bool(self.good_passed + self.good_failed)

    def line(self) -> str:
        with self._lock:
            verdicts = list(self.bad.values())
            return (f"gates: bad_releases={len(verdicts)} refused={verdicts.count('refused')} "
                    f"wrong_reason={verdicts.count('wrong_reason')} "
                    f"good_passed={self.good_passed}")


MATRIX = pytest.StashKey[Matrix]()


def matrix_of(config: pytest.Config) -> Matrix:
    return config.stash.setdefault(MATRIX, Matrix())


def make_project(root: Path, *, behaviour: str | None = None, slo: str | None = None,
                 saturation: bool = True, latency: str | None = None) -> Path:
    """A copy of the example with the fast stages, one instance, and optionally a bad
    model (eager, the example's weights), another SLO, no saturation or other latency
    settings."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "examples", root / "examples",
                    ignore=shutil.ignore_patterns("__pycache__", ".serve-pipeline"))
    shutil.copytree(REPO / "environments", root / "environments")
    text = fast_spec((REPO / "serve.yaml.example").read_text())
    if behaviour is not None:
        (root / "bad.py").write_text(bad_model_source(behaviour))
        text = replace_once(text, "source: examples/mlp/model.pt",
                            "source: examples/mlp/weights.pt")
        text = replace_once(text, "format: torchscript",
                            "format: eager\n  entrypoint: bad.py:build")
    if slo is not None:
        head, _, rest = text.partition("\nslo:\n")
        _, _, tail = rest.partition("\nstages:\n")
        text = head + "\n" + slo + "\nstages:\n" + tail
    if not saturation:
        text = replace_once(text, "saturation: {max_concurrency", "saturation: {enabled: false, "
                            "max_concurrency")
    if latency is not None:
        head, _, rest = text.partition("  latency: {")
        _, _, tail = rest.partition("}}\n")
        text = head + "  latency: " + latency + "\n" + tail
    (root / "serve.yaml").write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def bad_model_source(behaviour: str, extra_init: str = "") -> str:
    return MODEL_TEMPLATE.replace("EXTRA_INIT", extra_init).replace(
        "BEHAVIOUR", BEHAVIOURS[behaviour])


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} is not in the spec exactly once"
    return text.replace(old, new)


@dataclass(frozen=True)
class GateVerdict:
    verdict: str
    why: str


def gate_verdict(project: Path, args: list[str], gate: str,
                 outcome: str | tuple[str, ...] = "failed", timeout: float = 240,
                 exit_code: int = 1) -> GateVerdict:
    """Run the CLI on a bad release and judge why it was (not) refused, from the record:
    refused when `gate` has the `outcome` (or one of them) and the run exits `exit_code`
    (1 for a gate; 3 where the store could not give what the gate needed)."""
    outcomes = (outcome,) if isinstance(outcome, str) else outcome
    try:
        result = cli(args, project, timeout=timeout)
    except subprocess.TimeoutExpired:
        return GateVerdict("wrong_reason", f"timed out after {timeout:.0f}s")
    try:
        record = latest_record(project)
    except (AssertionError, ValueError):
        return GateVerdict("wrong_reason", f"no run record; exit {result.returncode}: "
                           f"{result.stderr.strip()[-300:]}")
    failed = failed_gates(record)
    found = [g for stage in record["stages"] for g in stage["gates"] if g["name"] == gate]
    seen = "; ".join(f"{gate} observed {g['observed']} vs {g['threshold']}" for g in found)
    why = (f"exit {result.returncode}; failed gates {failed}; {seen or gate + ' not evaluated'}; "
           f"{stage_messages(record)}; {result.stderr.strip()[-300:]}")
    if result.returncode == 0:
        return GateVerdict("not_refused", why)
    if result.returncode == exit_code and any(gate_outcome(g) in outcomes for g in found):
        return GateVerdict("refused", why)
    return GateVerdict("wrong_reason", why)


def gate_outcome(gate: dict[str, Any]) -> str:
    """passed / failed / inconclusive; records from before outcomes existed say only passed."""
    outcome = gate.get("outcome")
    if isinstance(outcome, str):
        return outcome
    return "passed" if gate["passed"] else "failed"


def failed_gates(record: dict[str, Any]) -> list[str]:
    return [f"{g['name']}={gate_outcome(g)}" for stage in record["stages"]
            for g in stage["gates"] if gate_outcome(g) != "passed"]


def stage_messages(record: dict[str, Any]) -> str:
    return "; ".join(f"{s['name']}: {s['message']}" for s in record["stages"]
                     if s["status"] != "passed")


def exit_verdict(result: subprocess.CompletedProcess[str], expected_exit: int) -> GateVerdict:
    """For refusals that are exit codes (store, policy) rather than gates."""
    why = f"exit {result.returncode}: {(result.stderr or result.stdout).strip()[-400:]}"
    if result.returncode == 0:
        return GateVerdict("not_refused", why)
    if result.returncode == expected_exit and "Traceback" not in result.stderr:
        return GateVerdict("refused", why)
    return GateVerdict("wrong_reason", why)
