from __future__ import annotations

from pathlib import Path

from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.properties import (
    check_properties,
    parse_properties,
    render_properties,
)
from pipeline.servers.torchserve.spec import TORCHSERVE_SPEC
from pipeline.servers.torchserve.stats import TorchServeStats

REPO = Path(__file__).resolve().parents[2]
METRICS = """# TYPE ts_inference_requests_total counter
ts_inference_requests_total{model_name="m",model_version="default",hostname="vm",} 100.0
ts_inference_requests_total{model_name="other",model_version="default",hostname="vm",} 7.0
# TYPE ts_queue_latency_microseconds counter
ts_queue_latency_microseconds{model_name="m",model_version="default",hostname="vm",} 2000.0
# TYPE ts_inference_latency_microseconds counter
ts_inference_latency_microseconds{model_name="m",model_version="default",hostname="vm",} 9000.0
# TYPE ServePipelineBatches counter
ServePipelineBatches{ModelName="m",Level="Model",BatchSize="8",Hostname="vm",} 10.0
ServePipelineBatches{ModelName="m",Level="Model",BatchSize="4",Hostname="vm",} 5.0
"""


def test_properties_carry_the_spec_in_torchserves_units() -> None:
    spec = load_spec(REPO / "examples" / "torchserve" / "serve.yaml").spec
    text = render_properties(spec, TORCHSERVE_SPEC.production_ports, "model-store",
                             loopback_only=False)
    properties = parse_properties(text)
    assert properties["management_address"] == "http://127.0.0.1:8081"
    assert properties["inference_address"] == "http://0.0.0.0:8080"
    assert properties["disable_token_authorization"] == "false"
    assert properties["enable_model_api"] == "false"
    assert properties["metrics_mode"] == "prometheus"
    assert '"maxBatchDelay": 5' in properties["models"]       # 5ms -> milliseconds
    assert '"batchSize": 16' in properties["models"]
    assert '"minWorkers": 2' in properties["models"] and '"maxWorkers": 2' in properties["models"]
    assert check_properties(text, spec) == []
    exposed = text.replace("management_address=http://127.0.0.1", "management_address=http://0.0.0.0")
    assert any("loopback" in p for p in check_properties(exposed, spec))
    run = render_properties(spec, dict.fromkeys(TORCHSERVE_SPEC.production_ports, 1234), "/s",
                            loopback_only=True)
    assert "0.0.0.0" not in run


def test_metrics_deltas_give_queue_time_and_batch_sizes() -> None:
    before = TorchServeStats.from_prometheus(METRICS, "m")
    assert before.requests == 100.0 and before.batch_executions == {8: 10, 4: 5}
    later = METRICS.replace("} 100.0", "} 160.0").replace("} 2000.0", "} 3200.0") \
        .replace("} 9000.0", "} 15000.0").replace('BatchSize="8",Hostname="vm",} 10.0',
                                                  'BatchSize="8",Hostname="vm",} 16.0')
    window = TorchServeStats.from_prometheus(later, "m").since(before)
    metrics = window.window_metrics()
    assert metrics["server_requests"] == 60.0
    assert metrics["server_queue_us"] == 20.0
    assert metrics["server_inference_us"] == 100.0
    assert window.batch_executions == {8: 6}
    assert metrics["server_avg_batch_size"] == 8.0
