"""The memory model of the request pipeline, measured in process, stage by stage.

    .venv/bin/python tests/benchmarks/memory_model.py            # every family (about 2-4 min)
    .venv/bin/python tests/benchmarks/memory_model.py --quick    # half the sizes
    .venv/bin/python tests/benchmarks/memory_model.py --json memory.json   # raw figures too

Drives the stages as the pipeline does (``tests/benchmarks/bench.py``'s ``bench_stages``), on the
requests ``tests/hostile/test_memory_matrix.py`` sends::

    body (read into one buffer) -> ex.prepare(body) -> job = ex.decode(limits)
    -> [index normalisation, kernel: measured alone, then dropped]
    -> answer = ex.encode(job) -> send (the answer's pieces, as BuffersResponse yields them)

and for each stage records, above what was held when it started:

- ``peak``: the most bytes held during the stage (``tracemalloc``: Python objects and NumPy
  buffers, which NumPy reports to it; not orjson's own Rust allocations);
- ``held``: what is still held when it ends (what the following stages keep);
- ``rss``: the process's resident-set high-water mark during the stage (``VmHWM``, reset with
  ``/proc/self/clear_refs``), from a second pass without tracemalloc (whose own records would
  count), glibc giving freed blocks back (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_ARENA_MAX``).

The two disagree where it matters, and each is right about something: ``peak`` counts what is
allocated but never touched (orjson reserves a parse pool of about 12 bytes per byte of JSON
text, mostly left unwritten: 288 traced against 89 resident bytes per int64 element), ``rss``
what is physically taken (what the budget protects), but not what a stage reuses from memory the
process already holds.

Each family of requests is measured at two sizes; a stage's bytes per element is the slope
between them (fixed costs cancel), its fixed cost the intercept. Slopes are then fitted across
the families as functions of the element size ``s`` (Roll on a (16, n) tensor, every element type),
the JSON nesting depth ``d`` (elements nested (n,) + (1,)*d), the index size ``i`` (Gather,
indices in range and out of range) and the rank (binary forms), and printed as a table of
formulas, with the pipeline's own estimate per element beside the measured peak (what
``Pipeline.run`` reserves for the same request: the access log's ``reserved_bytes``).
"""

import argparse
import asyncio
import gc
import os
import re
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

ROOT = Path(__file__).resolve().parents[2]
# glibc reads these at process start: re-run with them so freed blocks go back at once.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_ARENA_MAX": "2"}
if any(os.environ.get(key) != value for key, value in ALLOCATOR.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR})
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from app.http.op_routes import JsonExchange, NpzExchange  # noqa: E402
from app.http.responses import BuffersResponse  # noqa: E402
from app.http.v2_exchange import V2Exchange  # noqa: E402
from app.ops.gather import _signed_indices  # noqa: E402
from app.pipeline.admission import MemoryBudget, Reservation  # noqa: E402
from app.pipeline.jobs import Job, Limits  # noqa: E402
from app.pipeline.run import Answer, Exchange, Pipeline  # noqa: E402
from app.registry import REGISTRY  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.hostile.test_memory_matrix import (  # noqa: E402
    DTYPES,
    JSON_FORM,
    TRANSPORTS,
    Case,
    in_range,
    out_of_range,
    request_for,
    roll_case,
    values,
)

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
STAGES = ("body", "prepare", "decode", "normalise", "kernel", "encode", "send")
SETTINGS = Settings()  # the default limits, as the matrix's worker has them
LIMITS = Limits.of(SETTINGS)

# ------------------------------------------------------------------------------------------------
# Meters


def resident() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * PAGE


def high_water_mark() -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) * 1024 if match else 0


def reset_high_water_mark() -> None:
    Path("/proc/self/clear_refs").write_text("5")


@dataclass
class Reading:
    """One stage: bytes held at its peak and at its end, above what was held at its start."""

    peak: int = 0
    held: int = 0


