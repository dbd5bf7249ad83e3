"""The service's Prometheus metrics, correct with one worker or several (multiprocess mode)."""

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

REQUESTS = Counter(
    "tensor_ops_requests_total", "HTTP requests answered, by route and status", ["route", "status"]
)
LATENCY = Histogram(
    "tensor_ops_request_duration_seconds",
    "Time from the request's arrival to the end of its response, by route",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
BYTES_IN = Counter("tensor_ops_request_bytes_total", "Request body bytes received", ["route"])
BYTES_OUT = Counter("tensor_ops_response_bytes_total", "Response body bytes sent", ["route"])
KEY_REQUESTS = Counter(
    "tensor_ops_key_requests_total",
    "Requests admitted by an API key, by the key's label (TENSOR_OPS_API_KEYS_FILE)",
    ["key"],
)
ELEMENTS = Counter("tensor_ops_elements_total", "Output elements computed, by op", ["op"])
RESERVED = Gauge(
    "tensor_ops_memory_reserved_bytes",
    "Bytes of the memory budget held by requests in flight (summed over live workers)",
    multiprocess_mode="livesum",
)
WAITING = Gauge(
    "tensor_ops_admission_waiting",
    "Requests waiting for room in the memory budget",
    multiprocess_mode="livesum",
)
REFUSED_BUSY = Counter(
    "tensor_ops_admission_refused_total", "Requests answered 503: no memory came free in time"
)

#: Triton's statistics extension (app/pipeline/statistics.py): per model, the requests through
#: each stage (success, fail, queue, compute_input, compute_infer, compute_output) and their time.
STAGE_COUNT = Counter(
    "tensor_ops_model_stage",
    "Inference requests by model and stage (Triton's statistics: success, fail, queue, "
    "compute_input, compute_infer, compute_output), every transport",
    ["model", "version", "stage"],
)
STAGE_SECONDS = Counter(
    "tensor_ops_model_stage_seconds",
    "Time inference requests spent in each stage, by model, version and stage",
    ["model", "version", "stage"],
)
LAST_INFERENCE = Gauge(
    "tensor_ops_model_last_inference_timestamp_seconds",
    "When the last successful inference of a model ended (seconds since the epoch)",
    ["model", "version"],
    multiprocess_mode="max",
)

SPANS_DROPPED = Counter(
    "tensor_ops_spans_dropped_total",
    "Trace spans not sent: the collector refused them, did not answer in time, or still held "
    "them when the worker's time to exit was up",
)


def render(metrics_dir: str | None) -> tuple[bytes, str]:
    """The metrics in Prometheus text format, gathered from every worker when there are several.

    With several workers ``metrics_dir`` (the settings' ``PROMETHEUS_MULTIPROC_DIR``) names a
    directory every worker writes its samples to (``python -m app`` sets it up); the sum over
    the directory is the service's.
    """
    if metrics_dir:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
