"""String (BYTES) tensors: declared in the spec, generated, read from data files, carried
in KServe v2's JSON and binary forms and TorchServe's JSON, and compared exactly."""

from __future__ import annotations

import importlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import SpecError
from pipeline.model.runtime import LoadedModel
from pipeline.model.tensors import Array, config_dtype, generate_inputs, load_samples
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.json_tensors import from_json_tensor, json_tensor
from pipeline.servers.triton import kserve
from pipeline.spec.models import TensorSpec
from pipeline.spec.request_data import RequestDataError, read_request_data
from pipeline.spec.strings import WORDS, string_array
from stages.parity import Comparison

TEXT = TensorSpec(name="text", dtype="string", shape=[1])
TOKENS = TensorSpec(name="tokens", dtype="int64", shape=[-1])
EXAMPLE = Path("examples") / "bag_of_words" / "serve.yaml"
PHRASES = ["late parcel", "", "Größe ✓"]
# The handler runs inside TorchServe's worker, untyped and outside the package's checks.
torchserve_handler = importlib.import_module("pipeline.servers.assets.torchserve_handler")


def texts(*values: str) -> Array:
    return string_array(values, (len(values), 1))


def test_the_binary_request_prefixes_each_string_with_its_little_endian_length() -> None:
    request = kserve.encode_infer("http://h", "m", {"text": texts(*PHRASES)},
                                  [TensorSpec(name="text", dtype="string", shape=[1])],
                                  ["label"])
    header_length = int(request.headers["Inference-Header-Content-Length"])
    header = json.loads(request.body[:header_length])
    assert header["inputs"][0]["datatype"] == "BYTES"
    assert header["inputs"][0]["shape"] == [3, 1]
    expected = b"".join(struct.pack("<I", len(p.encode())) + p.encode() for p in PHRASES)
    assert request.body[header_length:] == expected
    assert kserve.raw_contents(texts(*PHRASES)) == expected


def test_binary_and_json_answers_decode_to_the_same_bytes() -> None:
    payload = kserve.raw_contents(texts(*PHRASES))
    header = json.dumps({"outputs": [{"name": "label", "datatype": "BYTES", "shape": [3, 1],
                                      "parameters": {"binary_data_size": len(payload)}}]})
    binary = kserve.decode_outputs(header.encode() + payload,
                                   {"inference-header-content-length": str(len(header))})
    plain = kserve.decode_outputs(json.dumps({"outputs": [
        {"name": "label", "datatype": "BYTES", "shape": [3, 1], "data": PHRASES}]}).encode(),
        {})
    for decoded in (binary, plain):
        assert decoded["label"].dtype == object
        assert decoded["label"].tolist() == [[p.encode()] for p in PHRASES]


def test_a_json_probe_sends_strings_for_a_string_input() -> None:
    model = load_spec(Path(__file__).resolve().parents[2] / EXAMPLE).spec.model
    probe = json.loads(kserve.probe_request("http://h", "m", model, 8, "wrong_shape").body)
    text = next(i for i in probe["inputs"] if i["name"] == "text")
    assert text["datatype"] == "BYTES" and text["data"] == ["a"]


def test_torchserve_json_tensors_round_trip_text_and_numbers() -> None:
    for array in (texts(*PHRASES), np.arange(6, dtype=np.int64).reshape(3, 2)):
        sent = json.loads(json.dumps(json_tensor(array)))
        back = from_json_tensor(sent)
        assert back.dtype == array.dtype and back.tolist() == array.tolist()
    assert json_tensor(texts("a b"))["dtype"] == "string"
    assert json_tensor(texts("a b"))["data"] == ["a b"]


def test_the_torchserve_handler_reads_and_answers_strings() -> None:
    spec = {"inputs": [{"name": "text", "dtype": "string", "shape": [1]}],
            "outputs": [{"name": "label", "dtype": "string", "shape": [1]}],
            "dtypes": {"text": "string"}, "max_items": 8}
    body = json.dumps({"inputs": {"text": json_tensor(texts(*PHRASES))}}).encode()
    fmt, arrays = torchserve_handler._decode({"body": body}, spec)
    assert fmt == "json" and not isinstance(arrays, str)
    assert torchserve_handler._check(arrays, spec) is None
    assert arrays["text"].tolist() == [[p.encode()] for p in PHRASES]
    answer, content_type = torchserve_handler._encode("npz", [arrays["text"]], spec)
    assert content_type == "application/json"       # text has no .npy form
    assert json.loads(answer)["outputs"]["label"]["data"] == PHRASES
    numbers = json.dumps({"inputs": {"text": {"shape": [1, 1], "dtype": "string",
                                              "data": [5]}}}).encode()
    _, problem = torchserve_handler._decode({"body": numbers}, spec)
    assert isinstance(problem, str) and "list of JSON strings" in problem


def test_generated_text_has_one_word_per_size_from_a_fixed_list() -> None:
    batch = generate_inputs([TOKENS, TEXT], 5, seed=3, size=6)
    assert batch["tokens"].shape == (5, 6)
    assert batch["text"].shape == (5, 1) and batch["text"].dtype == object
    for [text] in batch["text"].tolist():
        words = text.decode().split()
        assert len(words) == 6 and set(words) <= set(WORDS)
    again = generate_inputs([TOKENS, TEXT], 5, seed=3, size=6)
    assert again["text"].tolist() == batch["text"].tolist()
    assert config_dtype("string") == "TYPE_STRING"