class Meter:
    """Runs a stage and reads what it held: traced (tracemalloc, which must be started) or
    resident (RSS)."""

    def __init__(self, traced: bool) -> None:
        self.traced = traced

    def run(self, stage: Callable[[], Any]) -> tuple[Any, Reading]:
        if self.traced:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            result = stage()
            current, peak = tracemalloc.get_traced_memory()
            return result, Reading(peak - before, current - before)
        before = resident()
        reset_high_water_mark()
        result = stage()
        return result, Reading(high_water_mark() - before, resident() - before)


# ------------------------------------------------------------------------------------------------
# The stages of one request


def exchange_for(transport: str, path: str, headers: dict[str, str], op: str) -> Exchange:
    if transport.startswith("v2"):
        return V2Exchange(REGISTRY[op], headers.get("inference-header-content-length"))
    if transport == "npz":
        query = dict(parse_qsl(urlsplit(path).query))
        return NpzExchange(REGISTRY[op], query, SETTINGS.max_body_bytes)
    return JsonExchange(REGISTRY[op], headers.get("accept") == "application/x-npy")


def read_body(content: bytes) -> memoryview:
    """The body as the server holds it: one NumPy buffer of its declared length."""
    buffer = np.empty(len(content), dtype=np.uint8)
    buffer[:] = np.frombuffer(content, dtype=np.uint8)
    return buffer.data


def send(answer: Answer) -> int:
    """Every piece of the answer, as the response sends them; their total length."""
    response = BuffersResponse(answer.buffers, MemoryBudget(1 << 62, 1).reserve(), "x")
    return sum(len(piece) for piece in response._pieces())


def normalise(job: Job) -> Any:
    """Gather's index conversion alone, on the decoded indices (None for Roll): 8- and 16-bit
    indices widened to int32, indices in the other byte order swapped, others read in place."""
    if job.op.name != "gather":
        return None
    data, indices = job.arrays["data"], job.arrays["indices"]
    axis = int(np.asarray(job.arrays["axis"]).reshape(-1)[0]) % data.ndim
    return _signed_indices(indices, data.shape[axis])


@dataclass
class Run:
    """The stages of one request, and what the pipeline reserved for it."""

    readings: dict[str, Reading]
    estimate: int
    body: int
    total_peak: int


def run_request(transport: str, case: Case, meter: Meter) -> Run:
    request = request_for(transport, case, "model")
    gc.collect()  # once, before the first stage: nothing left over from building the request
    content = request.content
    exchange = exchange_for(transport, request.path, request.headers, case.op)
    readings: dict[str, Reading] = {}
    held = 0
    total_peak = 0

    def step(name: str, stage: Callable[[], Any], keep: bool = True) -> Any:
        nonlocal held, total_peak
        result, reading = meter.run(stage)
        readings[name] = reading
        total_peak = max(total_peak, held + reading.peak)
        if keep:
            held += reading.held
        return result

    body = step("body", lambda: read_body(content))
    step("prepare", lambda: exchange.prepare(body))
    job = step("decode", lambda: exchange.decode(LIMITS))
    step("normalise", lambda: normalise(job), keep=False)
    step("kernel", job.output, keep=False)
    answer = step("encode", lambda: exchange.encode(job))
    step("send", lambda: send(answer), keep=False)
    estimate = pipeline_estimate(transport, request.path, request.headers, case.op, body)
    return Run(readings, estimate, len(body), total_peak)


def pipeline_estimate(
    transport: str, path: str, headers: dict[str, str], op: str, body: memoryview
) -> int:
    """What the pipeline itself reserves for the request (its memory estimate at its peak, as
    the access log's ``reserved_bytes``): ``Pipeline.run`` on a fresh exchange, the body
    reserved as read_body reserves a body of known length."""

    async def reserved() -> int:
        pipeline = Pipeline(SETTINGS, MemoryBudget(1 << 62, 10))

        async def read(reservation: Reservation) -> memoryview:
            await reservation.grow_to(len(body))
            return body

        exchange = exchange_for(transport, path, headers, op)
        _, reservation = await pipeline.run(read, exchange)
        await reservation.release()
        return reservation.peak

    return asyncio.run(reserved())


