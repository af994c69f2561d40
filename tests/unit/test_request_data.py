"""Data files of real requests (stages.latency.data, stages.saturation.data): read, held to
the declared inputs at validate with file:line or file:array, and sent as a mix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import SpecError
from pipeline.measure.targets import ORDER_LENGTH, spec_target
from pipeline.model.tensors import Batch
from pipeline.request_types import HttpRequest, RequestMix
from pipeline.servers.specs import load_spec
from pipeline.spec.models import TensorSpec
from pipeline.spec.request_data import RequestDataError, read_request_data

SEQUENCE = TensorSpec(name="sequence", dtype="float32", shape=[-1, 2])
FLAGS = TensorSpec(name="flags", dtype="int64", shape=[3])
EXAMPLE = Path("examples") / "variable_length" / "serve.yaml"


def jsonl(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line)
                              for line in lines) + "\n")
    return path


def item(length: int, flags: list[object] | None = None) -> dict[str, object]:
    return {"sequence": [[0.5, -1.0]] * length, "flags": flags or [1, 2, 3]}


def test_json_lines_are_items_and_a_request_holds_batch_size_of_them(tmp_path: Path) -> None:
    path = jsonl(tmp_path, item(4), item(4), "", item(9), item(9), item(1))
    read = read_request_data(path, "requests.jsonl", [SEQUENCE, FLAGS], 2)
    assert [request["sequence"].shape for request in read.requests] == [(2, 4, 2), (2, 9, 2)]
    assert read.requests[0]["flags"].dtype == np.int64
    assert read.sizes == ["4", "9"]        # the last item does not fill a request
    single = read_request_data(path, "requests.jsonl", [SEQUENCE, FLAGS], 1)
    assert single.sizes == ["4", "4", "9", "9", "1"]


@pytest.mark.parametrize(("line", "says"), [
    ('{"sequence": [[0.5, 1.0]]', "requests.jsonl:2: not a JSON line"),
    ('[1, 2]', "requests.jsonl:2: expected an object of the inputs by name"),
    ({"sequence": [[0.5, 1.0]]}, "requests.jsonl:2: no 'flags'"),
    ({**item(2), "extra": [1]}, "requests.jsonl:2: 'extra' is not an input of the model"),
    (item(2, [1, 2]), "requests.jsonl:2: 'flags' has items of shape [2], outside the "
                      "declared [3]"),
    ({"sequence": [[0.5, 1.0, 2.0]], "flags": [1, 2, 3]},
     "requests.jsonl:2: 'sequence' has items of shape [1, 3], outside the declared [-1, 2]"),
    ({"sequence": [], "flags": [1, 2, 3]}, "requests.jsonl:2: 'sequence' has items of shape "
                                           "[0]"),
    (item(2, [1, 2.5, 3]), "requests.jsonl:2: 'flags' holds 2.5, not a int64"),
    (item(2, [1, True, 3]), "requests.jsonl:2: 'flags' holds true, not a int64"),
    (item(2, [1, 2**63, 3]), "not a int64"),
    ({"sequence": [[0.5, None]], "flags": [1, 2, 3]}, "'sequence' holds null, not a float32"),
    ({"sequence": [[0.5, 1.0], [2.0]], "flags": [1, 2, 3]}, "'sequence' is ragged"),
    ({"sequence": 3, "flags": [1, 2, 3]}, "'sequence' is not a list"),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, line: object, says: str) -> None:
    path = jsonl(tmp_path, item(2), line)
    with pytest.raises(RequestDataError) as caught:
        read_request_data(path, "requests.jsonl", [SEQUENCE, FLAGS], 1)
    assert says in str(caught.value)


def test_items_of_one_request_must_share_their_size(tmp_path: Path) -> None:
    path = jsonl(tmp_path, item(2), item(3))
    with pytest.raises(RequestDataError, match=r"requests.jsonl:1 to 2: items of one request "
                                               r"\(batch_size 2\) differ in size"):
        read_request_data(path, "requests.jsonl", [SEQUENCE, FLAGS], 2)
    with pytest.raises(RequestDataError, match="fewer than one request of batch_size 4"):
        read_request_data(path, "requests.jsonl", [SEQUENCE, FLAGS], 4)


def test_an_npz_holds_one_array_per_input_its_first_axis_the_items(tmp_path: Path) -> None:
    path = tmp_path / "requests.npz"
    np.savez(path, sequence=np.zeros((6, 5, 2), np.float32), flags=np.ones((6, 3), np.int64))
    read = read_request_data(path, "requests.npz", [SEQUENCE, FLAGS], 2)
    assert len(read.requests) == 3 and read.sizes == ["5"] * 3
    assert read.requests[0]["sequence"].shape == (2, 5, 2)


@pytest.mark.parametrize(("arrays", "says"), [
    ({"sequence": np.zeros((6, 5, 2), np.float32)}, "requests.npz: no array named 'flags' "
                                                    "(has: sequence)"),
    ({"sequence": np.zeros((6, 5, 2), np.float64), "flags": np.ones((6, 3), np.int64)},
     "requests.npz:sequence: float64, the spec says float32"),
    ({"sequence": np.zeros((6, 5, 3), np.float32), "flags": np.ones((6, 3), np.int64)},
     "requests.npz:sequence: 'sequence' has items of shape [5, 3], outside the declared"),
    ({"sequence": np.zeros((6, 5, 2), np.float32), "flags": np.ones((4, 3), np.int64)},
     "different numbers of items ([4, 6])"),
    ({"sequence": np.zeros((6, 5, 2), np.float32), "flags": np.ones((6, 3), np.int64),
      "other": np.ones(2)}, "requests.npz:other: not an input of the model"),
])
def test_a_bad_array_is_named_by_file_and_array(tmp_path: Path, arrays: dict[str, object],
                                                says: str) -> None:
    path = tmp_path / "requests.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    with pytest.raises(RequestDataError) as caught:
        read_request_data(path, "requests.npz", [SEQUENCE, FLAGS], 1)
    assert says in str(caught.value)


def test_a_file_of_another_kind_or_unreadable_is_refused(tmp_path: Path) -> None:
    (tmp_path / "requests.csv").write_text("1,2\n")
    with pytest.raises(RequestDataError, match=r"expected a \.npz or a \.jsonl file"):
        read_request_data(tmp_path / "requests.csv", "requests.csv", [SEQUENCE], 1)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(RequestDataError, match=r"broken\.npz: cannot read as \.npz"):
        read_request_data(tmp_path / "broken.npz", "broken.npz", [SEQUENCE], 1)
    with pytest.raises(RequestDataError, match="holds no items"):
        read_request_data(jsonl(tmp_path, ""), "requests.jsonl", [SEQUENCE], 1)


def test_validate_names_the_spec_key_and_the_data_line(project: Path) -> None:
    spec = project / EXAMPLE
    data = spec.parent / "requests.jsonl"
    lines = data.read_text().splitlines()
    lines[6] = json.dumps({"sequence": [[1.0] * 7]})
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(issue) for issue in caught.value.issues]
    line = next(number for number, text in enumerate(spec.read_text().splitlines(), start=1)
                if "data: requests.jsonl" in text)
    assert issue.startswith(f"{spec.relative_to(project)}:{line}:")
    assert "stages.latency.data: requests.jsonl:7: 'sequence' has items of shape [1, 7]" in issue


def test_a_missing_or_outside_data_file_is_a_spec_error(project: Path) -> None:
    spec = project / EXAMPLE
    text = spec.read_text()
    spec.write_text(text.replace("saturation: {", "saturation: {data: none.npz, "))
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(issue) for issue in caught.value.issues]
    assert "stages.saturation.data: data file not found" in issue
    spec.write_text(text.replace("data: requests.jsonl", "data: ../../../elsewhere.jsonl"))
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    [issue] = [str(issue) for issue in caught.value.issues]
    assert "stages.latency.data" in issue and "outside the project" in issue


class _Server:
    """What spec_target asks of a server: its request for a batch."""

    kind = "fake"

    def infer_request(self, batch: Batch) -> HttpRequest:
        [array] = batch.values()
        return HttpRequest("POST", "http://127.0.0.1:1/infer", array.tobytes(),
                           {"rows": str(array.shape[1])})


def test_load_sends_the_file_in_order_or_sampled(project: Path) -> None:
    spec = project / EXAMPLE
    loaded = load_spec(spec)
    mix = spec_target(loaded, _Server())  # type: ignore[arg-type]
    assert isinstance(mix, RequestMix)
    assert mix.order == tuple(range(48)) and mix.sizes[:4] == ("4", "16", "96", "4")
    assert [request.headers["rows"] for request in mix.requests[:3]] == ["4", "16", "96"]
    spec.write_text(spec.read_text().replace("data_order: in_order", "data_order: sampled"))
    sampled = spec_target(load_spec(spec), _Server())  # type: ignore[arg-type]
    assert isinstance(sampled, RequestMix) and len(sampled.order) == ORDER_LENGTH
    assert sampled.order != tuple(range(48))[:ORDER_LENGTH]
    assert len(Counter(sampled.order)) == 48
    # saturation sends the latency stage's file unless it names its own
    assert spec_target(load_spec(spec), _Server(), "saturation") == sampled  # type: ignore[arg-type]


def test_without_a_data_file_load_mixes_the_declared_sizes(project: Path) -> None:
    spec = project / EXAMPLE
    spec.write_text(spec.read_text().replace("data: requests.jsonl, data_order: in_order, ", ""))
    mix = spec_target(load_spec(spec), _Server())  # type: ignore[arg-type]
    assert isinstance(mix, RequestMix) and mix.sizes == ("4", "16", "96")
    assert [request.headers["rows"] for request in mix.requests] == ["4", "16", "96"]
    shares = Counter(mix.order)
    assert shares[0] > shares[1] > shares[2] > 0
