"""Performance benchmark of tensor-ops: kernels, codecs, HTTP transports, small requests, memory.

    .venv/bin/python tests/benchmarks/bench.py                    # full run (tensors up to 64 MiB)
    .venv/bin/python tests/benchmarks/bench.py --big              # and 256 MiB kernels
    .venv/bin/python tests/benchmarks/bench.py --smoke            # CI: every section, small sizes
    .venv/bin/python tests/benchmarks/bench.py --json bench.json  # all figures as JSON too
    .venv/bin/python tests/benchmarks/bench.py --only kernels,codecs  # some sections only
    .venv/bin/python tests/benchmarks/bench.py --replot bench.json    # redraw the plot only

The full run takes about 3-4 minutes on the 2-core development machine and writes the plot
``docs/benchmark.png``; ``--smoke`` takes about a minute (63 s on that machine) and writes its plot to the temporary
directory instead (``--plot PATH`` chooses).

Every figure is a median of measurements taken side by side with its anchor in one run,
interleaved (a thing, its anchor, the next thing, ...; the order reversed every other round),
so that the noise of a shared machine hits both alike. It prints tables and ratios, writes the
plot and never asserts a time; every loop is bounded in count and time.

1. Kernels (``app.ops.roll``, ``app.ops.gather``, OpenVINO's CPU plugin) against ``a.copy()``,
   ``np.copyto``, ``np.roll`` and ``np.take`` on 2-D tensors of 4 KiB to 64 MiB; ours against
   the byte floor (np.copyto's time for the bytes an op reads and writes) and OpenVINO, and the
   registry's plan + kernel (one request's part) at 4 KiB.
2. Codecs (.npy raw and base64) on a 64 MiB float32 tensor against ``np.copyto``.
3. A 64 MiB float32 roll over HTTP through each transport against a bare FastAPI echo of the
   same bytes (``tests/benchmarks/echo_app.py``), with a sweep of sizes and the server-side stages
   timed in process.
4. Small requests (3-element roll) under ``wrk`` against the echo app's ``/constant``.
5. Peak RSS of a fresh single-worker server for one large request of each transport.
6. The plot: throughput against size.

The HTTP client is a minimal HTTP/1.1 client over a raw socket written here (keep-alive,
``sendall`` of the body, ``recv_into`` a preallocated buffer): it costs the client almost no CPU,
which on a 2-core machine would otherwise be taken from the server.
"""

import argparse
import asyncio
import base64
import contextlib
import functools
import io
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import numpy.typing as npt
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.http.op_routes import JsonExchange, NpzExchange  # noqa: E402
from app.http.v2_exchange import V2Exchange  # noqa: E402
from app.ops import gather, roll  # noqa: E402
from app.pipeline.jobs import Limits  # noqa: E402
from app.pipeline.run import Exchange  # noqa: E402
from app.registry import REGISTRY, Plan  # noqa: E402
from app.settings import Settings  # noqa: E402
from tensor_ops_wire.npy import (  # noqa: E402
    Base64Stream,
    decode_npy,
    decode_npy_base64,
    encode_npy,
    npy_buffer,
)
from tests.support import (  # noqa: E402
    launch_server,
    npy_b64,
    npy_bytes,
    npz_bytes,
    server_output,
    stop_server,
)

KiB, MiB = 1 << 10, 1 << 20
Array = npt.NDArray[Any]
Thunk = Callable[[], object]

SERVICE_ENV = {
    "TENSOR_OPS_LOG_LEVEL": "warning",
    "TENSOR_OPS_MAX_BODY_BYTES": str(1 << 30),
    "TENSOR_OPS_MAX_OUTPUT_BYTES": str(1 << 31),
    "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(8 << 30),
}
SMALL_BODY = b'{"data":[1,2,3],"shift":1,"axes":0}'
SMALL_ANSWER = {"data": [3, 1, 2], "dtype": "int64", "shape": [3]}
#: The small requests measured against the bare route: path, body and answer.
SMALL_CASES: dict[str, tuple[str, bytes, dict[str, Any]]] = {
    "roll": ("/roll", SMALL_BODY, SMALL_ANSWER),
    "gather": (
        "/gather",
        b'{"data":[1,2,3],"indices":[2,0],"axis":0}',
        {"data": [3, 1], "dtype": "int64", "shape": [2]},
    ),
    "v2 infer": (
        "/v2/models/roll/infer",
        b'{"inputs":[{"name":"data","datatype":"INT64","shape":[3],"data":[1,2,3]},'
        b'{"name":"shift","datatype":"INT64","shape":[1],"data":[1]},'
        b'{"name":"axes","datatype":"INT64","shape":[1],"data":[0]}]}',
        {
            "model_name": "roll",
            "model_version": "7",
            "outputs": [{"name": "output", "datatype": "INT64", "shape": [3], "data": [3, 1, 2]}],
        },
    ),
}
WRK = "/usr/bin/wrk"
#: Targets, printed beside the figures (never asserted).
SMALL_KERNEL_TARGET_US = 10.0
JSON_TARGET, RAW_TARGET = 1.5, 1.3
RPS_TARGET, P99_TARGET = 0.8, 1.5


def size_label(nbytes: int) -> str:
    if nbytes >= MiB:
        return f"{nbytes // MiB} MiB"
    return f"{nbytes // KiB} KiB"