# ------------------------------------------------------------------------------------------------
# Families: one request shape at two sizes


@dataclass
class Family:
    """Requests that differ only in their element count ``n`` (for Gather: indices)."""

    group: str
    transport: str
    label: str
    make: Callable[[int], Case]
    sizes: tuple[int, int]
    #: The variable the group's fit is over (element size, depth, index size, rank).
    x: float = 0.0
    slopes: dict[str, dict[str, float]] = field(default_factory=dict)
    fixed: dict[str, dict[str, float]] = field(default_factory=dict)


def typed(dtype: np.dtype[Any]) -> Callable[[int], Case]:
    return lambda n: roll_case(values((16, n // 16), dtype))


def nested(depth: int) -> Callable[[int], Case]:
    return lambda n: roll_case(values((n,) + (1,) * depth, np.dtype(np.int8)), nested_v2=True)


def ranked(rank: int) -> Callable[[int], Case]:
    def make(n: int) -> Case:
        # Up to 8 dimensions of 2, then dimensions of 1: n elements at any rank.
        twos = min(rank - 1, 8)
        shape = (2,) * twos + (1,) * (rank - 1 - twos) + (n >> twos,)
        return roll_case(values(shape, np.dtype(np.float32)))

    return make


def indexed(index_type: np.dtype[Any], outside: bool) -> Callable[[int], Case]:
    make = out_of_range if outside else in_range
    return lambda n: Case(values((100,), np.dtype(np.int8)), indices=make(n, 100, index_type))


def meshed(n: int) -> Case:
    """Roll along all 16 axes of int64 data of (2,)*15 + (n / 2**15,): the index mesh."""
    data = values((2,) * 15 + (n >> 15,), np.dtype(np.int64))
    return Case(data, np.ones(16, np.int64), np.arange(16, dtype=np.int64))


def batched(n: int) -> Case:
    """Gather with batch_dims 1 over n / 32 batches (more than 4096: fancy indexing): float32
    data of (b, 16, 4), int32 indices of (b, 8), some out of range; n output elements."""
    count = n // 32
    data = values((count, 16, 4), np.dtype(np.float32))
    indices = out_of_range(count * 8, 16, np.dtype(np.int32)).reshape(count, 8)
    return Case(data, indices=indices, axis=1, batch_dims=1)


def deep_output(n: int) -> Case:
    """Gather's answer nested 30 deep: data of (64,) + (1,)*30, ``n`` indices."""
    data = values((64,) + (1,) * 30, np.dtype(np.int8))
    return Case(data, indices=in_range(n, 64, np.dtype(np.int64)))


def families(scale: float) -> list[Family]:
    def sized(small: int) -> tuple[int, int]:
        first = max(1024, int(small * scale)) // 1024 * 1024
        return first, 2 * first

    made: list[Family] = []
    for transport in TRANSPORTS:
        json_form = transport in JSON_FORM
        for name, dtype in DTYPES.items():
            sizes = sized(128 << 10) if json_form else sized(4 * MiB // dtype.itemsize)
            made.append(Family("type", transport, name, typed(dtype), sizes, dtype.itemsize))
    for transport in JSON_FORM:
        for depth in (0, 2, 8, 16, 30):
            made.append(Family("depth", transport, f"d={depth}", nested(depth), sized(8192), depth))
    for transport in ("npz", "v2-binary", "json-npy"):
        for rank in (1, 8, 32):
            made.append(Family("rank", transport, f"r={rank}", ranked(rank), sized(1 << 20), rank))
    for transport in ("npz", "v2-binary"):
        for index_name in ("int8", "int32", "int64", "uint64"):
            for outside in (False, True):
                index_type = np.dtype(index_name)
                made.append(
                    Family(
                        "indices-out" if outside else "indices-in",
                        transport,
                        index_name,
                        indexed(index_type, outside),
                        sized(1 << 20),
                        index_type.itemsize,
                    )
                )
    made.append(Family("deep-output", "json", "d=30", deep_output, sized(8192), 30))
    made.append(Family("roll-mesh", "npz", "r=16", meshed, sized(1 << 20)))
    made.append(Family("batched", "npz", "b=n/32", batched, sized(1 << 20)))
    return made


def in_child(work: Callable[[], dict[str, float]]) -> dict[str, float]:
    """``work()`` in a forked child of this (still clean) process: every resident measurement
    starts from the same heap, as a fresh worker's, with no arena left over from the last."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(reading)
        code = 0
        try:
            payload = orjson.dumps(work())
        except BaseException as error:  # reported by the parent
            payload = orjson.dumps({"error": repr(error)})
            code = 1
        with os.fdopen(writing, "wb") as pipe:
            pipe.write(payload)
        os._exit(code)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        answer: dict[str, Any] = orjson.loads(pipe.read())
    os.waitpid(pid, 0)
    if "error" in answer:
        raise RuntimeError(f"the measuring child failed: {answer['error']}")
    return answer


def measure(family: Family, traced: bool) -> tuple[dict[str, float], dict[str, float]]:
    """The figures of the family's two sizes: traced in this process, resident in children."""
    meter = Meter(traced)

    def one(n: int) -> dict[str, float]:
        return metrics(run_request(family.transport, family.make(n), meter))

    if traced:
        tracemalloc.start()
        try:
            small, large = (one(n) for n in family.sizes)
        finally:
            tracemalloc.stop()
        return small, large
    first, second = family.sizes
    return in_child(lambda: one(first)), in_child(lambda: one(second))


def metrics(run: Run) -> dict[str, float]:
    """The figures fitted: each stage's peak and held bytes, the request's and its estimate."""
    figures: dict[str, float] = {}
    for stage, reading in run.readings.items():
        figures[f"{stage}.peak"] = reading.peak
        figures[f"{stage}.held"] = reading.held
    figures["request.peak"] = run.total_peak
    figures["request.estimate"] = run.estimate
    figures["request.body"] = run.body
    return figures


def slopes(family: Family, a: dict[str, float], b: dict[str, float], kind: str) -> None:
    small, large = family.sizes
    family.slopes[kind] = {key: (b[key] - a[key]) / (large - small) for key in a}
    family.fixed[kind] = {key: a[key] - family.slopes[kind][key] * small for key in a}


# ------------------------------------------------------------------------------------------------
# Fits and tables


def fit(points: list[tuple[float, float]]) -> tuple[list[float], float]:
    """Least squares y = a + b x (or + c x^2, when a line leaves more than a tenth of the range
    unexplained and the parabola does three times better): the coefficients from the constant
    up, and the largest residual."""
    xs = np.array([x for x, _ in points], dtype=np.float64)
    ys = np.array([y for _, y in points], dtype=np.float64)
    if len(set(xs.tolist())) < 2:
        mean = float(ys.mean())
        return [mean], float(np.abs(ys - mean).max())
    best: tuple[list[float], float] | None = None
    for degree in (1, 2):
        if degree >= len(set(xs.tolist())):
            break
        coefficients = np.polyfit(xs, ys, degree)
        residual = float(np.abs(ys - np.polyval(coefficients, xs)).max())
        found = ([float(c) for c in coefficients[::-1]], residual)
        spread = float(np.abs(ys).max())
        if best is None:
            best = found
            if residual <= 0.1 * spread:
                break
        elif residual * 3 < best[1]:
            best = found
    assert best is not None
    return best


def formula(coefficients: list[float], variable: str) -> str:
    text = f"{coefficients[0]:8.1f}"
    for power, value in enumerate(coefficients[1:], start=1):
        if abs(value) < 0.05:
            continue
        term = variable if power == 1 else f"{variable}^{power}"
        text += f" {'+' if value >= 0 else '-'} {abs(value):6.1f}*{term}"
    return text


VARIABLE = {"type": "s", "depth": "d", "rank": "r", "indices-in": "i", "indices-out": "i"}
UNIT = {
    "type": "element",
    "depth": "element",
    "rank": "element",
    "indices-in": "index",
    "indices-out": "index",
    "deep-output": "output element",
    "roll-mesh": "element",
    "batched": "output element",
}


def print_family_table(done: list[Family], kind: str) -> None:
    print(f"\nBytes per element (slope between the two sizes), {kind}")
    header = f"{'group':12s} {'transport':13s} {'family':7s}" + "".join(
        f"{stage:>10s}" for stage in STAGES
    )
    print(header + f"{'request':>10s}{'estimate':>10s}{'body':>9s}")
    for family in done:
        figures = family.slopes[kind]
        cells = "".join(f"{figures[f'{stage}.peak']:10.1f}" for stage in STAGES)
        print(
            f"{family.group:12s} {family.transport:13s} {family.label:7s}{cells}"
            f"{figures['request.peak']:10.1f}{figures['request.estimate']:10.1f}"
            f"{figures['request.body']:9.1f}"
        )


def print_model(done: list[Family], kind: str) -> list[dict[str, Any]]:
    """The fitted formulas: per group and transport, each stage's peak bytes per element as a
    function of the group's variable, and the estimate's beside it."""
    print(f"\nFITTED MODEL ({kind}): peak bytes a stage holds per {{element|index}}, above what it")
    print("started with; s = element size, t = JSON text bytes an element, d = JSON nesting")
    print("depth, i = index size, r = rank")
    print("(max residual of the fit in brackets)")
    rows: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[Family]] = {}
    for family in done:
        groups.setdefault((family.group, family.transport), []).append(family)
    for (group, transport), members in groups.items():
        variable = VARIABLE.get(group, "x")
        if group == "type" and transport in JSON_FORM:
            # JSON numbers cost by their text (and the objects parsed), not by the element size.
            variable = "t"
            for family in members:
                family.x = family.slopes["traced"]["request.body"]
        print(f"\n  {group} / {transport} (per {UNIT[group]})")
        for key in [f"{stage}.peak" for stage in STAGES] + [
            "decode.held",
            "encode.held",
            "request.peak",
            "request.estimate",
        ]:
            points = [(family.x, family.slopes[kind][key]) for family in members]
            coefficients, residual = fit(points)
            if max(abs(y) for _, y in points) < 0.5:
                continue
            text = formula(coefficients, variable)
            print(f"    {key:18s} {text:42s} [{residual:7.1f}]")
            rows.append(
                {
                    "kind": kind,
                    "group": group,
                    "transport": transport,
                    "metric": key,
                    "coefficients": coefficients,
                    "variable": variable,
                    "residual": residual,
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="half the sizes")
    parser.add_argument("--json", type=Path, help="write the raw figures there")
    parser.add_argument("--only", help="groups to run, comma-separated (type,depth,rank,...)")
    arguments = parser.parse_args()
    scale = 0.5 if arguments.quick else 1.0
    chosen = families(scale)
    if arguments.only:
        wanted = set(arguments.only.split(","))
        chosen = [family for family in chosen if family.group in wanted]
    started = time.perf_counter()
    # Resident figures first, each in a child forked from this process while it is still clean;
    # then the traced ones, here.
    for kind in ("rss", "traced"):
        for family in chosen:
            began = time.perf_counter()
            slopes(family, *measure(family, traced=kind == "traced"), kind)
            figures = family.slopes[kind]
            print(
                f"  {kind:6s} {family.group:12s} {family.transport:13s} {family.label:7s}",
                f"n={family.sizes}: request peak {figures['request.peak']:8.1f} B/el,",
                f"estimate {figures['request.estimate']:8.1f} B/el",
                f"({time.perf_counter() - began:.1f} s)",
                flush=True,
            )
    for kind in ("traced", "rss"):
        print_family_table(chosen, kind)
    rows = [row for kind in ("traced", "rss") for row in print_model(chosen, kind)]
    print(f"\n{time.perf_counter() - started:.0f} s")
    if arguments.json:
        raw = [
            {**asdict(family), "make": None, "x": family.x}
            for family in chosen  # the callables are not data
        ]
        arguments.json.write_bytes(orjson.dumps({"families": raw, "model": rows}))


if __name__ == "__main__":
    main()