def test_the_runtime_gives_a_model_text_as_a_list_of_str_and_serves_its_strings() -> None:
    model = LoadedModel("torchscript",
                        Path(__file__).resolve().parents[2] / EXAMPLE.parent / "model.pt",
                        ["scores", "label"])
    batch = generate_inputs([TOKENS, TEXT], 4, seed=1, size=5)
    scores, labels = model([batch["tokens"], batch["text"]])
    assert scores.shape == (4, 3) and scores.dtype == np.float32
    assert labels.shape == (4, 1) and labels.dtype == object
    assert {label for [label] in labels.tolist()} <= {b"billing", b"delivery", b"other"}


def test_parity_compares_strings_exactly() -> None:
    comparison = Comparison.__new__(Comparison)
    comparison.elements = comparison.mismatched = 0
    comparison.max_abs_error = comparison.max_rel_error = 0.0
    comparison.problems = None
    comparison.add(texts("a", "b"), texts("a", "b"), 1.0, 1.0, "same")
    comparison.add(texts("a", "B"), texts("a", "b"), 1.0, 1.0, "one differs")
    assert (comparison.elements, comparison.mismatched) == (4, 1)


@pytest.mark.parametrize(("dtype", "shape", "says"), [
    ("string", "[2]", "a string tensor holds one string per item: shape [1], got [2]"),
    ("bfloat16", "[1]", "bfloat16 is not supported: numpy has no bfloat16"),
    ("bytes", "[1]", "write dtype: string for text"),
])
def test_string_shapes_and_unsupported_dtypes_are_spec_errors(
        project: Path, dtype: str, shape: str, says: str) -> None:
    path = project / EXAMPLE
    old = "{name: text, dtype: string, shape: [1]}"
    path.write_text(path.read_text().replace(old, f"{{name: text, dtype: {dtype}, "
                                                  f"shape: {shape}}}"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    [issue] = [str(issue) for issue in caught.value.issues]
    line = next(number for number, text in enumerate(path.read_text().splitlines(), start=1)
                if "name: text" in text)
    assert issue.startswith(f"{EXAMPLE}:{line}:"), issue
    assert says in issue


def test_a_string_input_in_json_lines_is_a_json_string(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in [
        {"tokens": [1, 2], "text": "Late parcel"},
        {"tokens": [3, 4], "text": ["refund please"]}]) + "\n")
    read = read_request_data(path, "requests.jsonl", [TOKENS, TEXT], 2)
    [request] = read.requests
    assert request["text"].tolist() == [[b"Late parcel"], [b"refund please"]]
    assert read.sizes == ["2"]


@pytest.mark.parametrize(("text", "says"), [
    (5, "requests.jsonl:2: 'text' holds 5, not a string"),
    ([None], "requests.jsonl:2: 'text' holds null, not a string"),
    (["a", "b"], "requests.jsonl:2: 'text' has items of shape [2], outside the declared [1]"),
])
def test_a_wrong_string_value_is_named_by_file_and_line(tmp_path: Path, text: object,
                                                       says: str) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"tokens": [1], "text": "fine"}) + "\n"
                    + json.dumps({"tokens": [1], "text": text}) + "\n")
    with pytest.raises(RequestDataError) as caught:
        read_request_data(path, "requests.jsonl", [TOKENS, TEXT], 1)
    assert says in str(caught.value)


def test_an_npz_holds_text_as_str_or_bytes_arrays(tmp_path: Path) -> None:
    path = tmp_path / "requests.npz"
    np.savez(path, tokens=np.ones((2, 3), dtype=np.int64), text=np.array([["a b"], ["c"]]))
    read = read_request_data(path, "requests.npz", [TOKENS, TEXT], 1)
    assert [r["text"].tolist() for r in read.requests] == [[[b"a b"]], [[b"c"]]]
    np.savez(path, tokens=np.ones((2, 3), dtype=np.int64), text=np.ones((2, 1)))
    with pytest.raises(RequestDataError) as caught:
        read_request_data(path, "requests.npz", [TOKENS, TEXT], 1)
    assert "requests.npz:text: float64, the spec says string" in str(caught.value)


def test_validate_names_the_spec_key_and_the_line_of_a_bad_string(project: Path) -> None:
    spec = project / EXAMPLE
    data = spec.parent / "requests.jsonl"
    lines = data.read_text().splitlines()
    lines[4] = json.dumps({"tokens": [1, 2, 3, 4], "text": 42})
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(issue) for issue in caught.value.issues]
    assert "stages.latency.data: requests.jsonl:5: 'text' holds 42, not a string" in issue


@pytest.mark.parametrize(("old", "new", "says"), [
    ("format: torchscript", "format: onnx", "model.format: string tensors are served for "
                                            "torchscript and eager models"),
    ("backend: python", "backend: pytorch", "server.backend: string tensors are served by "
                                            "the python backend"),
])
def test_text_is_refused_where_no_torch_model_takes_it(project: Path, old: str, new: str,
                                                       says: str) -> None:
    path = project / EXAMPLE
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert any(says in str(issue) for issue in caught.value.issues), caught.value.issues


def test_parity_data_holds_text_as_an_array_of_str(project: Path) -> None:
    spec = project / EXAMPLE
    np.savez(spec.parent / "samples.npz", tokens=np.ones((3, 4), dtype=np.int64),
             text=np.array([["Late parcel"], ["refund"], [""]]))
    spec.write_text(spec.read_text().replace("parity: {atol: 1e-4,",
                                             "parity: {data: samples.npz, atol: 1e-4,"))
    loaded = load_spec(spec)
    batch = load_samples(loaded.spec.model, loaded.spec.stages.parity, loaded.workspace)
    assert batch["text"].dtype == object
    assert batch["text"].tolist() == [[b"Late parcel"], [b"refund"], [b""]]