def time_label(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def table(headers: list[str], rows: list[list[str]], first_width: int = 0, left: int = 1) -> str:
    """Rows under headers, the first ``left`` columns left-aligned, the others right-aligned."""
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    widths[0] = max(widths[0], first_width)
    lines = []
    for row in [headers, *rows]:
        cells = [
            str(cell).ljust(width) if column < left else str(cell).rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


# ----------------------------------------------------------------------------------------------
# Timing: interleaved rounds, medians


def interleaved(
    cases: list[tuple[str, Thunk]],
    *,
    number: int,
    rounds: int,
    min_rounds: int,
    budget: float,
) -> dict[str, float]:
    """The median seconds per call of each case, over at most ``rounds`` rounds.

    A round times ``number`` calls of each case in turn (reversed order every other round);
    rounds stop after ``min_rounds`` once ``budget`` seconds have passed. One untimed call of
    each case warms it up first.
    """
    for _, call in cases:
        call()
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    deadline = time.monotonic() + budget
    for round_ in range(rounds):
        for name, call in cases if round_ % 2 == 0 else cases[::-1]:
            start = time.perf_counter()
            for _ in range(number):
                call()
            samples[name].append((time.perf_counter() - start) / number)
        if round_ + 1 >= min_rounds and time.monotonic() > deadline:
            break
    return {name: statistics.median(values) for name, values in samples.items()}


# ----------------------------------------------------------------------------------------------
# Section 1: kernels


def square_shape(nbytes: int, itemsize: int) -> tuple[int, int]:
    """A 2-D shape of ``nbytes``: rows a power of two, as square as powers of two allow."""
    count = nbytes // itemsize
    rows = 1 << ((count.bit_length() - 1) // 2)
    return rows, count // rows


@dataclass
class Indices:
    """Indices for our gather (some negative, some out of range) and their in-range twins."""

    ours: Array  # int64, as the service reads JSON indices
    positions: Array  # in [0, length): what np.take and OpenVINO get
    valid: Array  # False where ``ours`` is out of range (our output is zeros there)


def make_indices(rng: np.random.Generator, length: int, shape: tuple[int, ...]) -> Indices:
    if len(shape) == 1:
        positions = rng.permutation(length)[: shape[0]].astype(np.int64)
    else:
        positions = rng.integers(0, length, size=shape, dtype=np.int64)
    ours = positions.copy()
    negative = rng.random(shape) < 0.25
    ours[negative] -= length
    outside = rng.random(shape) < 0.01
    chosen = positions[outside]
    ours[outside] = np.where(chosen % 2 == 0, length + chosen, -length - 1 - chosen)
    return Indices(ours, positions, ~outside)


class OpenVino:
    """Roll-7 and Gather-8 compiled for the CPU plugin, one model per shape, outside timing."""

    def __init__(self, threads: int) -> None:
        # Imported here: it takes a second, and its absence only drops the OpenVINO rows.
        import openvino as ov  # noqa: PLC0415
        from openvino import opset7, opset8  # noqa: PLC0415

        self.ov, self.opset7, self.opset8 = ov, opset7, opset8
        self.core = ov.Core()
        self.config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
        self.types = {np.dtype(np.float32): ov.Type.f32, np.dtype(np.int32): ov.Type.i32}

    def _compile(self, outputs: list[Any], parameters: list[Any]) -> Any:
        model = self.ov.Model(outputs, parameters)
        return self.core.compile_model(model, "CPU", self.config).create_infer_request()

    def _parameter(self, array: Array) -> Any:
        return self.opset8.parameter(list(array.shape), self.types[array.dtype])

    def roll(self, data: Array, shifts: list[int], axes: list[int]) -> Callable[[], Array]:
        """Roll with non-negative axes and reduced shifts, as 1D int32 constants."""
        parameter = self._parameter(data)
        reduced = [shift % data.shape[axis] for shift, axis in zip(shifts, axes, strict=True)]
        node = self.opset7.roll(
            parameter,
            self.opset8.constant(np.array(reduced, dtype=np.int32)),
            self.opset8.constant(np.array(axes, dtype=np.int32)),
        )
        request = self._compile([node], [parameter])

        def run() -> Array:
            result = request.infer({0: data}, share_inputs=True, share_outputs=True)
            output: Array = result[0]
            return output

        return run

    def gather(
        self, data: Array, positions: Array, axis: int, batch_dims: int
    ) -> Callable[[], Array]:
        """Gather with in-range int32 indices (the plugin reads past the data for others)."""
        indices = positions.astype(np.int32)
        data_parameter = self._parameter(data)
        indices_parameter = self._parameter(indices)
        node = self.opset8.gather(
            data_parameter,
            indices_parameter,
            self.opset8.constant(np.array(axis, dtype=np.int32)),
            batch_dims,
        )
        request = self._compile([node], [data_parameter, indices_parameter])

        def run() -> Array:
            result = request.infer({0: data, 1: indices}, share_inputs=True, share_outputs=True)
            output: Array = result[0]
            return output

        return run


def expected_gather(data: Array, indices: Indices, axis: int, batch_dims: int) -> Array:
    if batch_dims:
        out = np.take_along_axis(data, indices.positions, axis=axis)
        out[~indices.valid] = 0
        return out
    out = np.take(data, indices.positions, axis=axis)
    index: list[Any] = [slice(None)] * data.ndim
    index[axis] = ~indices.valid
    out[tuple(index)] = 0
    return out


#: Row labels of the kernel tables, in order: (key, label, kind) with kind anchor, ours (held to
#: the targets: at or below OpenVINO, within FLOOR_TARGET of the byte floor), alloc (ours into a
#: new output: what its page faults add, for reference), request (plan + kernel through the
#: registry, as one request runs them: the small-kernel target) or openvino.
KERNEL_CASES = [
    ("copy", "a.copy()", "anchor"),
    ("copyto", "np.copyto(pre, a)", "anchor"),
    ("np_roll", "np.roll, axes 0 and 1", "anchor"),
    ("np_take0", "np.take, axis 0", "anchor"),
    ("np_take1", "np.take, axis 1 (inner)", "anchor"),
    ("np_take_along", "np.take_along_axis, axis 1", "anchor"),
    ("roll0", "roll, axis 0", "ours"),
    ("roll_last", "roll, last axis", "ours"),
    ("roll_both", "roll, both axes", "ours"),
    ("gather0", "gather, axis 0", "ours"),
    ("gather1", "gather, axis 1 (inner)", "ours"),
    ("gather_bd1", "gather, axis 1, batch_dims=1", "ours"),
    ("roll_new", "roll, both axes, new output", "alloc"),
    ("gather1_new", "gather, axis 1, new output", "alloc"),
    ("req_roll", "plan+kernel: roll, both axes", "request"),
    ("req_gather0", "plan+kernel: gather, axis 0", "request"),
    ("req_gather1", "plan+kernel: gather, axis 1", "request"),
    ("req_gather_bd1", "plan+kernel: gather, batch_dims=1", "request"),
    ("ov_roll", "OpenVINO roll, both axes", "openvino"),
    ("ov_gather0", "OpenVINO gather, axis 0", "openvino"),
    ("ov_gather1", "OpenVINO gather, axis 1", "openvino"),
    ("ov_gather_bd1", "OpenVINO gather, batch_dims=1", "openvino"),
]
#: Each of our rows and the OpenVINO row it is held to.
OPENVINO_TWIN = {
    "roll0": "ov_roll",
    "roll_last": "ov_roll",
    "roll_both": "ov_roll",
    "gather0": "ov_gather0",
    "gather1": "ov_gather1",
    "gather_bd1": "ov_gather_bd1",
}
#: Our rows' time against the byte floor: at most this many times it.
FLOOR_TARGET = 1.5


def request_call(name: str, arrays: dict[str, Array], batch_dims: int, out: Array) -> Thunk:
    """What one request spends in the kernels: the registry's plan (the spec's checks), then
    the plan run into the response buffer (``out``), as app.pipeline.jobs runs them."""
    op = REGISTRY[name]
    attributes = {"batch_dims": batch_dims} if name == "gather" else {}

    def call() -> Array:
        planned = op.plan(arrays, attributes)
        assert isinstance(planned, Plan)  # roll and gather have one output
        return planned.run(out)

    return call


def kernel_cases(
    data: Array, rng: np.random.Generator, openvino: OpenVino | None
) -> tuple[list[tuple[str, Thunk]], dict[str, int]]:
    """The calls to time on ``data`` (2-D), each checked once against NumPy first, and the bytes
    each of ours must move: the data it reads, the indices, the output it writes."""
    rows, cols = data.shape
    shifts = [rows // 3 + 1, -(cols // 5 + 1)]
    pre = np.empty_like(data)
    rows_indices = make_indices(rng, rows, (rows,))
    cols_indices = make_indices(rng, cols, (cols,))
    batch_indices = make_indices(rng, cols, (rows, cols))
    expected_roll = np.roll(data, shifts, (0, 1))
    both = np.array(shifts, dtype=np.int64), np.array([0, -1], dtype=np.int64)
    roll_arrays = {"data": data, "shift": both[0], "axes": both[1]}

    def gather_arrays(indices: Indices, axis: int) -> dict[str, Array]:
        return {"data": data, "indices": indices.ours, "axis": np.array(axis, dtype=np.int64)}

    cases: list[tuple[str, Thunk, Array | None]] = [
        ("copy", data.copy, None),
        ("copyto", lambda: np.copyto(pre, data), None),
        ("np_roll", lambda: np.roll(data, shifts, (0, 1)), None),
        ("np_take0", lambda: np.take(data, rows_indices.positions, axis=0), None),
        ("np_take1", lambda: np.take(data, cols_indices.positions, axis=1), None),
        (
            "np_take_along",
            lambda: np.take_along_axis(data, batch_indices.positions, axis=1),
            None,
        ),
        ("roll0", lambda: roll(data, shifts[0], 0, out=pre), np.roll(data, shifts[0], 0)),
        ("roll_last", lambda: roll(data, shifts[1], -1, out=pre), np.roll(data, shifts[1], 1)),
        ("roll_both", lambda: roll(data, shifts, [0, -1], out=pre), expected_roll),
        (
            "gather0",
            lambda: gather(data, rows_indices.ours, 0, out=pre),
            expected_gather(data, rows_indices, 0, 0),
        ),
        (
            "gather1",
            lambda: gather(data, cols_indices.ours, 1, out=pre),
            expected_gather(data, cols_indices, 1, 0),
        ),
        (
            "gather_bd1",
            lambda: gather(data, batch_indices.ours, 1, batch_dims=1, out=pre),
            expected_gather(data, batch_indices, 1, 1),
        ),
        ("roll_new", lambda: roll(data, shifts, [0, -1]), expected_roll),
        (
            "gather1_new",
            lambda: gather(data, cols_indices.ours, 1),
            expected_gather(data, cols_indices, 1, 0),
        ),
        ("req_roll", request_call("roll", roll_arrays, 0, pre), expected_roll),
        (
            "req_gather0",
            request_call("gather", gather_arrays(rows_indices, 0), 0, pre),
            expected_gather(data, rows_indices, 0, 0),
        ),
        (
            "req_gather1",
            request_call("gather", gather_arrays(cols_indices, 1), 0, pre),
            expected_gather(data, cols_indices, 1, 0),
        ),
        (
            "req_gather_bd1",
            request_call("gather", gather_arrays(batch_indices, 1), 1, pre),
            expected_gather(data, batch_indices, 1, 1),
        ),
    ]
    if openvino is not None and data.dtype in openvino.types:
        cases += [
            ("ov_roll", openvino.roll(data, shifts, [0, 1]), expected_roll),
            (
                "ov_gather0",
                openvino.gather(data, rows_indices.positions, 0, 0),
                np.take(data, rows_indices.positions, axis=0),
            ),
            (
                "ov_gather1",
                openvino.gather(data, cols_indices.positions, 1, 0),
                np.take(data, cols_indices.positions, axis=1),
            ),
            (
                "ov_gather_bd1",
                openvino.gather(data, batch_indices.positions, 1, 1),
                np.take_along_axis(data, batch_indices.positions, axis=1),
            ),
        ]
    for name, call, expected in cases:
        if expected is not None:
            actual = np.asarray(call())
            if actual.shape != expected.shape or not np.array_equal(
                actual.view(np.uint8), expected.view(np.uint8)
            ):
                raise AssertionError(f"{name} on {data.dtype} {data.shape} gave a wrong answer")
    moved = {
        "roll0": 2 * data.nbytes,
        "roll_last": 2 * data.nbytes,
        "roll_both": 2 * data.nbytes,
        "gather0": 2 * data.nbytes + rows_indices.ours.nbytes,
        "gather1": 2 * data.nbytes + cols_indices.ours.nbytes,
        "gather_bd1": 2 * data.nbytes + batch_indices.ours.nbytes,
    }
    return [(name, call) for name, call, _ in cases], moved


def bench_kernels(config: "Config", openvino: OpenVino | None) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    columns: list[tuple[np.dtype[Any], int]] = [
        (np.dtype(np.float32), size) for size in config.kernel_sizes
    ]
    columns += [(np.dtype(dtype), config.typed_size) for dtype in ("int8", "float64")]
    results: dict[str, Any] = {}
    for dtype, nbytes in columns:
        shape = square_shape(nbytes, dtype.itemsize)
        if dtype.kind == "f":
            data = rng.standard_normal(shape).astype(dtype)
        else:
            data = rng.integers(-128, 128, size=shape).astype(dtype)
        cases, moved = kernel_cases(data, rng, openvino)
        small = nbytes <= 64 * KiB
        number = max(1, min(500, (2 * MiB) // nbytes))
        medians = interleaved(
            cases,
            number=number,
            rounds=config.small_rounds if small else config.kernel_rounds,
            min_rounds=3,
            budget=config.kernel_budget,
        )
        key = f"{dtype.name} {size_label(nbytes)}"
        results[key] = {
            "dtype": dtype.name,
            "nbytes": nbytes,
            "shape": list(shape),
            "calls_per_sample": number,
            "seconds": medians,
            "moved_bytes": moved,
        }
        print(f"  kernels {key:>16} {shape}: done", file=sys.stderr, flush=True)
        del data, cases
    return results


def floor_seconds(item: dict[str, Any], case: str) -> float:
    """The byte floor of one of our rows: np.copyto's time for the bytes the op must read and
    write. np.copyto(pre, a) reads and writes a's bytes (2 x nbytes moved); the op moves
    ``moved_bytes``: its data read, its indices, its output written."""
    copyto = float(item["seconds"]["copyto"])
    return copyto * int(item["moved_bytes"][case]) / (2 * int(item["nbytes"]))


def print_kernels(results: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(results)
    labels = [label for _, label, _ in KERNEL_CASES]
    width = max(map(len, labels))
    medians, ratios = [], []
    for case, label, _ in KERNEL_CASES:
        row_m, row_r = [label], [label]
        for key in keys:
            seconds = results[key]["seconds"]
            if case in seconds:
                row_m.append(time_label(seconds[case]))
                row_r.append(f"{seconds[case] / seconds['copy']:.2f}x")
            else:
                row_m += ["-"]
                row_r += ["-"]
        medians.append(row_m)
        ratios.append(row_r)
    print("\nMedian time per call")
    print(table(["case", *keys], medians, width))
    print("\nRatio to a.copy() of the same tensor (1.00x = as fast as a copy)")
    print(table(["case", *keys], ratios, width))

    floors, versus, targets = [], [], []
    for case, label, kind in KERNEL_CASES:
        if kind != "ours":
            continue
        row_f, row_o = [label], [label]
        for key in keys:
            item = results[key]
            seconds = item["seconds"][case]
            to_floor = seconds / floor_seconds(item, case)
            row_f.append(f"{to_floor:.2f}x")
            met = to_floor <= FLOOR_TARGET
            targets.append(
                {
                    "target": f"{label}, {key}: <= {FLOOR_TARGET}x byte floor",
                    "figure": f"{to_floor:.2f}x",
                    "met": met,
                }
            )
            twin = item["seconds"].get(OPENVINO_TWIN[case])
            if twin is None:
                row_o.append("-")
                continue
            to_openvino = seconds / twin
            row_o.append(f"{to_openvino:.2f}x")
            targets.append(
                {
                    "target": f"{label}, {key}: <= OpenVINO",
                    "figure": f"{to_openvino:.2f}x",
                    "met": to_openvino <= 1,
                }
            )
        floors.append(row_f)
        versus.append(row_o)
    print(
        "\nRatio to the byte floor: np.copyto's time for the bytes the op must read and write "
        f"(data read,\nindices read, output written; target <= {FLOOR_TARGET}x). Ours write into "
        "a preallocated output (out=), as the\nservice's kernels write into the response buffer "
        "and OpenVINO's infer() reuses its output tensor."
    )
    print(table(["case", *keys], floors, width))
    print("\nRatio to OpenVINO's CPU plugin on the same tensor (target <= 1.00x; float32 only)")
    print(table(["case", *keys], versus, width))
    return targets


def print_small_kernels(results: dict[str, Any]) -> list[dict[str, Any]]:
    key = next((k for k in results if results[k]["nbytes"] == 4 * KiB), None)
    if key is None:
        return []
    seconds = results[key]["seconds"]
    rows, targets = [], []
    for case, label, kind in KERNEL_CASES:
        if case not in seconds:
            continue
        micro = seconds[case] * 1e6
        target = ""
        if kind == "request":
            met = micro <= SMALL_KERNEL_TARGET_US
            target = f"<= {SMALL_KERNEL_TARGET_US:.0f} us: {verdict(met)}"
            targets.append(
                {
                    "target": f"4 KiB {label} <= {SMALL_KERNEL_TARGET_US:.0f} us",
                    "figure": f"{micro:.1f} us",
                    "met": met,
                }
            )
        rows.append([label, f"{micro:.1f}", target])
    print(
        f"\nSmall tensors: {key} {tuple(results[key]['shape'])}, microseconds per call "
        f"(median of samples of {results[key]['calls_per_sample']} calls); plan+kernel: the "
        "registry's\nplan (the spec's checks) and kernel into a response buffer, what one request "
        "spends in the kernels"
    )
    print(table(["case", "us/call", "target"], rows))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 2: codecs


def bench_codecs(config: "Config") -> dict[str, Any]:
    shape = square_shape(config.large_size, 4)
    data = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    raw = npy_bytes(data)
    text = base64.b64encode(raw)
    pre = np.empty_like(data)
    assert np.array_equal(decode_npy_base64(memoryview(text)), data)
    assert np.array_equal(decode_npy(raw), data)

    def encode_pieces() -> list[bytes]:
        # The service's path (app/api/tensors.py encode_output): the kernel fills the data part
        # of a ready .npy buffer (here a copy), then it is base64-encoded piece by piece as the
        # response is sent; each piece goes to the socket and is dropped, never joined.
        buffer, target = npy_buffer(data.shape, data.dtype)
        np.copyto(target, data)
        return list(Base64Stream(buffer))

    def encode_base64() -> int:
        buffer, target = npy_buffer(data.shape, data.dtype)
        np.copyto(target, data)
        return sum(len(piece) for piece in Base64Stream(buffer))

    assert b"".join(encode_pieces()) == text
    cases: list[tuple[str, Thunk]] = [
        ("copyto", lambda: np.copyto(pre, data)),
        ("b64_decode", lambda: decode_npy_base64(memoryview(text))),
        ("b64_encode", encode_base64),
        ("npy_decode", lambda: decode_npy(raw)),
        ("npy_encode", lambda: encode_npy(data)),
    ]
    medians = interleaved(
        cases, number=1, rounds=config.kernel_rounds, min_rounds=3, budget=config.kernel_budget
    )
    return {"nbytes": data.nbytes, "shape": list(shape), "seconds": medians}


CODEC_LABELS = {
    "copyto": "np.copyto(pre, a) (anchor)",
    "b64_decode": "base64 .npy decode (decode_npy_base64)",
    "b64_encode": "base64 .npy encode (npy_buffer, fill, Base64Stream)",
    "npy_decode": "raw .npy decode (decode_npy, zero-copy)",
    "npy_encode": "raw .npy encode (npy_buffer, fill = encode_npy)",
}


def print_codecs(results: dict[str, Any]) -> None:
    seconds = results["seconds"]
    rows = []
    for key, label in CODEC_LABELS.items():
        value = seconds[key]
        rows.append(
            [
                label,
                time_label(value),
                f"{results['nbytes'] / value / 1e6:.0f}",
                f"{value / seconds['copyto']:.2f}x",
            ]
        )
    print(f"\nCodecs on {size_label(results['nbytes'])} float32 {tuple(results['shape'])}")
    print(table(["codec", "median", "MB/s", "vs np.copyto"], rows))


# ----------------------------------------------------------------------------------------------
# Servers and the raw HTTP client


class RawHttp:
    """One keep-alive HTTP/1.1 connection: requests sent with ``sendall``, answers read with
    ``recv_into`` a buffer kept from one request to the next (Content-Length answers only)."""

    def __init__(self, url: str, timeout: float = 300) -> None:
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buffer = bytearray(64 * KiB)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.sock

    def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], memoryview]:
        """Send one POST and read the whole answer; the body view is valid until the next call."""
        sock = self._connect()
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.address[0]}:{self.address[1]}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            if len(body) <= 64 * KiB:
                sock.sendall(head + body)
            else:
                sock.sendall(head)
                sock.sendall(body)
            return self._read(sock)
        except BaseException:
            self.close()
            raise

    def _read(self, sock: socket.socket) -> tuple[int, dict[str, str], memoryview]:
        received = b""
        for _ in range(1024):  # the head is at most 64 KiB
            end = received.find(b"\r\n\r\n")
            if end >= 0:
                break
            chunk = sock.recv(64 * KiB)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            received += chunk
        else:
            raise ConnectionError("no end of the response head")
        status_line, *header_lines = received[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise ConnectionError(f"no Content-Length in the answer: {status_line}")
        length = int(headers["content-length"])
        if len(self.buffer) < length:
            self.buffer = bytearray(length)
        view = memoryview(self.buffer)[:length]
        rest = received[end + 4 :]
        view[: len(rest)] = rest
        got = len(rest)
        while got < length:
            count = sock.recv_into(view[got:], min(length - got, 4 * MiB))
            if count == 0:
                raise ConnectionError("the server closed the connection mid-answer")
            got += count
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(status_line.split()[1]), headers, view


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used so far (from /proc; 0 for one gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def settle(pid: int, most: float = 60.0) -> None:
    """Wait until a server just started is idle (under 2% of a core for half a second): its
    workers answer before their kernels are loaded (compiled, or read from numba's cache in the
    background), and a load measured over that work measures the start, not the requests."""
    deadline = time.monotonic() + most
    while time.monotonic() < deadline:
        pids = [pid, *descendants(pid)]
        before = cpu_seconds(pids)
        time.sleep(0.5)
        if cpu_seconds(pids) - before < 0.01:
            return


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (from /proc)."""
    found: list[int] = []
    pending = [pid]
    while pending and len(found) < 256:
        current = pending.pop()
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in children.read_text().split():
                    found.append(int(child))
                    pending.append(int(child))
    return found


@contextlib.contextmanager
def server(env: dict[str, str], command: list[str] | None = None) -> Iterator[tuple[str, int]]:
    """A server started by ``launch_server``; yields its URL and pid. Stopped with SIGTERM (then
    SIGKILL), and so are the worker processes it started."""
    url, process = launch_server(env, command)
    settle(process.pid)
    try:
        yield url, process.pid
    finally:
        children = descendants(process.pid)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        output = server_output(process)
        stop_server(process)
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if "Traceback" in output:
            print(f"server {command or 'uvicorn'} wrote a traceback:\n{output[-3000:]}")


def echo_command(*options: str) -> list[str]:
    """The echo app under ``python -m uvicorn``'s own command line (see echo_app.main)."""
    return ["-m", "tests.benchmarks.echo_app", *options]


# ----------------------------------------------------------------------------------------------
# Section 3: end to end over HTTP


@dataclass
class Transport:
    key: str
    label: str
    path: str
    body: bytes
    headers: dict[str, str]
    decode: Callable[[dict[str, str], memoryview], Array]
    target: float


ROLL_SHIFT, ROLL_AXES = [3, -7], [0, 1]


def transports(data: Array) -> list[Transport]:
    """The roll of ``data`` by (3, -7) along (0, 1) as each transport sends it."""
    shift, axes = np.array(ROLL_SHIFT), np.array(ROLL_AXES)
    json_body = orjson.dumps(
        {
            "data": npy_b64(data),
            "shift": ROLL_SHIFT,
            "axes": ROLL_AXES,
        }
    )
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "data",
                    "shape": list(data.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": data.nbytes},
                },
                {
                    "name": "shift",
                    "shape": [2],
                    "datatype": "INT64",
                    "parameters": {"binary_data_size": 16},
                },
                {
                    "name": "axes",
                    "shape": [2],
                    "datatype": "INT64",
                    "parameters": {"binary_data_size": 16},
                },
            ],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
        }
    )

    def from_json(_: dict[str, str], body: memoryview) -> Array:
        answer = orjson.loads(body)
        array: Array = np.load(io.BytesIO(base64.b64decode(answer["data"])), allow_pickle=False)
        return array

    def from_npy(_: dict[str, str], body: memoryview) -> Array:
        array: Array = np.load(io.BytesIO(bytes(body)), allow_pickle=False)
        return array

    def from_v2(headers: dict[str, str], body: memoryview) -> Array:
        length = int(headers["inference-header-content-length"])
        return np.frombuffer(bytes(body[length:]), dtype="<f4").reshape(data.shape)

    json_type = {"content-type": "application/json"}
    return [
        Transport(
            "json", "JSON, base64 .npy in and out", "/roll", json_body, json_type, from_json,
            JSON_TARGET,
        ),
        Transport(
            "json_npy", "JSON, base64 .npy in, Accept: .npy", "/roll", json_body,
            {**json_type, "accept": "application/x-npy"}, from_npy, JSON_TARGET,
        ),
        Transport(
            "npz", ".npz in, raw .npy out", "/roll",
            npz_bytes(data=data, shift=shift, axes=axes),
            {"content-type": "application/x-npz"}, from_npy, RAW_TARGET,
        ),
        Transport(
            "v2", "/v2 binary tensors", "/v2/models/roll/infer",
            head + data.tobytes() + shift.tobytes() + axes.tobytes(),
            {"content-type": "application/octet-stream",
             "inference-header-content-length": str(len(head))},
            from_v2, RAW_TARGET,
        ),
    ]  # fmt: skip


def time_request(client: RawHttp, path: str, body: bytes, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    status, _, _ = client.post(path, body, headers)
    elapsed = time.perf_counter() - start
    if status != 200:
        raise AssertionError(f"POST {path} answered {status}")
    return elapsed


def check_transport(service: RawHttp, echo: RawHttp, transport: Transport, data: Array) -> int:
    """Check the service's answer and the echo once (untimed); return the answer's size."""
    status, headers, body = service.post(transport.path, transport.body, transport.headers)
    if status != 200:
        raise AssertionError(f"{transport.label}: {status} {bytes(body[:300])!r}")
    answer = transport.decode(headers, body)
    if not np.array_equal(answer, np.roll(data, ROLL_SHIFT, ROLL_AXES)):
        raise AssertionError(f"{transport.label}: wrong answer")
    size = len(body)
    status, _, echoed = echo.post("/echo", transport.body, transport.headers)
    if status != 200 or echoed != transport.body:
        raise AssertionError(f"echo of {transport.label}: not the same bytes")
    return size


def bench_http(config: "Config") -> dict[str, Any]:
    results: dict[str, Any] = {"client": "raw-socket HTTP/1.1 keep-alive (this file's RawHttp)"}
    sweep: dict[str, Any] = {}
    rng = np.random.default_rng(11)
    with (
        server(SERVICE_ENV) as (service_url, _),
        server(SERVICE_ENV, echo_command()) as (echo_url, _),
    ):
        service, echo = RawHttp(service_url), RawHttp(echo_url)
        for nbytes in config.http_sizes:
            data = rng.standard_normal(square_shape(nbytes, 4)).astype(np.float32)
            cases = transports(data)
            answer_bytes = {t.key: check_transport(service, echo, t, data) for t in cases}
            samples: dict[str, list[float]] = {f"{t.key}{s}": [] for t in cases for s in ("", "@")}
            main = nbytes == config.large_size
            rounds = config.http_rounds if main else config.http_sweep_rounds
            deadline = time.monotonic() + (config.http_budget if main else config.sweep_budget)
            for round_ in range(rounds):
                for transport in cases if round_ % 2 == 0 else cases[::-1]:
                    pair = [
                        (transport.key, service, transport.path),
                        (transport.key + "@", echo, "/echo"),
                    ]
                    for key, client, path in pair if round_ % 2 == 0 else pair[::-1]:
                        samples[key].append(
                            time_request(client, path, transport.body, transport.headers)
                        )
                if round_ >= 2 and time.monotonic() > deadline:
                    break
            entry: dict[str, Any] = {"shape": list(data.shape), "rounds": round_ + 1}
            for transport in cases:
                entry[transport.key] = {
                    "label": transport.label,
                    "request_bytes": len(transport.body),
                    "answer_bytes": answer_bytes[transport.key],
                    "seconds": statistics.median(samples[transport.key]),
                    "echo_seconds": statistics.median(samples[transport.key + "@"]),
                    "target": transport.target,
                }
            sweep[str(nbytes)] = entry
            print(f"  http {size_label(nbytes)}: done", file=sys.stderr, flush=True)
        service.close()
        echo.close()
    results["sizes"] = sweep
    return results


def print_http(results: dict[str, Any], config: "Config") -> list[dict[str, Any]]:
    entry = results["sizes"][str(config.large_size)]
    keys = [key for key in entry if isinstance(entry[key], dict)]
    rows, targets = [], []
    for key in keys:
        item = entry[key]
        ratio = item["seconds"] / item["echo_seconds"]
        met = ratio <= item["target"]
        rows.append(
            [
                item["label"],
                f"{item['request_bytes'] / MiB:.1f}",
                f"{item['answer_bytes'] / MiB:.1f}",
                f"{item['seconds'] * 1e3:.0f}",
                f"{item['echo_seconds'] * 1e3:.0f}",
                f"{ratio:.2f}x",
                f"<= {item['target']}x: {verdict(met)}",
            ]
        )
        targets.append(
            {
                "target": f"HTTP {item['label']} <= {item['target']}x echo",
                "figure": f"{ratio:.2f}x ({item['seconds'] * 1e3:.0f} ms vs echo "
                f"{item['echo_seconds'] * 1e3:.0f} ms)",
                "met": met,
            }
        )
    print(
        f"\nEnd to end: roll of {size_label(config.large_size)} float32 {tuple(entry['shape'])} "
        f"by {ROLL_SHIFT} along {ROLL_AXES}, one uvicorn worker, median of {entry['rounds']} "
        "(send + full answer read;\n  the client's decoding excluded); echo = POST /echo of the "
        f"same request bytes to the bare FastAPI app. Client: {results['client']}"
    )
    print(table(["transport", "in MiB", "out MiB", "ms", "echo ms", "vs echo", "target"], rows))
    rows = []
    for nbytes, item in results["sizes"].items():
        row = [size_label(int(nbytes))]
        for key in keys:
            row.append(
                f"{time_label(item[key]['seconds'])} / {item[key]['seconds'] / item[key]['echo_seconds']:.2f}x"
            )
        rows.append(row)
    print("\nSizes sweep: median time / ratio to the echo of the same bytes")
    print(table(["size", *[entry[key]["label"] for key in keys]], rows))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 3b: the server-side stages of the same requests, timed in this process


def chunked(body: bytes, size: int = 256 * KiB) -> list[bytes]:
    """``body`` in the pieces uvicorn hands over (uvloop reads up to 256 KiB at a time)."""
    return [body[start : start + size] for start in range(0, len(body), size)]


def grow(chunks: list[bytes]) -> bytearray:
    """What read_body (app/http/body.py) does with the chunks: one growing bytearray."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
    return body


def bench_stages(config: "Config") -> dict[str, Any]:
    data = np.random.default_rng(5).standard_normal(square_shape(config.large_size, 4))
    data = data.astype(np.float32)
    settings = Settings(max_body_bytes=1 << 30, max_output_bytes=1 << 31)
    limits = Limits.of(settings)
    op = REGISTRY["roll"]
    bodies = {t.key: t for t in transports(data)}
    chunks = {key: chunked(bodies[key].body) for key in ("json", "npz", "v2")}
    json_body = bytearray(bodies["json"].body)
    npz_body = bytearray(bodies["npz"].body)
    v2 = bodies["v2"]
    v2_body = bytearray(v2.body)
    header_length = v2.headers["inference-header-content-length"]

    def decoded(exchange: Exchange, body: Any) -> Any:
        # The pipeline's first stages, as it runs them: a first look, then decode and check.
        exchange.prepare(body)
        return exchange, exchange.decode(limits)

    json_exchange, job = decoded(JsonExchange(op, raw_npy=False), json_body)
    json_npy_exchange, _ = decoded(JsonExchange(op, raw_npy=True), json_body)
    npz_exchange, npz_job = decoded(NpzExchange(op, {}, settings.max_body_bytes), npz_body)
    v2_exchange, v2_job = decoded(V2Exchange(op, header_length), v2_body)
    pre = np.empty_like(data)
    cases: list[tuple[str, Thunk]] = [
        ("kernel", lambda: roll(data, ROLL_SHIFT, ROLL_AXES)),
        ("copyto", lambda: np.copyto(pre, data)),
        ("json_parse", lambda: decoded(JsonExchange(op, raw_npy=False), json_body)),
        ("json_encode", lambda: json_exchange.encode(job)),
        ("json_encode_npy", lambda: json_npy_exchange.encode(job)),
        ("npz_inflated", lambda: NpzExchange(op, {}, 1 << 30).prepare(npz_body)),
        ("npz_parse", lambda: decoded(NpzExchange(op, {}, 1 << 30), npz_body)),
        ("npz_encode", lambda: npz_exchange.encode(npz_job)),
        ("v2_parse", lambda: decoded(V2Exchange(op, header_length), v2_body)),
        ("v2_encode", lambda: v2_exchange.encode(v2_job)),
    ]
    for key, pieces in chunks.items():
        cases.append((f"{key}_grow", functools.partial(grow, pieces)))
        cases.append((f"{key}_join", functools.partial(b"".join, pieces)))
    medians = interleaved(
        cases, number=1, rounds=config.kernel_rounds, min_rounds=3, budget=config.kernel_budget
    )
    return {"nbytes": data.nbytes, "seconds": medians}


GROW = "(simulated) read_body: bytearray += 256 KiB chunks"
STAGES = {
    "json": [
        ("json_grow", GROW),
        ("json_parse", "JsonExchange prepare + decode (JSON envelope, base64 decode, checks)"),
        ("json_encode", "JsonExchange.encode (kernel into .npy buffer, base64 encode)"),
    ],
    "json_npy": [
        ("json_grow", GROW),
        ("json_parse", "JsonExchange prepare + decode"),
        ("json_encode_npy", "JsonExchange.encode, raw .npy (kernel into .npy buffer)"),
    ],
    "npz": [
        ("npz_grow", GROW),
        ("npz_inflated", "NpzExchange.prepare (the zip directory's declared sizes)"),
        ("npz_parse", "NpzExchange prepare + decode (zip directory, CRC-32, zero-copy .npy)"),
        ("npz_encode", "NpzExchange.encode (kernel into .npy buffer)"),
    ],
    "v2": [
        ("v2_grow", GROW),
        ("v2_parse", "V2Exchange prepare + decode (JSON header, zero-copy binary)"),
        ("v2_encode", "V2Exchange.encode (kernel into the output buffer)"),
    ],
}


def print_stages(stages: dict[str, Any], http: dict[str, Any], config: "Config") -> None:
    seconds = stages["seconds"]
    entry = http["sizes"][str(config.large_size)]
    print(
        f"\nWhere the time goes ({size_label(config.large_size)}): the server's stages timed in "
        "this process (medians); the rest of the HTTP time is the\nsocket reads and writes "
        "and the framework, which the echo pays too (its own body handling is one b''.join "
        "of the chunks).\n"
        f"Kernel alone (roll, 2 axes): {time_label(seconds['kernel'])}; "
        f"np.copyto: {time_label(seconds['copyto'])}"
    )
    rows = []
    for key, stages_of in STAGES.items():
        total = 0.0
        for stage, label in stages_of:
            rows.append(
                [entry[key]["label"] if not total else "", label, time_label(seconds[stage])]
            )
            total += seconds[stage]
        body = stages_of[0][0].replace("_grow", "_join")
        http_time, echo_time = entry[key]["seconds"], entry[key]["echo_seconds"]
        rows += [
            ["", "= stages in process", time_label(total)],
            ["", "HTTP total - stages", time_label(http_time - total)],
            ["", "echo: HTTP total", time_label(echo_time)],
            ["", "echo: (simulated) b''.join of the chunks", time_label(seconds[body])],
            ["", "echo: HTTP total - join", time_label(echo_time - seconds[body])],
        ]
    print(table(["transport", "stage", "median"], rows, left=2))


# ----------------------------------------------------------------------------------------------
# Section 4: small requests under load


WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def parse_wrk(output: str) -> dict[str, float]:
    def seconds(text: str) -> float:
        match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
        if match is None:
            raise ValueError(f"unexpected wrk duration {text!r}")
        return float(match[1]) * _UNITS[match[2]]

    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    if rps is None or p50 is None or p99 is None:
        raise ValueError(f"cannot read wrk's output:\n{output}")
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(r"Socket errors:.*", output)
    return {
        "rps": float(rps[1]),
        "p50": seconds(p50[1]),
        "p99": seconds(p99[1]),
        "non_2xx": float(errors[1]) if errors else 0.0,
        "socket_errors": 1.0 if socket_errors else 0.0,
    }


def run_wrk(url: str, seconds: int, connections: int, script: str) -> dict[str, float]:
    command = [
        WRK, "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "5s",
        "-s", script, url,
    ]  # fmt: skip
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, timeout=seconds + 30
    )
    return parse_wrk(done.stdout)


def run_httpx_load(
    url: str, seconds: int, connections: int, body: bytes = SMALL_BODY
) -> dict[str, float]:
    """The fallback without wrk: ``connections`` asyncio httpx clients for ``seconds``."""

    async def load() -> tuple[list[float], float, int]:
        latencies: list[float] = []
        failures = 0
        limits = httpx.Limits(max_connections=connections)
        async with httpx.AsyncClient(limits=limits, timeout=5) as client:
            deadline = time.monotonic() + seconds

            async def worker() -> None:
                nonlocal failures
                for _ in range(1_000_000):
                    if time.monotonic() > deadline:
                        return
                    start = time.perf_counter()
                    reply = await client.post(
                        url, content=body, headers={"content-type": "application/json"}
                    )
                    latencies.append(time.perf_counter() - start)
                    failures += reply.status_code != 200

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(connections)))
            return latencies, time.perf_counter() - start, failures

    latencies, elapsed, failures = asyncio.run(load())
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "non_2xx": float(failures),
        "socket_errors": 0.0,
    }


def bench_small(config: "Config") -> dict[str, Any]:
    use_wrk = Path(WRK).exists()
    results: dict[str, Any] = {
        "tool": f"wrk -t1 -c{config.connections} -d{config.load_seconds}s --latency"
        if use_wrk
        else f"asyncio httpx, {config.connections} connections, {config.load_seconds} s",
        "workers": {},
    }
    with tempfile.TemporaryDirectory(prefix="tensor-ops-bench-") as folder:
        scripts = {}
        for name, (_, body, _) in SMALL_CASES.items():
            scripts[name] = str(Path(folder) / f"{name.replace(' ', '-')}.lua")
            Path(scripts[name]).write_text(WRK_SCRIPT.format(body=body.decode()))
        scripts["constant"] = scripts["roll"]
        scripts["echo roll"] = scripts["roll"]
        for workers in (1, 2):
            env = {**SERVICE_ENV, "TENSOR_OPS_WORKERS": str(workers)}
            options = ["--workers", str(workers), "--no-access-log", "--log-level", "warning",
                       "--no-server-header"]  # fmt: skip
            with (
                server(env, ["-m", "app"]) as (service_url, service_pid),
                server(SERVICE_ENV, echo_command(*options)) as (echo_url, echo_pid),
            ):
                # Each server's CPU time per request served (its processes, workers included):
                # what a request costs the server, which the machine's other load moves far
                # less than the rate (wrk and the server share its two cores).
                owners = {echo_url: [echo_pid, *descendants(echo_pid)],
                          service_url: [service_pid, *descendants(service_pid)]}  # fmt: skip
                for name, (path, body, expected) in SMALL_CASES.items():
                    status, _, answer = RawHttp(service_url).post(
                        path, body, {"content-type": "application/json"}
                    )
                    if status != 200 or orjson.loads(answer) | {"id": None} != expected | {
                        "id": None
                    }:
                        raise AssertionError(f"small {name}: {status} {bytes(answer)!r}")
                runs: dict[str, list[dict[str, float]]] = {
                    name: [] for name in ("constant", "echo roll", *SMALL_CASES)
                }
                # The bare route between each of ours: every one has an anchor run beside it;
                # the roll has a second, the bare route doing its NumPy call (issue 46's).
                targets = [("constant", echo_url + "/constant")]
                for name, (path, _, _) in SMALL_CASES.items():
                    targets += [(name, service_url + path), ("constant", echo_url + "/constant")]
                    if name == "roll":
                        targets += [("echo roll", echo_url + "/roll")]
                for round_ in range(config.load_rounds):
                    for name, url in targets if round_ % 2 == 0 else targets[::-1]:
                        pids = owners[echo_url if url.startswith(echo_url) else service_url]
                        cpu_before = cpu_seconds(pids)
                        if use_wrk:
                            run = run_wrk(
                                url, config.load_seconds, config.connections, scripts[name]
                            )
                        else:
                            body = SMALL_CASES.get(name, SMALL_CASES["roll"])[1]
                            run = run_httpx_load(url, config.load_seconds, config.connections, body)
                        served = run["rps"] * config.load_seconds
                        run["cpu_us"] = (cpu_seconds(pids) - cpu_before) / max(served, 1) * 1e6
                        runs[name].append(run)
                summary: dict[str, Any] = {}
                for name, values in runs.items():
                    summary[name] = {
                        metric: statistics.median(run[metric] for run in values)
                        for metric in values[0]
                    }
                summary["rounds"] = config.load_rounds
                results["workers"][str(workers)] = summary
            print(f"  small requests, {workers} worker(s): done", file=sys.stderr, flush=True)
    return results


def print_small(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows, targets = [], []
    for workers, summary in results["workers"].items():
        constant = summary["constant"]
        rows.append(
            [
                workers,
                "echo /constant",
                f"{constant['rps']:.0f}",
                f"{constant['p50'] * 1e3:.2f}",
                f"{constant['p99'] * 1e3:.2f}",
                f"{constant['non_2xx']:.0f}",
                "",
                "",
                f"{constant['cpu_us']:.0f}",
                "",
            ]
        )
        bare_roll = summary["echo roll"]
        rows.append(
            [
                "",
                "echo /roll",
                f"{bare_roll['rps']:.0f}",
                f"{bare_roll['p50'] * 1e3:.2f}",
                f"{bare_roll['p99'] * 1e3:.2f}",
                f"{bare_roll['non_2xx']:.0f}",
                f"{bare_roll['rps'] / constant['rps']:.2f}x",
                "",
                f"{bare_roll['cpu_us']:.0f}",
                f"{constant['cpu_us'] / bare_roll['cpu_us']:.2f}x",
            ]
        )
        roll_ratio = summary["roll"]["rps"] / bare_roll["rps"]
        cpu_ratio = bare_roll["cpu_us"] / summary["roll"]["cpu_us"]
        targets.append(
            {
                "target": f"small roll, {workers} worker(s): server CPU a request, echo /roll's "
                "over ours (>= 0.8x: ours within 1.25x)",
                "figure": f"{cpu_ratio:.2f}x ({summary['roll']['cpu_us']:.0f} vs "
                f"{bare_roll['cpu_us']:.0f} us)",
                "met": cpu_ratio >= RPS_TARGET,
            }
        )
        targets.append(
            {
                "target": f"small roll, {workers} worker(s): >= {RPS_TARGET}x RPS of echo /roll "
                "(the same NumPy call on a bare route)",
                "figure": f"{roll_ratio:.2f}x ({summary['roll']['rps']:.0f} vs "
                f"{bare_roll['rps']:.0f} req/s)",
                "met": roll_ratio >= RPS_TARGET,
            }
        )
        for name in SMALL_CASES:
            run = summary[name]
            rps_ratio = run["rps"] / constant["rps"]
            p99_ratio = run["p99"] / constant["p99"]
            rows.append(
                [
                    "",
                    name,
                    f"{run['rps']:.0f}",
                    f"{run['p50'] * 1e3:.2f}",
                    f"{run['p99'] * 1e3:.2f}",
                    f"{run['non_2xx']:.0f}",
                    f"{rps_ratio:.2f}x ({verdict(rps_ratio >= RPS_TARGET)})",
                    f"{p99_ratio:.2f}x ({verdict(p99_ratio <= P99_TARGET)})",
                    f"{run['cpu_us']:.0f}",
                    f"{constant['cpu_us'] / run['cpu_us']:.2f}x",
                ]
            )
            targets.append(
                {
                    "target": f"small {name}, {workers} worker(s): >= {RPS_TARGET}x RPS of "
                    "/constant",
                    "figure": f"{rps_ratio:.2f}x ({run['rps']:.0f} vs {constant['rps']:.0f} req/s)",
                    "met": rps_ratio >= RPS_TARGET,
                }
            )
            targets.append(
                {
                    "target": f"small {name}, {workers} worker(s): p99 <= {P99_TARGET}x /constant",
                    "figure": f"{p99_ratio:.2f}x ({run['p99'] * 1e3:.2f} vs "
                    f"{constant['p99'] * 1e3:.2f} ms)",
                    "met": p99_ratio <= P99_TARGET,
                }
            )
    print(
        "\nSmall requests: a 3-element roll to POST /roll, a 2-index gather to POST /gather and "
        "the roll to POST /v2/models/roll/infer (JSON) against a bare route of the echo app "
        f"that reads the body and answers a constant (POST /constant), and the roll against "
        f"the bare route doing its NumPy call (POST /roll of the echo app); {results['tool']}, "
        f"medians of {next(iter(results['workers'].values()))['rounds']} runs each, "
        f"interleaved. Targets: RPS >= {RPS_TARGET}x, p99 <= {P99_TARGET}x. Server CPU: the "
        "server's processes' CPU time per request served, and /constant's over the row's"
    )
    header = ["workers", "route", "req/s", "p50 ms", "p99 ms", "non-2xx", "req/s ratio"]
    print(table([*header, "p99 ratio", "CPU us/req", "CPU ratio"], rows, left=2))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 5: memory


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux's clear_refs 5); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def bench_memory(config: "Config") -> dict[str, Any]:
    data = np.random.default_rng(13).standard_normal(square_shape(config.large_size, 4))
    cases = transports(data.astype(np.float32))
    warm_ups = transports(np.ones(square_shape(4 * KiB, 4), dtype=np.float32))
    results: dict[str, Any] = {"nbytes": config.large_size, "rows": []}
    kinds = [("service", None)] + ([] if config.smoke else [("echo", echo_command())])
    for transport, warm_up in zip(cases, warm_ups, strict=True):
        for kind, command in kinds:
            with server(SERVICE_ENV, command) as (url, pid):
                client = RawHttp(url)
                path = transport.path if kind == "service" else "/echo"
                # One 4 KiB request of the same transport first: its one-time imports and
                # caches are not the large request's memory.
                client.post(path, warm_up.body, warm_up.headers)
                time.sleep(0.2)
                idle = status_kib(pid, "VmRSS") * KiB
                reset = reset_peak(pid)
                status, _, answer = client.post(path, transport.body, transport.headers)
                client.close()
                if status != 200:
                    raise AssertionError(f"memory, {transport.label}: {status}")
                peak = status_kib(pid, "VmHWM") * KiB
            results["rows"].append(
                {
                    "transport": transport.label,
                    "server": kind,
                    "idle_rss": idle,
                    "peak_rss": peak,
                    "peak_reset": reset,
                    "request_bytes": len(transport.body),
                    "answer_bytes": len(answer),
                    "bound": len(transport.body) + len(answer) + 64 * MiB,
                }
            )
        print(f"  memory, {transport.label}: done", file=sys.stderr, flush=True)
    return results


def print_memory(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows, targets = [], []
    for row in results["rows"]:
        delta = row["peak_rss"] - row["idle_rss"]
        ratio = delta / row["bound"]
        rows.append(
            [
                row["transport"],
                row["server"],
                f"{row['idle_rss'] / MiB:.1f}",
                f"{delta / MiB:.1f}",
                f"{row['request_bytes'] / MiB:.1f} + {row['answer_bytes'] / MiB:.1f} + 64",
                f"{ratio:.2f}x",
                verdict(ratio <= 1) if row["server"] == "service" else "",
            ]
        )
        if row["server"] == "service":
            targets.append(
                {
                    "target": f"memory, {row['transport']}: peak - idle <= in + out + 64 MiB",
                    "figure": f"{delta / MiB:.1f} MiB vs {row['bound'] / MiB:.1f} MiB",
                    "met": ratio <= 1,
                }
            )
    print(
        f"\nMemory: one {size_label(results['nbytes'])} float32 roll on a fresh single-worker "
        "server (after one 4 KiB warm-up\nrequest), peak RSS (VmHWM, reset by clear_refs) minus idle "
        "RSS (VmRSS), in MiB; target: peak - idle <= in + out + 64 MiB"
    )
    headers = ["transport", "server", "idle", "peak - idle", "in + out + 64", "ratio", ""]
    print(table(headers, rows, left=2))
    return targets


# ----------------------------------------------------------------------------------------------
# Section 6: the plot


def plot(kernels: dict[str, Any], http: dict[str, Any], path: Path) -> None:
    # Imported here: only the plot needs it (the `test` extra), and it must get Agg first.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(1, 3, figsize=(19, 6.5), constrained_layout=True)
    f32 = sorted(
        (item for item in kernels.values() if item["dtype"] == "float32"),
        key=lambda item: item["nbytes"],
    )
    colors = [plt.get_cmap("tab10")(index) for index in range(10)]

    def throughput(nbytes: int, seconds: float) -> float:
        return nbytes / seconds / 1e6

    def kernel_line(ax: Any, case: str, label: str, style: str, color: Any, width: float) -> None:
        points = [(i["nbytes"], i["seconds"][case]) for i in f32 if case in i["seconds"]]
        if points:
            ax.plot(
                [p[0] for p in points],
                [throughput(*p) for p in points],
                style,
                color=color,
                label=label,
                linewidth=width,
                markersize=5,
            )

    panels = [
        (
            "Roll kernels, float32 2-D",
            [
                ("copy", "a.copy() (anchor)", "--", "black", 2.2),
                ("copyto", "np.copyto into a ready array", "--", "darkgrey", 1.4),
                ("np_roll", "np.roll, axes 0,1", "-.", "grey", 1.4),
                ("roll0", "roll, axis 0", "o-", colors[0], 1.6),
                ("roll_last", "roll, last axis", "s-", colors[1], 1.6),
                ("roll_both", "roll, both axes", "^-", colors[2], 1.6),
                ("roll_new", "roll, both axes, new output", "v-", colors[3], 1.6),
                ("ov_roll", "OpenVINO CPU roll, both axes", "x:", colors[2], 1.6),
            ],
        ),
        (
            "Gather kernels, float32 2-D",
            [
                ("copy", "a.copy() (anchor)", "--", "black", 2.2),
                ("copyto", "np.copyto into a ready array", "--", "darkgrey", 1.4),
                ("np_take0", "np.take, axis 0", "--", colors[0], 1.0),
                ("np_take1", "np.take, axis 1", "--", colors[1], 1.0),
                ("np_take_along", "np.take_along_axis", "--", colors[2], 1.0),
                ("gather0", "gather, axis 0", "o-", colors[0], 1.6),
                ("gather1", "gather, axis 1", "s-", colors[1], 1.6),
                ("gather_bd1", "gather, batch_dims=1", "^-", colors[2], 1.6),
                ("ov_gather0", "OpenVINO gather, axis 0", "x:", colors[0], 1.6),
                ("ov_gather1", "OpenVINO gather, axis 1", "x:", colors[1], 1.6),
                ("ov_gather_bd1", "OpenVINO gather, batch_dims=1", "x:", colors[2], 1.6),
            ],
        ),
    ]
    for ax, (title, lines) in zip(axes[:2], panels, strict=True):
        for line in lines:
            kernel_line(ax, *line)
        ax.set_title(title)
    ax = axes[2]
    sizes = sorted(http["sizes"].items(), key=lambda item: int(item[0]))
    keys = [key for key, value in sizes[0][1].items() if isinstance(value, dict)]
    for index, key in enumerate(keys):
        label = sizes[0][1][key]["label"]
        x = [int(size) for size, _ in sizes]
        ax.plot(
            x,
            [throughput(int(size), entry[key]["seconds"]) for size, entry in sizes],
            "o-",
            color=colors[index],
            label=label,
            linewidth=1.6,
        )
        ax.plot(
            x,
            [throughput(int(size), entry[key]["echo_seconds"]) for size, entry in sizes],
            "--",
            color=colors[index],
            label=f"echo of the same bytes ({label.split(',')[0]})",
            linewidth=1.2,
            alpha=0.8,
        )
    ax.set_title("Roll over HTTP (1 worker) vs a bare FastAPI echo (dashed)")
    kernel_ticks = sorted(i["nbytes"] for i in f32)
    http_ticks = sorted(int(size) for size in http["sizes"])
    for ax, ticks in zip(axes, [kernel_ticks, kernel_ticks, http_ticks], strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=30)
        ax.set_xlabel("tensor size (float32)")
        ax.set_ylabel("throughput, MB/s of tensor (higher is better)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    figure.suptitle(
        f"tensor-ops benchmark ({os.cpu_count()} cores, {platform.machine()}); medians, "
        "measured side by side with the anchors in one run"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ----------------------------------------------------------------------------------------------
# Configuration and main


@dataclass
class Config:
    smoke: bool
    kernel_sizes: list[int]
    typed_size: int  # int8 and float64 kernels
    large_size: int  # codecs, the main HTTP table, memory
    http_sizes: list[int]
    kernel_rounds: int
    small_rounds: int
    kernel_budget: float
    http_rounds: int
    http_sweep_rounds: int
    http_budget: float
    sweep_budget: float
    load_seconds: int
    load_rounds: int
    connections: int
    openvino_threads: int
    plot_path: Path

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Config":
        if args.smoke:
            return cls(
                smoke=True,
                kernel_sizes=[4 * KiB, 64 * KiB, 1 * MiB],
                typed_size=1 * MiB,
                large_size=1 * MiB,
                http_sizes=[4 * KiB, 64 * KiB, 1 * MiB],
                kernel_rounds=3,
                small_rounds=5,
                kernel_budget=1.0,
                http_rounds=3,
                http_sweep_rounds=3,
                http_budget=2.0,
                sweep_budget=1.0,
                load_seconds=1,
                load_rounds=1,
                connections=args.connections,
                openvino_threads=args.openvino_threads,
                plot_path=args.plot,
            )
        sizes = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB] + ([256 * MiB] if args.big else [])
        return cls(
            smoke=False,
            kernel_sizes=sizes,
            typed_size=64 * MiB,
            large_size=64 * MiB,
            http_sizes=[4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB],
            kernel_rounds=args.repeat,
            small_rounds=max(args.repeat, 25),
            kernel_budget=20.0,
            http_rounds=args.repeat,
            http_sweep_rounds=max(args.repeat, 15),
            http_budget=90.0,
            sweep_budget=20.0,
            load_seconds=args.seconds,
            load_rounds=3,
            connections=args.connections,
            openvino_threads=args.openvino_threads,
            plot_path=args.plot,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, about a minute (CI)")
    parser.add_argument("--big", action="store_true", help="also 256 MiB kernels")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--repeat", type=int, default=7, help="rounds of large measurements")
    parser.add_argument("--seconds", type=int, default=5, help="duration of each wrk run")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections")
    parser.add_argument(
        "--openvino-threads", type=int, default=1, help="CPU plugin threads (NumPy uses 1)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        help="where to write the plot (docs/benchmark.png; with --smoke, the temp directory)",
    )
    parser.add_argument(
        "--only",
        default="kernels,codecs,http,small,memory",
        help="comma-separated sections to run (the plot needs kernels and http)",
    )
    parser.add_argument(
        "--replot", type=Path, help="only redraw the plot from the figures of an earlier --json"
    )
    args = parser.parse_args()
    if args.replot:
        figures = json.loads(args.replot.read_text())
        plot(figures["kernels"], figures["http"], args.plot or ROOT / "docs" / "benchmark.png")
        return
    if args.plot is None:
        smoke_plot = Path(tempfile.gettempdir()) / "tensor-ops-benchmark-smoke.png"
        args.plot = smoke_plot if args.smoke else ROOT / "docs" / "benchmark.png"
    config = Config.from_args(args)
    sections = set(args.only.split(","))
    started = time.monotonic()
    load_before = os.getloadavg()
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
    }
    targets: list[dict[str, Any]] = []
    print(
        f"tensor-ops benchmark{' (smoke)' if config.smoke else ''}: {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.2f}, NumPy {np.__version__}, Python "
        f"{platform.python_version()}"
    )
    if "kernels" in sections:
        openvino = None
        try:
            openvino = OpenVino(config.openvino_threads)
            report["machine"]["openvino"] = openvino.ov.__version__
        except ImportError:
            print("openvino is not installed: its rows are left out")
        report["kernels"] = bench_kernels(config, openvino)
        print(
            "\n== 1. Kernels: 2-D tensors (rows x cols, powers of two), roll shifts "
            "(rows//3+1, -(cols//5+1));\n   gather indices: a permutation (axes 0, 1) or random "
            "(batch_dims=1), 25% negative and 1% out of range for ours,\n   in range for np.take "
            f"and OpenVINO (CPU plugin, {config.openvino_threads} thread(s), f32 precision; "
            "its infer() call included)."
        )
        targets += print_kernels(report["kernels"])
        targets += print_small_kernels(report["kernels"])
    if "codecs" in sections:
        report["codecs"] = bench_codecs(config)
        print("\n== 2. Codecs")
        print_codecs(report["codecs"])
    if "http" in sections:
        report["http"] = bench_http(config)
        report["stages"] = bench_stages(config)
        print("\n== 3. End to end over HTTP")
        targets += print_http(report["http"], config)
        print_stages(report["stages"], report["http"], config)
    if "small" in sections:
        report["small"] = bench_small(config)
        print("\n== 4. Small requests")
        targets += print_small(report["small"])
    if "memory" in sections:
        report["memory"] = bench_memory(config)
        print("\n== 5. Memory")
        targets += print_memory(report["memory"])
    if "kernels" in report and "http" in report:
        plot(report["kernels"], report["http"], config.plot_path)
        print(f"\n== 6. Plot written to {config.plot_path}")
    print("\nTargets (printed, never asserted)")
    print(
        table(
            ["target", "figure", ""],
            [[t["target"], t["figure"], verdict(t["met"])] for t in targets],
        )
    )
    report["targets"] = targets
    report["seconds"] = time.monotonic() - started
    report["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print(
        f"\nDone in {report['seconds']:.0f} s; load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"Figures written to {args.json}")


if __name__ == "__main__":
    main()
