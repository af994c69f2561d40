"""Variable dimensions (-1) and model.sizes: the spec, the rendered configs, the sizes
parity and the probes send, the load's mix of sizes and its per-size figures."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import io
import json
import pickle
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from pipeline.errors import SpecError
from pipeline.measure.distributed.merge import SentResult, merge_parallel
from pipeline.measure.load_result import LoadResult
from pipeline.measure.loadgen import closed_loop
from pipeline.measure.targets import ORDER_LENGTH, drawn_order
from pipeline.model.contract import ContractCheck
from pipeline.model.tensors import fits, generate_inputs, misshapen, samples_at
from pipeline.record import RunRecord
from pipeline.report.html import render_html
from pipeline.report.markdown import render_markdown
from pipeline.report.terminal import measurements_table
from pipeline.request_types import HttpRequest, RequestMix
from pipeline.servers.base import ASSETS
from pipeline.servers.specs import json_schema, load_spec
from pipeline.servers.torchserve.properties import serve_spec
from pipeline.servers.triton.config import check_model_config, config_text, render_model_config
from pipeline.servers.triton.kserve import probe_request
from pipeline.spec.positions import parse_document
from tests.support.htmldom import parse_html
from tests.support.http_server import serving
from tests.unit.test_wire import _Handler

EXAMPLE = Path("examples") / "variable_length" / "serve.yaml"
DATA = Path(__file__).resolve().parent / "data"


def variant(project: Path, old: str, new: str) -> Path:
    path = project / EXAMPLE
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return path


def issues_of(path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return [str(issue) for issue in caught.value.issues]


def line_of(path: Path, needle: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1)
                if needle in line)


def test_the_example_declares_a_variable_input_and_its_sizes(project: Path) -> None:
    spec = load_spec(project / EXAMPLE).spec
    [sequence] = spec.model.inputs
    assert sequence.shape == [-1, 8] and sequence.variable
    assert sequence.item_shape(16) == (16, 8)
    assert spec.model.sizes is not None and spec.model.size_values() == [4, 16, 96]
    assert spec.model.sizes.probabilities() == [0.6, 0.3, 0.1]


def test_a_variable_input_without_sizes_is_an_error_naming_the_input(project: Path) -> None:
    path = variant(project, "  sizes:", "  unsized:")
    [*issues] = issues_of(path)
    assert any("model.unsized" in issue for issue in issues)
    path = variant(project, "  unsized:                                # the lengths parity (and "
                   "load, without data) sends\n    values: [4, 16, 96]\n    weights: [6, 3, 1]\n",
                   "")
    [issue] = issues_of(path)
    assert f"serve.yaml:{line_of(path, 'model:')}" in issue
    assert "sequence have a variable dimension (-1): model.sizes declares" in issue


def test_sizes_without_a_variable_input_and_bad_dims_are_errors(project: Path) -> None:
    path = variant(project, "shape: [-1, 8]", "shape: [4, 8]")
    [issue] = issues_of(path)
    assert "no input has one" in issue
    path = variant(project, "shape: [4, 8]", "shape: [0, 8]")
    [issue] = issues_of(path)
    assert f"serve.yaml:{line_of(path, 'shape: [0, 8]')}" in issue
    assert "positive integer or -1 (variable), got [0, 8]" in issue


@pytest.mark.parametrize(("values", "weights", "says"), [
    ("[16, 4]", "[1, 1]", "increasing and distinct"),
    ("[0, 4]", "[1, 1]", "at least 1"),
    ("[4, 16]", "[1, 1, 1]", "3 weights for 2 sizes"),
    ("[4, 16]", "[1, 0]", "weights must be positive"),
])
def test_bad_sizes_name_their_line(project: Path, values: str, weights: str, says: str) -> None:
    path = variant(project, "    values: [4, 16, 96]\n    weights: [6, 3, 1]",
                   f"    values: {values}\n    weights: {weights}")
    [issue] = issues_of(path)
    assert says in issue and "model.sizes" in issue
    assert f"serve.yaml:{line_of(path, 'sizes:')}" in issue or \
        f"serve.yaml:{line_of(path, 'values:')}" in issue or \
        f"serve.yaml:{line_of(path, 'weights:')}" in issue


def test_tensorrt_cannot_take_a_variable_dimension(project: Path) -> None:
    path = variant(project, "  runtime: process\n  backend: python",
                   "  runtime: docker\n  backend: tensorrt\n  image: {base: nvcr.io/nvidia/"
                   "tritonserver:24.08-py3}")
    path.write_text(path.read_text().replace("source: model.pt", "source: model.onnx")
                    .replace("format: torchscript", "format: onnx"))
    (path.parent / "model.onnx").write_bytes(b"onnx")
    issues = issues_of(path)
    [issue] = [issue for issue in issues if "tensorrt" in issue]
    assert f"serve.yaml:{line_of(path, 'shape: [-1, 8]')}" in issue
    assert "model.inputs[0].shape" in issue and "one fixed shape" in issue


def test_load_over_grpc_with_sizes_is_refused(project: Path) -> None:
    path = variant(project, "concurrency: 4,", "protocol: grpc, concurrency: 4,")
    [issue] = issues_of(path)
    assert "stages.latency.protocol" in issue and "sent over http" in issue


def test_triton_renders_minus_one_dims_and_checks_them(project: Path) -> None:
    spec = load_spec(project / EXAMPLE).spec
    config = render_model_config(spec, "model.pt", None)
    assert list(config.input[0].dims) == [-1, 8] and list(config.output[0].dims) == [4]
    text = config_text(config)
    assert "dims: -1" in text
    assert check_model_config(text, spec) == []


def test_the_torchserve_handler_is_told_the_shapes_and_the_sizes(project: Path) -> None:
    spec = load_spec(project / EXAMPLE).spec
    packed = serve_spec(spec, None)
    assert packed["inputs"][0]["shape"] == [-1, 8] and packed["sizes"] == [4, 16, 96]
    fixed = load_spec(project / "serve.yaml").spec
    assert "sizes" not in serve_spec(fixed, None)


def test_parity_sends_the_smallest_the_middle_and_the_largest_size(project: Path) -> None:
    loaded = load_spec(project / EXAMPLE)
    sized = samples_at(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
    assert [(size, batch["sequence"].shape) for size, batch in sized] == [
        (4, (16, 4, 8)), (16, (16, 16, 8)), (96, (16, 96, 8))]
    fixed = load_spec(project / "serve.yaml")
    [(size, batch)] = samples_at(fixed.spec.model, fixed.spec.stages.parity, fixed.workspace)
    assert size is None and batch["features"].shape[1:] == (16,)


def test_probes_keep_the_size_and_misshape_a_fixed_dimension(project: Path) -> None:
    model = load_spec(project / EXAMPLE).spec.model
    [sequence] = model.inputs
    assert misshapen(sequence, 16) == [16, 9]
    only_variable = sequence.model_copy(update={"shape": [-1]})
    assert misshapen(only_variable, 16) == [16, 1]

    def shapes(probe: str, size: int | None) -> list[int]:
        request = probe_request("http://h", "m", model, 8, probe, size)  # type: ignore[arg-type]
        shape: list[int] = json.loads(request.body)["inputs"][0]["shape"]
        return shape

    assert shapes("wrong_shape", 96) == [1, 96, 9]
    assert shapes("batch_over_max", 4) == [9, 4, 8]
    assert shapes("wrong_dtype", None) == [1, 4, 8]       # the smallest size by default


def test_a_minus_one_takes_any_size_in_the_output_contract() -> None:
    from pipeline.spec.models import OutputSpec, TensorSpec

    tokens = TensorSpec(name="tokens", dtype="int64", shape=[-1, 2])
    assert fits(tokens, (7, 2)) and not fits(tokens, (7, 3)) and not fits(tokens, (7,))
    output = OutputSpec(name="logits", dtype="float32", shape=[-1])
    check = ContractCheck([output])
    check.check("served", {"logits": np.zeros((2, 5), np.float32)}, 2, "batch 1")
    check.check("served", {"logits": np.zeros((2, 5, 1), np.float32)}, 2, "batch 2")
    assert check.describe() == ["logits: declared float32 [n, -1], served float32 [n, 5, 1] "
                                "(batch 2)"]


def test_generated_inputs_fill_every_minus_one_with_the_size() -> None:
    from pipeline.spec.models import TensorSpec

    inputs = [TensorSpec(name="ids", dtype="int64", shape=[-1]),
              TensorSpec(name="mask", dtype="bool", shape=[-1]),
              TensorSpec(name="extra", dtype="float32", shape=[3])]
    batch = generate_inputs(inputs, 2, 0, 5)
    assert {name: array.shape for name, array in batch.items()} == {
        "ids": (2, 5), "mask": (2, 5), "extra": (2, 3)}
    with pytest.raises(ValueError, match="needs a size"):
        generate_inputs(inputs, 2, 0)


def test_the_drawn_order_keeps_the_weights_and_is_the_same_every_time() -> None:
    order = drawn_order([0.6, 0.3, 0.1], seed=0)
    assert order == drawn_order([0.6, 0.3, 0.1], seed=0) and len(order) == ORDER_LENGTH
    shares = {index: count / ORDER_LENGTH for index, count in Counter(order).items()}
    assert shares[0] == pytest.approx(0.6, abs=0.03)
    assert shares[1] == pytest.approx(0.3, abs=0.03)
    assert shares[2] == pytest.approx(0.1, abs=0.02)


def test_a_mix_indexes_its_requests() -> None:
    request = HttpRequest("POST", "http://127.0.0.1:1/x", b"", {})
    with pytest.raises(ValueError, match="indexes"):
        RequestMix((request,), ("4",), (0, 1))
    with pytest.raises(ValueError, match="one size bucket each"):
        RequestMix((request,), ("4", "8"), (0,))


@pytest.mark.parametrize("concurrency", [1, 8])   # blocking threads; the event loop
def test_the_closed_loop_sends_a_mix_and_counts_each_size(concurrency: int) -> None:
    with serving(_Handler) as url:
        fine = HttpRequest("POST", url + "/ok", b"fine", {})
        refused = HttpRequest("POST", url + "/ok", b"bad", {})
        mix = RequestMix((fine, refused), ("4", "96"), (0, 0, 0, 1))
        result = asyncio.run(closed_loop(mix, concurrency, 0.5, 5.0))
    by_size = result.size_summary()
    assert list(by_size) == ["4", "96"]
    assert by_size["4"]["requests"] + by_size["96"]["requests"] == result.requests
    assert result.errors["http_400"] == by_size["96"]["requests"]
    assert result.completed == by_size["4"]["requests"]
    assert 0.15 < by_size["96"]["requests"] / result.requests < 0.35


def test_sizes_survive_a_merge_and_the_way_from_a_worker() -> None:
    first, second = LoadResult(1.0), LoadResult(1.0)
    for value in (1000, 2000, 3000):
        first.record(value, 0.1, None, "4")
    second.record(50_000, 0.2, None, "96")
    second.record(4000, 0.2, None, "4")
    travelled = SentResult.of(second).load_result()
    merged = merge_parallel([first, travelled])
    assert {size: row["requests"] for size, row in merged.size_summary().items()} == {
        "4": 4.0, "96": 1.0}
    assert merged.size_summary()["96"]["p99_ms"] == pytest.approx(50.0, rel=0.01)
    windows = LoadResult(0.0)
    windows.merge(first)
    windows.merge(second)
    assert windows.size_summary()["4"]["requests"] == 4.0


def test_the_report_shows_p50_and_p99_per_size_next_to_the_overall() -> None:
    body = json.loads((DATA / "record_triton.json").read_text())
    sized = copy.deepcopy(body)
    latency = next(stage for stage in sized["stages"] if stage["name"] == "latency")
    latency["details"]["sizes"] = {
        "4": {"p50_ms": 1.5, "p99_ms": 3.25, "requests": 600.0},
        "96": {"p50_ms": 7.5, "p99_ms": 12.0, "requests": 100.0}}
    record = RunRecord.from_json(sized)
    markdown = render_markdown(record)
    assert "**Latency by size** (client p50 / p99): size 4: 1.5 ms / 3.25 ms (600 requests); " \
        "size 96: 7.5 ms / 12 ms (100 requests)" in markdown
    text = parse_html(render_html(record)).text()
    assert "client, size 96 (100 requests)" in text
    table = measurements_table(record)
    assert table is not None and table.row_count == 3
    plain = RunRecord.from_json(body)
    assert "Latency by size" not in render_markdown(plain)
    table = measurements_table(plain)
    assert table is not None and table.row_count == 1


def test_the_torchserve_handler_runs_each_shape_as_one_batch() -> None:
    loader = importlib.util.spec_from_file_location("handler", ASSETS / "torchserve_handler.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    handler = module.ServePipelineHandler()
    handler.spec = {"inputs": [{"name": "sequence", "dtype": "float32", "shape": [-1, 2]}],
                    "outputs": [{"name": "scores", "dtype": "float32", "shape": [1]}],
                    "max_items": 8}
    calls: list[tuple[int, ...]] = []

    def model(arrays: list[np.ndarray]) -> list[np.ndarray]:  # type: ignore[type-arg]
        calls.append(arrays[0].shape)
        return [arrays[0].sum(axis=(1, 2))[:, None]]

    handler.model = model
    short, long = np.ones((1, 3, 2), np.float32), np.ones((2, 5, 2), np.float32)
    assert module._check({"sequence": long}, handler.spec) is None
    assert "expected [n, -1, 2]" in module._check({"sequence": np.ones((1, 3, 3), np.float32)},
                                                  handler.spec)
    answered = handler._run_batch([(0, "npz", {"sequence": short}),
                                   (1, "npz", {"sequence": long}),
                                   (2, "npz", {"sequence": short})])
    assert sorted(calls) == [(2, 3, 2), (2, 5, 2)]       # one model call per shape
    assert sorted(index for index, *_ in answered) == [0, 1, 2]
    assert all(status == 200 for *_, status, _ in answered)
    scores = {index: np.load(io.BytesIO(body))["scores"] for index, body, *_ in answered}
    assert scores[1].tolist() == [[10.0], [10.0]] and scores[2].tolist() == [[6.0]]


def test_the_schema_and_the_docs_know_every_new_key(project: Path) -> None:
    schema = json_schema()
    example = parse_document((project / EXAMPLE).read_text(), "example").data
    jsonschema.validate(example, schema)
    defs = schema["$defs"]
    assert {"values", "weights"} <= set(defs["SizesSpec"]["properties"])
    assert "sizes" in defs["ModelSpec"]["properties"]
    for stage in ("LatencyStage", "SaturationStage"):
        assert {"data", "data_order"} <= set(defs[stage]["properties"])
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    spec_page = (repo / "docs" / "spec.md").read_text()
    for key in ("model.sizes", "weights", "stages.latency.data", "data_order",
                "stages.saturation.data", "shape: [-1, 8]"):
        assert key in spec_page, key
    for key in ("sizes:", "data_order", "saturation: {data:", "shape: [-1, 8]"):
        assert key in readme, key


def test_a_mix_goes_on_where_the_last_window_stopped_and_travels_to_a_worker() -> None:
    with serving(_Handler) as url:
        fine = HttpRequest("POST", url + "/ok", b"fine", {})
        mix = RequestMix((fine, fine, fine), ("4", "16", "96"), (0, 1, 2))
        first = asyncio.run(closed_loop(mix, 1, 0.2, 5.0))
        second = asyncio.run(closed_loop(mix, 8, 0.2, 5.0))
    sent = first.requests + second.requests
    assert mix.cursor.take() == sent           # one count over both windows and all threads
    for result in (first, second):
        counts = [row["requests"] for row in result.size_summary().values()]
        assert max(counts) - min(counts) <= 1, counts
    travelled = pickle.loads(pickle.dumps(mix))
    assert travelled == mix and travelled.cursor.take() == sent + 1
