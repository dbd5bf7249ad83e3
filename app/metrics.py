"""The service's Prometheus metrics, correct with one worker or several (multiprocess mode)."""

import asyncio
import bisect
from typing import Any

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


#: How long a request's figures may wait in ``REQUEST_TALLY`` before they are in the metrics.
FLUSH_AFTER = 0.25


#: The latency histogram's upper bounds, +Inf last, as prometheus-client keeps them.
_BOUNDS: tuple[float, ...] = tuple(LATENCY._upper_bounds)


class _RouteTally:
    """A route and status's requests not yet in the metrics: their count, bytes, seconds and
    how many fell in each of the latency histogram's buckets."""

    __slots__ = ("buckets", "bytes_in", "bytes_out", "requests", "seconds")

    def __init__(self) -> None:
        self.requests = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.seconds = 0.0
        self.buckets = [0] * len(_BOUNDS)


class RequestTally:
    """What this worker's answered requests add to the request metrics, gathered on the event
    loop and moved into them at most ``FLUSH_AFTER`` seconds later, and before they are read.

    prometheus-client takes a lock for each update (with several workers it writes a shared
    file too): five a request cost a small request 2-5 us. Here a request adds a few integers;
    ``flush`` makes one update per route, status and figure. With several workers, a reader of
    /metrics sees another worker's requests up to ``FLUSH_AFTER`` seconds late (as a scrape
    would anyway, a moment later). Called on the event loop only (the HTTP observer and the gRPC
    handlers); without a running loop each request is flushed at once."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], _RouteTally] = {}
        self._keys: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._children: dict[tuple[str, str], tuple[Any, Any, Any, Any]] = {}

    def add(
        self,
        route: str,
        status: str,
        seconds: float,
        bytes_in: int,
        bytes_out: int,
        key: str | None,
    ) -> None:
        tally = self._routes.get((route, status))
        if tally is None:
            tally = self._routes[(route, status)] = _RouteTally()
        tally.requests += 1
        tally.bytes_in += bytes_in
        tally.bytes_out += bytes_out
        tally.seconds += seconds
        # The first bucket whose bound is at or above it, as Histogram.observe counts it.
        tally.buckets[bisect.bisect_left(_BOUNDS, seconds)] += 1
        if key is not None:
            self._keys[key] = self._keys.get(key, 0) + 1
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a test calling in): nothing to defer to
                self.flush()
                return
            self._timer = loop.call_later(FLUSH_AFTER, self.flush)

    def flush(self) -> None:
        """Move what the requests added into the metrics."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        routes, self._routes = self._routes, {}
        keys, self._keys = self._keys, {}
        for (route, status), tally in routes.items():
            requests, latency, bytes_in, bytes_out = self._route_children(route, status)
            requests.inc(tally.requests)
            bytes_in.inc(tally.bytes_in)
            bytes_out.inc(tally.bytes_out)
            # Histogram.observe's own two steps (the sum, then the one bucket it falls in),
            # once per bucket instead of once per request.
            latency._sum.inc(tally.seconds)
            for index, count in enumerate(tally.buckets):
                if count:
                    latency._buckets[index].inc(count)
        for key, count in keys.items():
            KEY_REQUESTS.labels(key).inc(count)

    def _route_children(self, route: str, status: str) -> tuple[Any, Any, Any, Any]:
        # Labelled children looked up once per route and status: routes and statuses are few.
        children = self._children.get((route, status))
        if children is None:
            children = self._children[(route, status)] = (
                REQUESTS.labels(route, status),
                LATENCY.labels(route),
                BYTES_IN.labels(route),
                BYTES_OUT.labels(route),
            )
        return children


#: The process's request figures not yet in the metrics (``render`` flushes them first).
REQUEST_TALLY = RequestTally()


def render(metrics_dir: str | None) -> tuple[bytes, str]:
    """The metrics in Prometheus text format, gathered from every worker when there are several.

    With several workers ``metrics_dir`` (the settings' ``PROMETHEUS_MULTIPROC_DIR``) names a
    directory every worker writes its samples to (``python -m app`` sets it up); the sum over
    the directory is the service's. This worker's own figures are flushed first.
    """
    REQUEST_TALLY.flush()
    if metrics_dir:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
