"""Triton's statistics extension: per model, what its inference requests cost, stage by stage.

Every inference request of an op, on any transport (``POST /roll``, ``.npz``, ``/v2`` over HTTP,
gRPC's ``ModelInfer`` and each message of ``ModelStreamInfer``), is counted under that op's
model once the pipeline has run it (``Pipeline.run``): as a success, with the time of each of
its stages, or as a failure. The stages are the pipeline's own:

- ``queue``: waiting for room in the memory budget (admission); 0 when there was room;
- ``compute_input``: reading the body and decoding and checking the inputs;
- ``compute_infer``: the kernel;
- ``compute_output``: encoding the answer (its bytes made, not yet sent).

``success`` is the whole of a successful request in the pipeline, ``fail`` of a failed one
(refused, or cancelled). The figures are Prometheus counters (``app/metrics.py``), so that with
several workers the statistics are read back summed over all of them, as ``/metrics`` is.
"""

import asyncio
import functools
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from app.metrics import LAST_INFERENCE, STAGE_COUNT, STAGE_SECONDS

#: Triton's InferStatistics durations this service measures, in its order.
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
_NS = 1e-9
#: The metrics' samples, as collected.
_COUNT_SAMPLE = "tensor_ops_model_stage_total"
_SECONDS_SAMPLE = "tensor_ops_model_stage_seconds_total"
_LAST_SAMPLE = "tensor_ops_model_last_inference_timestamp_seconds"


#: A model version's key in the tallies and the metrics' labels: its name and its version.
Model = tuple[str, str]


@functools.cache
def _children(model: Model, stage: str) -> tuple[Any, Any]:
    # The labelled children looked up once per model and stage, not once a request.
    return STAGE_COUNT.labels(*model, stage), STAGE_SECONDS.labels(*model, stage)


@functools.cache
def _last(model: Model) -> Any:
    return LAST_INFERENCE.labels(*model)


class _Tally:
    """A model's figures not yet in the metrics: a count and nanoseconds a stage (in
    ``STAGES``' order), and its last answer's time."""

    __slots__ = ("counts", "last", "ns")

    def __init__(self) -> None:
        self.counts = [0] * len(STAGES)
        self.ns = [0] * len(STAGES)
        self.last = 0.0


#: How long a request's figures may wait in a tally before ``flush`` moves them into the metrics.
FLUSH_AFTER = 0.25


