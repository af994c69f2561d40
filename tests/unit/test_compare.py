"""compare's pure parts: the interleaved plan, the translation, the verdict on the spread,
and the renderings of a comparison record (tests/unit/data/comparison.json, written by a
real `compare -f serve.yaml.example`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pipeline.compare.exception_probe import raising_spec
from pipeline.compare.plan import interleaved, is_interleaved, load_points
from pipeline.compare.throughput_winner import decide, permutation_p
from pipeline.compare.translate import parse_kinds, settings, translate
from pipeline.errors import UsageError
from pipeline.report.sidebyside.html import render_sidebyside_html
from pipeline.report.sidebyside.markdown import render_sidebyside_markdown
from pipeline.report.sidebyside.terminal import render_sidebyside_terminal
from pipeline.servers.specs import load_spec
from tests.support.htmldom import parse_html

DATA = Path(__file__).resolve().parent / "data"
HOSTILE = "<script>alert(1)</script>"


def comparison() -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / "comparison.json").read_text())
    return body


def test_load_points_double_up_to_the_cap() -> None:
    assert load_points(64) == [1, 2, 4, 8, 16, 32, 64]
    assert load_points(12) == [1, 2, 4, 8, 12]
    assert load_points(1) == [1]


def test_the_plan_alternates_servers_and_who_goes_first() -> None:
    plan = interleaved(("a", "b"), [1, 4], 3)
    assert [(w.kind, w.concurrency, w.round) for w in plan] == [
        ("a", 1, 0), ("b", 1, 0), ("a", 4, 0), ("b", 4, 0),
        ("b", 1, 1), ("a", 1, 1), ("b", 4, 1), ("a", 4, 1),
        ("a", 1, 2), ("b", 1, 2), ("a", 4, 2), ("b", 4, 2)]
    assert [w.index for w in plan] == list(range(12))
    assert is_interleaved([w.kind for w in plan])
    assert not is_interleaved(["a", "a", "b", "b"])


def test_a_clean_separation_is_called_with_its_exact_confidence() -> None:
    verdict = decide({"triton": [110, 120, 115], "torchserve": [90, 95, 100]}, "core", {})
    assert verdict.winner == "triton"
    assert verdict.basis == "beyond_spread"
    assert verdict.margin == pytest.approx(115 / 95 - 1)
    # 2 of the 20 ways to split six values 3/3 are as extreme: p = 0.1.
    assert verdict.confidence == pytest.approx(0.9)
    assert "triton" in verdict.line and "21%" in verdict.line


def test_overlapping_rounds_call_no_winner_even_with_a_higher_median() -> None:
    verdict = decide({"triton": [100, 130, 118], "torchserve": [105, 112, 101]}, "core", {})
    assert verdict.winner is None
    assert verdict.basis == "within_spread"
    assert verdict.margin is not None and verdict.margin > 0
    assert "no difference beyond the spread" in verdict.line


def test_the_verdict_flips_with_the_figures() -> None:
    verdict = decide({"triton": [50, 55, 52], "torchserve": [90, 95, 100]}, "core", {})
    assert verdict.winner == "torchserve"


def test_a_server_that_failed_parity_cannot_win() -> None:
    verdict = decide({"triton": [10, 10, 10]}, "core", {"torchserve": "parity failed"})
    assert verdict.winner == "triton"
    assert verdict.basis == "only_one_qualified" and verdict.margin is None
    assert "torchserve: parity failed" in verdict.line


def test_no_load_meeting_the_slo_is_no_qualification() -> None:
    verdict = decide({"triton": [0, 0, 0], "torchserve": [5, 6, 7]}, "core", {})
    assert verdict.winner == "torchserve" and verdict.basis == "only_one_qualified"
    none = decide({"triton": [0, 0], "torchserve": [0, 0]}, "core", {})
    assert none.winner is None and none.basis == "none_qualified"


def test_permutation_p_of_identical_groups_is_one() -> None:
    assert permutation_p([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0
    assert permutation_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)


def test_servers_must_be_two_known_kinds() -> None:
    assert parse_kinds("torchserve, triton") == ("torchserve", "triton")
    for bad in ("triton", "triton,triton", "triton,tensorrt"):
        with pytest.raises(UsageError, match="--servers"):
            parse_kinds(bad)


def test_translation_shows_each_servers_units(project: Path) -> None:
    loaded = load_spec(project / "serve.yaml")
    shown = {s.key: s.per_kind for s in settings(loaded.spec)}
    assert shown["server.batching.max_queue_delay"] == {
        "triton": "max_queue_delay_microseconds: 2000",
        "torchserve": "maxBatchDelay: 2 (milliseconds)"}
    per_kind = translate(loaded, ("triton", "torchserve"))
    assert [t.loaded.spec.server.kind for t in per_kind] == ["triton", "torchserve"]
    assert per_kind[1].loaded.spec.model == loaded.spec.model
    assert per_kind[1].loaded.spec.slo == loaded.spec.slo


def test_a_triton_only_backend_is_refused_naming_the_key(project: Path) -> None:
    loaded = load_spec(project / "serve.yaml")
    server = loaded.spec.server.model_copy(update={"backend": "onnxruntime"})
    only_triton = replace(loaded, spec=loaded.spec.model_copy(update={"server": server}))
    with pytest.raises(UsageError, match=r"server\.backend: 'onnxruntime' is a Triton-only"):
        translate(only_triton, ("triton", "torchserve"))


def test_the_raising_stand_in_loads_on_zeros_and_raises_on_real_input(project: Path) -> None:
    import importlib.util

    import torch

    loaded = load_spec(project / "serve.yaml")
    stand_in = raising_spec(loaded, project / "probe")
    assert stand_in.spec.model.format == "eager"
    assert stand_in.spec.model.inputs == loaded.spec.model.inputs
    assert stand_in.resolve(str(stand_in.spec.model.source.path)).is_file()
    spec = importlib.util.spec_from_file_location("raising", project / "probe" / "raising.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build()
    (zeros,) = model(torch.zeros(3, 16))
    assert zeros.shape == (3, 4) and zeros.dtype == torch.float32
    with pytest.raises(RuntimeError, match="raised on purpose"):
        model(torch.ones(1, 16))


def test_renderings_show_both_servers_and_the_verdict() -> None:
    record = comparison()
    console = Console(width=200, record=True)
    console.print(render_sidebyside_terminal(record))
    text = console.export_text()
    markdown = render_sidebyside_markdown(record)
    for shown in (text, markdown):
        assert "triton" in shown and "torchserve" in shown
        assert record["verdict"]["line"] in shown.replace("\n", " ") or \
            record["verdict"]["line"][:40] in shown
        assert "maxBatchDelay: 2 (milliseconds)" in shown
    dom = parse_html(render_sidebyside_html(record))
    for element_id in ("verdict", "side-by-side", "latency-chart", "throughput-chart",
                       "failure-path", "translation", "windows"):
        assert dom.by_id(element_id) is not None, element_id


def test_html_escapes_what_the_record_holds() -> None:
    record = comparison()
    record["name"] = HOSTILE
    record["servers"]["triton"]["config"] = HOSTILE
    html = render_sidebyside_html(record)
    assert HOSTILE not in html
    assert "&lt;script&gt;" in html


def test_each_server_states_its_capacity_as_promote_does_and_the_knee_as_a_diagnostic() -> None:
    from pipeline.compare.summary import capacity_figures, knee_bound
    from pipeline.statistics.capacity import CapacitySearch, StepOutcome

    def step(rate: float, verdict: str, hold: bool) -> StepOutcome:
        return StepOutcome(rate, 1.0, 10.0, 0.0, 1000, 0.0, 0.0, 0.1,
                           "pass" if verdict == "pass" else "fail", verdict, hold=hold)

    search = CapacitySearch(2000.0, 1500.0, [step(1200, "pass", True), step(1320, "fail", False)],
                            stop_reason="bracketed")
    found = capacity_figures(search, "")
    assert found["capacity"] == {"rps": 1200.0, "low_rps": 1200.0 / 1.1, "high_rps": 1650.0,
                                 "bound": "exact", "capped_by": "a failing rate at 1,320/s",
                                 "failed_rps": 1320.0}
    assert [s["rate_rps"] for s in found["capacity_search"]["steps"]] == [1200.0, 1320.0]
    assert capacity_figures(None, "not measured (--no-capacity)") == {
        "capacity": None, "capacity_note": "not measured (--no-capacity)"}
    unconfirmed = capacity_figures(CapacitySearch(2000.0, 1500.0, [step(1500, "pass", False)],
                                                  stop_reason="budget"), "")
    assert unconfirmed["capacity"] is None and "no rate confirmed" in unconfirmed["capacity_note"]
    curve = [{"concurrency": 1}, {"concurrency": 4}]
    assert knee_bound(curve[1], curve) == {
        "knee_lower_bound": True, "knee_capped_by": "the concurrency cap (4, --max-concurrency)"}
    assert knee_bound(curve[0], curve)["knee_lower_bound"] is False

    record = comparison()
    record["servers"]["triton"].update(found, knee_lower_bound=True,
                                       knee_capped_by="the concurrency cap (64)")
    record["servers"]["torchserve"].update(capacity=None, capacity_note="not measured (x)")
    markdown = render_sidebyside_markdown(record)
    assert "capacity 1,200/s (exact: 1,091–1,650/s at 90%)" in markdown
    assert "not measured (x)" in markdown and "(lower bound: the concurrency cap (64))" in markdown


def test_the_headline_is_a_merged_point_that_was_run_and_its_rounds_the_spread(
        project: Path) -> None:
    """Rounds whose best windows sit at different load points: the median of those bests
    (205/s) lies above every point of the merged curve; the headline must not."""
    from pipeline.compare.measure import Measured, WindowResult
    from pipeline.compare.summary import server_figures, verdict_and_plan
    from pipeline.measure.load_result import LoadResult

    spec = load_spec(project / "serve.yaml").spec
    rates = {4: [100.0, 210.0, 205.0], 8: [200.0, 120.0, 125.0]}
    measured = Measured()
    for concurrency, per_round in rates.items():
        merged = LoadResult(0.0)
        for round_, rate in enumerate(per_round):
            measured.windows.append(WindowResult(len(measured.windows), round_, "triton",
                                                 concurrency, 0.0, rate, 1.0, 1.0, 1.0, 0.0,
                                                 int(rate), True))
            window = LoadResult(1.0)
            for _ in range(int(rate)):
                window.record(1000, 0.5)
            merged.merge(window)
        measured.merged.setdefault("triton", {})[concurrency] = merged
    figures = server_figures(spec, "triton", measured, 3, 1)
    curve_top = max(point["throughput_rps"] for point in figures["curve"])
    assert figures["throughput_at_slo"] == pytest.approx(515 / 3) == curve_top
    assert figures["knee_concurrency"] == 4
    assert figures["throughput_at_slo_rounds"] == rates[4]
    assert figures["spread"] == {"low": 100.0, "high": 210.0}
    other = dict(figures, throughput_at_slo=100.0, throughput_at_slo_rounds=[95.0, 101.0, 98.0])
    outcome = verdict_and_plan(spec, {"triton": figures, "torchserve": other}, measured, {})
    # The rounds overlap (triton's 100 below torchserve's 101): no winner, whatever the
    # headlines; the line states the headlines per core.
    cores = outcome["verdict"]["units"]
    assert outcome["winner"] is None
    assert f"triton {515 / 3 / cores:.1f} " in outcome["verdict"]["line"]


def test_the_margin_is_the_headlines_and_the_call_the_rounds() -> None:
    verdict = decide({"triton": [110, 120, 115], "torchserve": [90, 95, 100]}, "core", {},
                     {"triton": 112.0, "torchserve": 100.0})
    assert verdict.winner == "triton" and verdict.margin == pytest.approx(0.12)
    assert "112.0 vs 100.0/s" in verdict.line
