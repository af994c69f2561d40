"""`judge`: how the paired verdict and the canary's SLO gates become pass, fail or
inconclusive and an exit code, what it prints, and its refusals before anything is measured.
On real servers: tests/integration/test_canary_analysis.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli.app import main
from pipeline.regression import canary
from pipeline.regression.canary import EXIT_CODES, CanaryJudgement, decide
from pipeline.regression.paired import MetricVerdict, PairedVerdict
from pipeline.servers.ports import free_ports
from pipeline.stage_result import Gate, GateOutcome

P99_PASSED = Gate.decided("latency.p99", 12.0, 50.0, "passed", "<=", "ms", (11.0, 13.0), 4000,
                          "")
P99_MISSED = Gate.decided("latency.p99", 70.0, 50.0, "failed", "<=", "ms", (60.0, 80.0), 4000,
                          "")
ERRORS_UNDECIDED = Gate.decided("latency.error_rate", 0.0, 0.001, "inconclusive", "<=", "",
                                (0.0, 0.002), 1500, "")
ERRORS_UNDECIDED_OVER = Gate.decided("latency.error_rate", 0.002, 0.001, "inconclusive", "<=",
                                     "", (0.0, 0.004), 1500, "")


@pytest.mark.parametrize(("regression", "slo", "accept", "outcome"), [
    ("no_regression", [P99_PASSED], False, "pass"),
    ("regression", [P99_PASSED], False, "fail"),
    ("regression", [ERRORS_UNDECIDED], False, "fail"),
    ("no_regression", [P99_MISSED], False, "fail"),
    ("inconclusive", [P99_MISSED], False, "fail"),           # an SLO miss decides alone
    ("inconclusive", [P99_PASSED], False, "inconclusive"),
    ("no_regression", [P99_PASSED, ERRORS_UNDECIDED], False, "inconclusive"),
    # As the latency stage counts an undecided gate the spec accepts: within, it passes;
    # leaning towards a miss, it fails.
    ("no_regression", [P99_PASSED, ERRORS_UNDECIDED], True, "pass"),
    ("no_regression", [P99_PASSED, ERRORS_UNDECIDED_OVER], True, "fail"),
])
def test_the_outcome_of_the_verdict_and_the_slo(regression: str, slo: list[Gate],
                                                accept: bool, outcome: str) -> None:
    decided, reason = decide(regression, slo, accept)
    assert decided == outcome, reason


def test_the_exit_codes_are_those_canary_tools_expect() -> None:
    assert EXIT_CODES == {"pass": 0, "fail": 1, "inconclusive": 2}


def judgement(outcome: str = "fail") -> CanaryJudgement:
    p50 = MetricVerdict("p50_ms", "regression", 2.0, 2.6, 1.3, 1.22, 1.37, 1.2, 16,
                        "the ratio's interval lies above 1.2")
    errors = MetricVerdict("error_rate", "no_regression", 0.0, 0.0, None, 0.0, None, 1.2, 16,
                           "0/3000 vs 0/3100 errors")
    verdict = PairedVerdict("regression", (p50, errors), 16, 1, 0.2, 0.95)
    slo = (P99_PASSED, Gate("latency.throughput", 400.0, 100.0, True, ">=", "rps",
                            GateOutcome.PASSED))
    return CanaryJudgement(outcome, "the canary is worse", verdict, slo,  # type: ignore[arg-type]
                           {"canary": 3000, "stable": 3100})


def test_the_json_has_the_verdict_each_ratio_and_interval_rounds_and_requests() -> None:
    body = json.loads(json.dumps(judgement().to_json()))
    assert body["verdict"] == "fail" and body["regression"] == "regression"
    assert body["rounds"] == 16 and body["requests"] == {"canary": 3000, "stable": 3100}
    assert body["metrics"]["p50_ms"] == {"outcome": "regression", "ratio": 1.3,
                                         "interval": [1.22, 1.37], "limit": 1.2}
    assert body["metrics"]["error_rate"]["interval"] == [0.0, None]
    assert body["slo"]["latency.p99"] == {"outcome": "passed", "observed": 12.0,
                                          "threshold": 50.0}


def closed_url() -> str:
    return f"http://127.0.0.1:{free_ports(1)[0]}"


def judge(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["judge", *args])
    code = exited.value.code
    return 0 if code is None else int(code)


@pytest.mark.parametrize("outcome", ["pass", "fail", "inconclusive"])
def test_the_command_prints_a_summary_then_one_json_line_and_exits_with_the_outcome(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        outcome: str) -> None:
    measured: list[Any] = []

    def judged(loaded: Any, canary_server: Any, stable_server: Any, *_: Any) -> Any:
        measured.append((canary_server, stable_server))
        return judgement(outcome)

    # Stand-ins for the two live servers and their measurement (on real ones: the
    # integration test).
    monkeypatch.setattr(canary, "attached", lambda loaded, role, url: url)
    monkeypatch.setattr(canary, "judge_canary", judged)
    record = project / "judgement.json"
    code = judge(["--canary", "http://canary:8000", "--stable", "http://stable:8000",
                  "--record", str(record)])
    assert code == EXIT_CODES[outcome]                      # type: ignore[index]
    assert measured == [("http://canary:8000", "http://stable:8000")]
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].startswith(f"{outcome.upper()}: ")
    assert any("p50_ms: canary/stable 1.300 [1.220, 1.370] regression" in line
               for line in lines)
    assert json.loads(lines[-1]) == json.loads(record.read_text()) == judgement(
        outcome).to_json()
    assert [p.name for p in project.iterdir() if p.name.startswith(".judgement")] == []


@pytest.mark.parametrize(("args", "code", "message"), [
    ([], 4, "Missing option '--canary'"),
    (["--canary", "http://a:1"], 4, "Missing option '--stable'"),
    (["--canary", "http://a:1", "--stable", "http://b:1", "--unknown"], 4, "No such option"),
    (["--canary", "https://a:1", "--stable", "http://b:1"], 4,
     "error: --canary https://a:1: expected http://HOST[:PORT]"),
    (["--canary", "http://a:port", "--stable", "http://b:1"], 4, "error: --canary http://a:port"),
    (["--canary", "http://a:1", "--stable", "http://b:1", "-f", "missing.yaml"], 4,
     "error: missing.yaml:1:1: file not found"),
    (["--canary", "http://a:1", "--stable", "http://b:1", "--env", "nowhere"], 4, "error: "),
    (["--canary", "http://a:1", "--stable", "http://b:1", "-f", "examples/torchserve/serve.yaml"],
     4, "error: --canary http://a:1: measuring TorchServe needs --management-url"),
    (["--canary", "http://a:1", "--stable", "http://b:1", "--record", "no/such/file.json"], 4,
     "error: --record no/such/file.json: not a file in an existing folder"),
    (["--canary", "http://localhost:8000/", "--stable", "http://127.0.0.1:8000"], 4,
     "error: --canary and --stable are the same endpoint (http://localhost:8000/)"),
])
def test_arguments_and_specs_that_cannot_work_exit_4_in_one_line(
        project: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int,
        message: str) -> None:
    assert judge(args) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    if message.startswith("error: "):
        assert len(err.strip().splitlines()) == 1, err


def test_a_broken_spec_is_one_line_with_every_issue(project: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    spec = project / "serve.yaml"
    spec.write_text(spec.read_text().replace("  p99: 50ms", "  p99: fast").replace(
        "margin", "margn"))
    assert judge(["--canary", closed_url(), "--stable", closed_url()]) == 4
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: serve.yaml:") and "slo.p99" in line


def test_an_endpoint_that_does_not_answer_exits_3_naming_it(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = closed_url()
    assert judge(["--canary", url, "--stable", closed_url()]) == 3
    assert capsys.readouterr().err.strip() == f"error: the canary at {url} does not answer"


def test_the_help_documents_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert judge(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for meaning in ("0 pass", "1 fail", "2 inconclusive", "3 an endpoint does not answer",
                    "4 the spec or the arguments cannot work"):
        assert meaning in text
