"""A model whose latency is a fixed sleep per execution (one item per execution, one
instance), so that its latency and throughput follow that time; the slowed variant sleeps
0.4 ms longer, which with the server's own work per execution (1-2 ms) makes it about
25-40% slower end to end; the switchable one, while its switch file exists, 1.5 ms longer
(well over 40%, also when a busy machine stretches the server's own work). For the
side-by-side regression check and the canary judge on real Triton
(tests/integration/test_side_by_side_regression.py, test_canary_analysis.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.support.bad_models import write_bad_model

DELAYED_MODEL = """import os
import time

import torch


class Delayed(torch.nn.Module):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay_s)
        return torch.softmax(self.linear(x), dim=-1)


class Switchable(Delayed):
    \"\"\"Delayed, or 1.5 ms slower while the file SLOWER_PATH exists (one server, both
    speeds).\"\"\"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.0025 if os.path.exists("SLOWER_PATH") else self.delay_s)
        return torch.softmax(self.linear(x), dim=-1)


class Hangable(Delayed):
    \"\"\"Delayed, or 12 s per execution while the file HANG_PATH exists: longer than the
    request timeout, so its server, alive and healthy, answers none of a window's
    requests.\"\"\"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(12.0 if os.path.exists("HANG_PATH") else self.delay_s)
        return torch.softmax(self.linear(x), dim=-1)


def build() -> torch.nn.Module:
    return Delayed(0.001)


def build_slow() -> torch.nn.Module:
    return Delayed(0.0014)


def build_switchable() -> torch.nn.Module:
    return Switchable(0.001)


def build_hangable() -> torch.nn.Module:
    return Hangable(0.001)


def build_licensed() -> torch.nn.Module:
    if not os.path.exists("LICENCE_PATH"):
        raise RuntimeError("no licence file at LICENCE_PATH")
    return Delayed(0.001)
"""

REGRESSION = "  regression: {gate: true, margin: MARGIN}\n"
# For the A/A runs: the median, throughput and errors (the spec narrows the watched list),
# in 500 ms windows: this model answers a few hundred requests a second, too few in a
# shorter window for a tail percentile steady enough on a busy machine.
SAME = "20%, watch: [p50_ms, throughput_rps, error_rate], window: 500ms, max_rounds: 48"


def delayed_project(project: Path, entrypoint: str = "build", margin: str = "10%") -> Path:
    """The project's serve.yaml (a fast spec) serving the delayed model from `entrypoint`,
    with the regression check on at `margin` (a margin and more settings, as SAME)."""
    _, weights = write_bad_model(project, "wrong_dtype")
    shutil.copyfile(weights, project / "delayed.pt")
    # The server's environment is an allowlist, so a model that needs something the
    # machine may lack reads a file: the live release's licence, the slower switch.
    (project / "delayed.py").write_text(
        DELAYED_MODEL.replace("LICENCE_PATH", str(project / "licence"))
        .replace("SLOWER_PATH", str(slower_switch(project)))
        .replace("HANG_PATH", str(hang_switch(project))))
    spec = project / "serve.yaml"
    text = re.sub(r"(?m)^  source: \S+", "  source: delayed.pt", spec.read_text(), count=1)
    text = text.replace("format: torchscript",
                        f"format: eager\n  entrypoint: delayed.py:{entrypoint}")
    text = text.replace("instances: 2", "instances: 1")
    # Two in flight: one waits behind the other (the queue stays in the SLO's queue_mean).
    # (A p99 bound from the latency stage's few requests is beside the point here: the fast
    # spec's latency verdict accepts an undecided gate within its threshold.)
    assert "verdict: {accept_inconclusive: true}" in text
    text = text.replace("latency: {concurrency: 4", "latency: {concurrency: 2")
    text = re.sub(r"max_batch_size: \d+", "max_batch_size: 1", text)
    text = re.sub(r"preferred_batch_sizes: \[[^\]]*\]", "preferred_batch_sizes: []", text)
    text = re.sub(r"(?m)^  saturation: .*\n(?:   .*\n)*", "  saturation: {enabled: false}\n",
                  text)
    spec.write_text(text.replace("  failure: {}\n", "  failure: {}\n" +
                                 REGRESSION.replace("MARGIN", margin)))
    return project


def slower_switch(project: Path) -> Path:
    """While this file exists, build_switchable's model is the slowed one."""
    return project / "slower"


def use_entrypoint(spec: Path, entrypoint: str) -> None:
    spec.write_text(re.sub(r"delayed\.py:\w+", f"delayed.py:{entrypoint}", spec.read_text()))


def hang_switch(project: Path) -> Path:
    """While this file exists, build_hangable's model takes 12 s an execution."""
    return project / "hang"