class Statistics:
    """What this worker's requests added since the last flush, by model.

    A request adds a few integers here (the metrics' locked updates, ten a request, cost a small
    request about 8 us); ``flush`` moves them into the metrics at most ``FLUSH_AFTER`` seconds
    later, and before the statistics or /metrics are read, so a reader of any worker sees every
    request that far back. One per pipeline: the metrics it flushes into are the process's."""

    def __init__(self, metrics_dir: str | None = None) -> None:
        #: Where every worker's samples are, with several workers (the settings' metrics_dir).
        self.metrics_dir = metrics_dir
        self._tallies: dict[Model, _Tally] = {}
        #: The flush due within ``FLUSH_AFTER``; None without an event loop to run it (then
        #: each request is flushed at once).
        self._flush_timer: asyncio.TimerHandle | None = None

    def _tally(self, model: Model) -> _Tally:
        tally = self._tallies.get(model)
        if tally is None:
            tally = self._tallies[model] = _Tally()
        if self._flush_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a test calling in): nothing to defer to
                return tally
            self._flush_timer = loop.call_later(FLUSH_AFTER, self.flush)
        return tally

    def flush(self) -> None:
        """Move what the requests added into the metrics (summed over workers from there)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        for model, tally in self._tallies.items():
            # The time of the last inference first: another worker reading between these writes
            # then never sees a request counted without its time (with several workers each
            # write lands in a file at once; a gauge's first one creates its file, milliseconds).
            if tally.last:
                _last(model).set(tally.last)
                tally.last = 0.0
            for index, stage in enumerate(STAGES):
                if tally.counts[index]:
                    count, seconds = _children(model, stage)
                    count.inc(tally.counts[index])
                    seconds.inc(tally.ns[index] * _NS)
                    tally.counts[index] = tally.ns[index] = 0

    def succeeded(
        self, model: Model, total: int, queue: int, compute_input: int, infer: int
    ) -> None:
        """A request of ``model`` answered: ``total`` ns in the pipeline, ``queue`` of them
        waiting for memory, ``compute_input`` reading and decoding, ``infer`` in the kernel; the
        rest is the encoding."""
        tally = self._tally(model)
        counts, ns = tally.counts, tally.ns
        # success, queue, compute_input, compute_infer, compute_output (STAGES, "fail" aside)
        counts[0] += 1
        ns[0] += max(0, total)
        counts[2] += 1
        ns[2] += max(0, queue)
        counts[3] += 1
        ns[3] += max(0, compute_input)
        counts[4] += 1
        ns[4] += max(0, infer)
        counts[5] += 1
        ns[5] += max(0, total - queue - compute_input - infer)
        tally.last = time.time()
        if self._flush_timer is None:  # no event loop to defer to
            self.flush()

    def failed(self, model: Model, total: int) -> None:
        """A request of ``model`` refused or given up after ``total`` ns in the pipeline."""
        tally = self._tally(model)
        tally.counts[1] += 1
        tally.ns[1] += max(0, total)
        if self._flush_timer is None:  # no event loop to defer to
            self.flush()

    def read(self, models: Iterable[Model]) -> list[dict[str, Any]]:
        """This worker's figures flushed, then ``model_statistics`` of every worker's."""
        self.flush()
        return model_statistics(models, self.metrics_dir)


def _samples(metrics_dir: str | None) -> Iterable[Any]:
    if metrics_dir:
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        families: Iterable[Any] = registry.collect()
    else:
        families = [*STAGE_COUNT.collect(), *STAGE_SECONDS.collect(), *LAST_INFERENCE.collect()]
    for family in families:
        yield from family.samples


def model_statistics(
    models: Iterable[Model], metrics_dir: str | None = None
) -> list[dict[str, Any]]:
    """Triton's ``ModelStatistics`` of each model, as JSON (the gRPC answer is made from it):
    counts and nanoseconds summed over the workers, ``last_inference`` in ms since the epoch
    (0: none yet). Without batching, ``inference_count`` and ``execution_count`` are both the
    successful requests. ``response_stats``, ``batch_stats`` and ``memory_usage`` are empty, as
    Triton writes them for a model without decoupled responses, batching or memory to report. What
    workers have not flushed yet is not in them
    (``Statistics.read`` flushes its own first)."""
    wanted = list(models)
    counts: dict[tuple[Model, str], float] = {}
    seconds: dict[tuple[Model, str], float] = {}
    last: dict[Model, float] = {}
    for sample in _samples(metrics_dir):
        labels = sample.labels
        if sample.name == _COUNT_SAMPLE:
            key = ((labels["model"], labels["version"]), labels["stage"])
            counts[key] = counts.get(key, 0.0) + sample.value
        elif sample.name == _SECONDS_SAMPLE:
            key = ((labels["model"], labels["version"]), labels["stage"])
            seconds[key] = seconds.get(key, 0.0) + sample.value
        elif sample.name == _LAST_SAMPLE:
            model = (labels["model"], labels["version"])
            last[model] = max(last.get(model, 0.0), sample.value)
    answer = []
    for model in wanted:
        name, version = model
        stats = {
            stage: {
                "count": int(counts.get((model, stage), 0)),
                "ns": round(seconds.get((model, stage), 0.0) * 1e9),
            }
            for stage in STAGES
        }
        done = stats["success"]["count"]
        answer.append(
            {
                "name": name,
                "version": version,
                "last_inference": round(last.get(model, 0.0) * 1000),
                "inference_count": done,
                "execution_count": done,
                "inference_stats": {
                    **stats,
                    "cache_hit": {"count": 0, "ns": 0},
                    "cache_miss": {"count": 0, "ns": 0},
                },
                # Per response (decoupled models only) and per batch size: none here.
                "response_stats": {},
                "batch_stats": [],
                "memory_usage": [],
            }
        )
    return answer
