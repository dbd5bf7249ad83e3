"""Mixed load on a real two-worker tensor-ops: valid, hostile and large requests, for a bounded time.

    .venv/bin/python tests/benchmarks/load_test.py --seconds 60            # the real run
    .venv/bin/python tests/benchmarks/load_test.py --seconds 5             # smoke (CI)
    .venv/bin/python tests/benchmarks/load_test.py --json load.json        # figures as JSON too

Starts ``python -m app`` with two uvicorn workers on 127.0.0.1 (``launch_server`` of
``tests/support.py``, ``TENSOR_OPS_MAX_BODY_BYTES`` = 64 MiB so a body declared larger is a
cheap 413), then ``--concurrency`` clients send a weighted mix until ``--seconds`` have passed or
``--max-requests`` have been sent:

- small valid requests: a 3-element roll in JSON, small gathers in JSON, ``/v2`` JSON infers,
  small ``.npz`` bodies of several element types;
- invalid requests: bad JSON (400), axes out of range (422), a wrong content type (415), a body
  declared by ``Content-Length`` above the limit (413, sent over a raw socket without the body),
  a gather whose output is over the output limit (413);
- large valid requests, a few percent: 8 and 16 MiB float32 rolls as ``.npz``, as base64
  ``.npy`` in JSON, and as ``/v2`` binary tensors.

Every answer's status is compared with the one its request must get, and its body is checked
(every ``--verify-every``-th answer of each kind, all by default): outputs bit for bit against
NumPy, errors for their shape and ``type``. The server processes' VmRSS (supervisor and workers,
from ``/proc``) is sampled every 0.2 s. The report gives the duration, requests and requests/s,
latency percentiles (all requests and small valid ones), counts by status and by kind, 5xx,
transport errors, wrong answers and peak RSS; ``--json PATH`` writes the same figures.

Each client keeps one connection alive and sends a request at a time through a small asyncio
HTTP/1.1 client written here: httpx costs about 2.4 ms of CPU a request (30x this one), which on
a 2-core machine is CPU taken from the server. ``--client httpx`` sends the same mix through
httpx, as a cross-check. The load client runs on the same machine as the server: the report gives
the CPU time of both, so the figures can be read for what they are.

Exit status: 0 when there was no 5xx, no transport error, no wrong answer and no worker died;
1 otherwise; 130 when interrupted (Ctrl-C or SIGTERM stops the load, reports and stops the
server; twice aborts). It never asserts a time. The server is stopped with SIGTERM (then SIGKILL
for what is left) on every exit. The requests that failed are saved (body, answer, headers) under
``--failures-dir`` with a curl command that replays them.
"""

import argparse
import asyncio
import contextlib
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pybase64

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support import (  # noqa: E402
    bits_difference,
    launch_server,
    npy_b64,
    npz_bytes,
    server_output,
    stop_server,
)

try:
    import uvloop
except ImportError:  # pragma: no cover - uvicorn[standard] installs it
    uvloop = None  # type: ignore[assignment]

MiB = 1 << 20
MAX_BODY_BYTES = 64 * MiB
MAX_OUTPUT_BYTES = 1 << 30  # the service's default, stated so the 413 cases can be sized
WORKERS = 2
JSON = "application/json"
NPZ = "application/x-npz"
NPY = "application/x-npy"
V2_HEADER = "inference-header-content-length"

Array = npt.NDArray[Any]
#: Checks an answer's headers and body; returns what is wrong with it, or None.
Headers = dict[str, str]  # lower-case names
Check = Callable[[Headers, bytes], str | None]


# --------------------------------------------------------------------------------------------
# Encodings and references


def gather_reference(data: Array, indices: Array, axis: int) -> Array:
    """Gather-8 with batch_dims 0: indices outside [-n, n - 1] give zeros."""
    axis = axis % data.ndim
    size = data.shape[axis]
    wide = indices.astype(np.int64)
    valid = (wide >= -size) & (wide < size)
    taken = np.take(data, np.where(valid, wide, 0), axis=axis)
    mask = valid.reshape((1,) * axis + indices.shape + (1,) * (data.ndim - axis - 1))
    return np.where(mask, taken, np.zeros((), data.dtype)).astype(data.dtype)


def v2_name(dtype: np.dtype[Any]) -> str:
    if dtype == np.bool_:
        return "BOOL"
    letter = {"i": "INT", "u": "UINT", "f": "FP"}[dtype.kind]
    return f"{letter}{dtype.itemsize * 8}"


# --------------------------------------------------------------------------------------------
# Answer checks


def content_type(headers: Headers) -> str:
    return headers.get("content-type", "").split(";")[0].strip().lower()


def expect_json_tensor(expected: Array) -> Check:
    """A JSON-form answer ``{"data": [...], "dtype": ..., "shape": ...}``."""

    def check(headers: Headers, body: bytes) -> str | None:
        reply = orjson.loads(body)
        if reply.get("dtype") != expected.dtype.name:
            return f"dtype {reply.get('dtype')!r} instead of {expected.dtype.name!r}"
        if reply.get("shape") != list(expected.shape):
            return f"shape {reply.get('shape')} instead of {list(expected.shape)}"
        return bits_difference(np.asarray(reply["data"], dtype=expected.dtype), expected)

    return check


def expect_json_npy(expected: Array) -> Check:
    """A JSON answer whose ``data`` is a base64 ``.npy``."""

    def check(headers: Headers, body: bytes) -> str | None:
        reply = orjson.loads(body)
        if reply.get("shape") != list(expected.shape):
            return f"shape {reply.get('shape')} instead of {list(expected.shape)}"
        raw = pybase64.b64decode(reply["data"], validate=True)
        return bits_difference(np.load(io.BytesIO(raw), allow_pickle=False), expected)

    return check


def expect_npy(expected: Array) -> Check:
    """A raw ``.npy`` answer."""

    def check(headers: Headers, body: bytes) -> str | None:
        if content_type(headers) != NPY:
            return f"content type {content_type(headers)!r} instead of {NPY!r}"
        return bits_difference(np.load(io.BytesIO(body), allow_pickle=False), expected)

    return check


def expect_v2(expected: Array, binary: bool) -> Check:
    """A ``/v2`` infer answer, JSON or JSON then binary data."""

    def check(headers: Headers, body: bytes) -> str | None:
        if binary:
            length = int(headers.get(V2_HEADER, "-1"))
            if length < 0:
                return f"no {V2_HEADER} header"
            head, raw = orjson.loads(body[:length]), body[length:]
        else:
            head, raw = orjson.loads(body), b""
        outputs = head.get("outputs") or [{}]
        output = outputs[0]
        if output.get("name") != "output" or output.get("datatype") != v2_name(expected.dtype):
            return f"output {output.get('name')!r} of {output.get('datatype')!r}"
        if output.get("shape") != list(expected.shape):
            return f"shape {output.get('shape')} instead of {list(expected.shape)}"
        if binary:
            if output.get("parameters", {}).get("binary_data_size") != len(raw):
                return "binary_data_size does not match the bytes after the header"
            got = np.frombuffer(raw, dtype=expected.dtype.newbyteorder("<"))
        else:
            got = np.asarray(output.get("data"), dtype=expected.dtype)
        return bits_difference(got.reshape(expected.shape), expected)

    return check


def expect_error(types: set[str] | None, v2: bool = False) -> Check:
    """An error body: FastAPI's ``detail`` list with one of ``types``, or ``/v2``'s ``error``."""

    def check(headers: Headers, body: bytes) -> str | None:
        try:
            reply = orjson.loads(body)
        except orjson.JSONDecodeError:
            return f"error body is not JSON: {body[:80]!r}"
        if v2:
            if not isinstance(reply, dict) or not isinstance(reply.get("error"), str):
                return f"not a V2 error: {body[:120]!r}"
            return None
        detail = reply.get("detail") if isinstance(reply, dict) else None
        if not isinstance(detail, list) or not detail or not isinstance(detail[0], dict):
            return f"not a FastAPI error: {body[:120]!r}"
        if types is not None and detail[0].get("type") not in types:
            return f"error type {detail[0].get('type')!r}, expected one of {sorted(types)}"
        return None

    return check


# --------------------------------------------------------------------------------------------
# The mix


@dataclass(frozen=True)
class Case:
    """One request, the status it must get and how its body is checked."""

    path: str
    body: bytes
    headers: dict[str, str]
    status: int
    check: Check
    #: Sent over a raw socket: headers declaring this Content-Length, then only ``body``.
    declared_length: int | None = None


@dataclass
class Kind:
    name: str
    group: str  # "small", "invalid" or "large"
    weight: float
    description: str
    cases: list[Case]


def json_case(path: str, payload: Any, status: int, check: Check, **headers: str) -> Case:
    return Case(path, orjson.dumps(payload), {"content-type": JSON, **headers}, status, check)


def small_roll_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for _ in range(64):
        data = rng.integers(-1000, 1000, size=3)
        shift, axis = int(rng.integers(-7, 8)), int(rng.choice([0, -1]))
        if rng.random() < 0.5:
            payload = {"data": data.tolist(), "shift": shift, "axes": axis}
        else:
            payload = {"data": data.tolist(), "shift": [shift], "axes": [axis]}
        expected = np.roll(data.astype(np.int64), shift, axis)
        cases.append(json_case("/roll", payload, 200, expect_json_tensor(expected)))
    return cases


def small_gather_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for number in range(64):
        data = rng.integers(-50, 50, size=(2, 5))
        axis = int(rng.integers(0, 2))
        indices = rng.integers(-7, 7, size=int(rng.integers(1, 5)))
        payload: dict[str, Any] = {"data": data.tolist(), "indices": indices.tolist(), "axis": axis}
        typed = data.astype(np.int64)
        if number % 2:
            payload["dtype"] = "f32"
            typed = data.astype(np.float32)
        expected = gather_reference(typed, indices, axis)
        cases.append(json_case("/gather", payload, 200, expect_json_tensor(expected)))
    # Gather-8 Example 7: out-of-range indices give zeros.
    example = {"data": [1, 2, 3, 4, 5], "indices": [3, 10, -20], "axis": 0, "dtype": "f32"}
    expected7 = np.array([4, 0, 0], dtype=np.float32)
    cases.append(json_case("/gather", example, 200, expect_json_tensor(expected7)))
    return cases


def v2_tensor(name: str, array: Array) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": v2_name(array.dtype),
        "data": array.reshape(-1).tolist(),
    }


def small_v2_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for number in range(64):
        if number % 2:
            data = rng.integers(-100, 100, size=(2, 3)).astype(np.int32)
            shift = rng.integers(-5, 6, size=2)
            axes = np.array([0, 1])
            inputs = [v2_tensor("data", data), v2_tensor("shift", shift), v2_tensor("axes", axes)]
            expected = np.roll(data, tuple(shift.tolist()), (0, 1))
            model = "roll"
        else:
            data = rng.integers(-100, 100, size=(3, 4)).astype(np.float32)
            indices = rng.integers(-5, 5, size=3)
            axis = int(rng.integers(0, 2))
            inputs = [
                v2_tensor("data", data),
                v2_tensor("indices", indices),
                v2_tensor("axis", np.array(axis)),
            ]
            expected = gather_reference(data, indices, axis)
            model = "gather"
        payload = {"id": f"load-{number}", "inputs": inputs}
        path = f"/v2/models/{model}/infer"
        cases.append(json_case(path, payload, 200, expect_v2(expected, binary=False)))
    return cases


def small_npz_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    dtypes = ["int8", "uint16", "int32", "float16", "float32", "float64", "bool"]
    for number in range(64):
        dtype = np.dtype(dtypes[number % len(dtypes)])
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 9)))
        if dtype == np.bool_:
            data = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype.kind == "f":
            data = rng.standard_normal(shape).astype(dtype)
            data.flat[0] = -0.0
        else:
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
        if number % 2:
            shift, axes = rng.integers(-9, 10, size=2), np.array([1, 0])
            body = npz_bytes(data=data, shift=shift, axes=axes)
            expected = np.roll(data, tuple(shift.tolist()), (1, 0))
            path = "/roll"
        else:
            indices = rng.integers(-10, 10, size=(2, 2)).astype(np.int16)
            axis = np.int64(rng.integers(0, 2))
            body = npz_bytes(data=data, indices=indices, axis=axis)
            expected = gather_reference(data, indices, int(axis))
            path = "/gather"
        cases.append(Case(path, body, {"content-type": NPZ}, 200, expect_npy(expected)))
    return cases


def bad_json_cases() -> list[Case]:
    bodies = [
        b'{"data": [1, 2,',
        b'{"data": [1, 2, 3], "shift": NaN, "axes": 0}',
        b'{"data": [1e400], "shift": 1, "axes": 0}',
        b'{"data": "\xff\xfe", "shift": 1, "axes": 0}',
        b"",
        b"[[[[",
    ]
    check = expect_error({"json_invalid"})
    return [
        Case(path, body, {"content-type": JSON}, 400, check)
        for body in bodies
        for path in ("/roll", "/gather")
    ]


def axes_out_of_range_cases() -> list[Case]:
    check = expect_error({"spec_violation"})
    cases = [
        json_case("/roll", {"data": [1, 2, 3], "shift": 1, "axes": 2}, 422, check),
        json_case(
            "/roll", {"data": [[1, 2], [3, 4]], "shift": [1, 1], "axes": [0, -3]}, 422, check
        ),
        json_case("/gather", {"data": [[1, 2], [3, 4]], "indices": [0], "axis": 2}, 422, check),
    ]
    v2 = {
        "inputs": [
            v2_tensor("data", np.arange(6, dtype=np.int32).reshape(2, 3)),
            v2_tensor("shift", np.array([1])),
            v2_tensor("axes", np.array([5])),
        ]
    }
    cases.append(json_case("/v2/models/roll/infer", v2, 422, expect_error(None, v2=True)))
    return cases


def wrong_content_type_cases() -> list[Case]:
    body = orjson.dumps({"data": [1, 2, 3], "shift": 1, "axes": 0})
    check = expect_error({"unsupported_media_type"})
    kinds = ["text/plain", "application/xml", "multipart/form-data; boundary=x", NPY]
    return [
        Case(path, body, {"content-type": kind}, 415, check)
        for kind in kinds
        for path in ("/roll", "/gather")
    ]


def declared_too_large_cases() -> list[Case]:
    cases = []
    for path in ("/roll", "/gather", "/v2/models/roll/infer"):
        for declared in (MAX_BODY_BYTES + 1, 1 << 30, 1 << 40):
            check = expect_error({"too_large"}, v2=path.startswith("/v2"))
            headers = {"content-type": JSON}
            cases.append(Case(path, b'{"data": [', headers, 413, check, declared_length=declared))
    return cases


def output_too_large_cases() -> list[Case]:
    """Gathers of small bodies whose output would pass the 1 GiB output limit."""
    check = expect_error({"too_large"})
    data = np.zeros((1, 4096), dtype=np.float64)
    indices = np.zeros(40_000, dtype=np.int8)  # 40,000 x 4096 x 8 bytes: 1.3 GB
    assert indices.size * data.nbytes > MAX_OUTPUT_BYTES
    body = npz_bytes(data=data, indices=indices, axis=np.int64(0))
    npz = Case("/gather", body, {"content-type": NPZ}, 413, check)
    as_npy = {"data": npy_b64(data), "indices": npy_b64(indices), "axis": 0}
    # JSON-form data: the output's JSON text (about 24 bytes an element) passes the limit.
    wide = np.zeros(8192, dtype=np.int8)
    as_json = {"data": [[0] * 8192], "indices": npy_b64(wide), "axis": 0}
    assert wide.size * 8192 * 24 > MAX_OUTPUT_BYTES
    return [
        npz,
        json_case("/gather", as_npy, 413, check),
        json_case("/gather", as_json, 413, check),
    ]


def large_arrays(rng: np.random.Generator) -> list[tuple[Array, tuple[int, int]]]:
    """8 and 16 MiB float32 tensors (with NaN payloads, infinities and -0.0) and a shift each."""
    arrays = []
    for shape in ((1024, 2048), (2048, 2048)):
        data = rng.standard_normal(shape).astype(np.float32)
        bits = data.reshape(-1).view(np.uint32)
        bits[:4] = [0x7FC00001, 0xFFA00123, 0x80000000, 0x7F800000]  # NaNs, -0.0, +inf
        shift = (int(rng.integers(-3000, 3000)), int(rng.integers(-3000, 3000)))
        arrays.append((data, shift))
    return arrays


def large_npz_cases(arrays: list[tuple[Array, tuple[int, int]]]) -> list[Case]:
    cases = []
    for data, shift in arrays:
        body = npz_bytes(data=data, shift=np.array(shift), axes=np.array([0, 1]))
        expected = np.roll(data, shift, (0, 1))
        cases.append(Case("/roll", body, {"content-type": NPZ}, 200, expect_npy(expected)))
    return cases


def large_json_cases(arrays: list[tuple[Array, tuple[int, int]]]) -> list[Case]:
    cases = []
    for data, shift in arrays:
        payload = {"data": npy_b64(data), "shift": -shift[1], "axes": [1]}
        expected = np.roll(data, -shift[1], 1)
        cases.append(json_case("/roll", payload, 200, expect_json_npy(expected)))
    return cases


def large_v2_cases(arrays: list[tuple[Array, tuple[int, int]]]) -> list[Case]:
    cases = []
    for data, shift in arrays:
        shift_array, axes = np.array(shift[::-1], dtype=np.int64), np.array([1, 0], dtype=np.int64)
        inputs = [
            (name, array)
            for name, array in (("data", data), ("shift", shift_array), ("axes", axes))
        ]
        head = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": name,
                        "shape": list(array.shape),
                        "datatype": v2_name(array.dtype),
                        "parameters": {"binary_data_size": array.nbytes},
                    }
                    for name, array in inputs
                ],
                "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
            }
        )
        body = head + b"".join(
            array.astype(array.dtype.newbyteorder("<")).tobytes() for _, array in inputs
        )
        expected = np.roll(data, tuple(shift_array.tolist()), (1, 0))
        headers = {"content-type": "application/octet-stream", V2_HEADER: str(len(head))}
        cases.append(Case("/v2/models/roll/infer", body, headers, 200, expect_v2(expected, True)))
    return cases


def build_mix(seed: int, large_percent: float) -> list[Kind]:
    """The request kinds and their weights (percent of the requests sent)."""
    rng = np.random.default_rng(seed)
    arrays = large_arrays(rng)
    kinds = [
        Kind("roll_json_small", "small", 20, "3-element roll, JSON", small_roll_cases(rng)),
        Kind("gather_json_small", "small", 14, "2x5 gather, JSON", small_gather_cases(rng)),
        Kind("v2_json_small", "small", 12, "/v2 infer, JSON tensors", small_v2_cases(rng)),
        Kind("npz_small", "small", 12, "small .npz roll/gather", small_npz_cases(rng)),
        Kind("bad_json", "invalid", 8, "bad JSON -> 400", bad_json_cases()),
        Kind(
            "axes_out_of_range",
            "invalid",
            8,
            "axes/axis out of range -> 422",
            axes_out_of_range_cases(),
        ),
        Kind(
            "wrong_content_type",
            "invalid",
            7,
            "wrong content type -> 415",
            wrong_content_type_cases(),
        ),
        Kind(
            "body_over_limit",
            "invalid",
            7,
            "Content-Length > 64 MiB -> 413 (raw socket)",
            declared_too_large_cases(),
        ),
        Kind(
            "gather_output_over_limit",
            "invalid",
            9,
            "gather output > 1 GiB -> 413",
            output_too_large_cases(),
        ),
        Kind("roll_npz_large", "large", 1, "8/16 MiB f32 roll, .npz", large_npz_cases(arrays)),
        Kind(
            "roll_json_b64_large",
            "large",
            1,
            "8/16 MiB f32 roll, base64 .npy JSON",
            large_json_cases(arrays),
        ),
        Kind(
            "roll_v2_binary_large",
            "large",
            1,
            "8/16 MiB f32 roll, /v2 binary",
            large_v2_cases(arrays),
        ),
    ]
    large = [kind for kind in kinds if kind.group == "large"]
    for kind in large:
        kind.weight = large_percent / len(large)
    rest = [kind for kind in kinds if kind.group != "large"]
    scale = (100 - large_percent) / sum(kind.weight for kind in rest)
    for kind in rest:
        kind.weight *= scale
    return kinds


# --------------------------------------------------------------------------------------------
# Server processes and their memory


def children(pid: int) -> list[int]:
    """The pids of every descendant of ``pid`` (from /proc/<pid>/task/<tid>/children)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                found.append(int(child))
                found.extend(children(int(child)))
    return found


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` so far (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time every process of the machine has used since boot (user, system, interrupts)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def role_of(pid: int, root: int) -> str:
    if pid == root:
        return "supervisor"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "resource_tracker" in command:
        return "resource tracker"
    if "multiprocessing" in command:
        return "worker"
    return "child"


@dataclass
class ProcessMemory:
    pid: int
    role: str
    first_kib: int
    peak_kib: int
    last_kib: int
    samples: int = 0
    cpu_s: float = 0.0  # user + system time, at the last sample
    first_cpu_s: float = 0.0  # and at the first


class RssSampler(threading.Thread):
    """Samples the VmRSS of the server's process tree every ``interval`` seconds."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.root = root
        self.interval = interval
        self.processes: dict[int, ProcessMemory] = {}
        self.timeline: list[tuple[float, int]] = []  # (monotonic time, total KiB)
        self.peak_total_kib = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def sample(self) -> int:
        """One sample of every process of the tree; returns the total KiB."""
        total = 0
        with self._lock:
            for pid in [self.root, *children(self.root)]:
                rss = rss_kib(pid)
                if rss is None:
                    continue
                total += rss
                memory = self.processes.get(pid)
                if memory is None:
                    memory = ProcessMemory(pid, role_of(pid, self.root), rss, rss, rss)
                    memory.first_cpu_s = cpu_seconds(pid) or 0.0
                    self.processes[pid] = memory
                memory.peak_kib = max(memory.peak_kib, rss)
                memory.last_kib = rss
                memory.samples += 1
                memory.cpu_s = cpu_seconds(pid) or memory.cpu_s
            self.timeline.append((time.monotonic(), total))
            self.peak_total_kib = max(self.peak_total_kib, total)
        return total

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)

    def peak_between(self, start: float, end: float) -> int:
        with self._lock:
            return max((kib for at, kib in self.timeline if start <= at <= end), default=0)


def wait_for_workers(root: int, count: int, timeout: float = 30) -> list[int]:
    """The worker pids, once ``count`` of them run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = [pid for pid in children(root) if role_of(pid, root) == "worker"]
        if len(workers) >= count:
            return workers
        time.sleep(0.1)
    raise RuntimeError(f"the server did not start {count} workers in {timeout} s")


def shutdown(process: Any, pids: list[int]) -> tuple[str, list[int]]:
    """Stop the server; its log text and the pids still alive after its SIGTERM.

    SIGTERM first: ``stop_server`` alone SIGKILLs the supervisor, which leaves the workers of
    ``python -m app`` orphaned and still serving. Whatever of ``pids`` (processes this script
    started) outlives the supervisor's graceful exit is SIGKILLed, by pid.
    """
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=40)
    output = ""
    with contextlib.suppress(Exception):
        output = server_output(process)
    stop_server(process)  # kills the supervisor if it is still there, removes its log
    others = [pid for pid in dict.fromkeys(pids) if pid != process.pid]
    deadline = time.monotonic() + 5  # the resource tracker exits a moment after the supervisor
    while time.monotonic() < deadline and any(rss_kib(pid) is not None for pid in others):
        time.sleep(0.1)
    left = [pid for pid in others if rss_kib(pid) is not None]
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return output, left


# --------------------------------------------------------------------------------------------
# The load


@dataclass
class Failure:
    kind: str
    case: Case
    what: str
    status: int | None
    answer: bytes


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[int] = field(default_factory=Counter)
    by_kind_status: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    sent: Counter[str] = field(default_factory=Counter)
    checked: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    server_errors: Counter[str] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    interrupted: bool = False
    client_cpu_s: float = 0.0
    machine_busy_s: float = 0.0
    stale_retries: int = 0
    connections_opened: int = 0

    def total(self) -> int:
        return sum(self.sent.values())

    def completed(self) -> int:
        return sum(self.statuses.values())


# A small HTTP/1.1 client. httpx costs about 2.4 ms of CPU a request here (its connection pool
# and anyio), which on a 2-core machine is CPU taken from the server; this one costs ~0.1 ms.
# ``--client httpx`` sends the same mix through httpx instead, as a cross-check.


class ProtocolError(Exception):
    """The server's answer is not well-formed HTTP/1.1."""


async def read_response(reader: asyncio.StreamReader) -> tuple[int, Headers, bytes, bool]:
    """One response: status, headers, body, and whether the server keeps the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers: Headers = {}
    for line in lines[1:]:
        if line:
            name, separator, value = line.partition(":")
            if not separator:
                raise ProtocolError(f"bad header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                break
            chunks.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
        body = b"".join(chunks)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body, keep = await reader.read(), False
    return int(parts[1]), headers, body, keep


def request_head(host: str, path: str, headers: Headers, length: int) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join([*lines, f"Content-Length: {length}"]) + "\r\n\r\n").encode("latin-1")


class Connection:
    """One kept-alive connection to 127.0.0.1, opened again when the server closes it."""

    def __init__(self, url: str, timeout: float) -> None:
        self.host = url.removeprefix("http://")
        address, port = self.host.split(":")
        if address != "127.0.0.1":
            raise ValueError(f"loopback only, not {address}")
        self.port = int(port)
        self.timeout = timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        #: Requests sent again on a new connection: the server had closed the kept-alive one
        #: before answering a byte (what browsers and httpx do too).
        self.stale_retries = 0
        self.opened = 0

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def post(self, path: str, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        head = request_head(self.host, path, headers, len(body))
        async with asyncio.timeout(self.timeout):
            reused = self.reader is not None and not self.reader.at_eof()
            if not reused:
                self.drop()
                self.reader, self.writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, limit=1 << 20
                )
                self.opened += 1
            try:
                return await self._exchange(head, body)
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                nothing = not isinstance(error, asyncio.IncompleteReadError) or not error.partial
                if not (reused and nothing):
                    raise
                self.stale_retries += 1
                self.reader, self.writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, limit=1 << 20
                )
                self.opened += 1
                return await self._exchange(head, body)

    async def _exchange(self, head: bytes, body: bytes) -> tuple[int, Headers, bytes]:
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(head + body if len(body) < 65536 else head)
            if len(body) >= 65536:
                self.writer.write(body)
            await self.writer.drain()
            status, headers, answer, keep = await read_response(self.reader)
        except BaseException:
            self.drop()
            raise
        if not keep:
            self.drop()
        return status, headers, answer


async def post_declared(url: str, case: Case, timeout: float) -> tuple[int, Headers, bytes]:
    """POST ``case`` on a new connection: headers declaring ``declared_length``, then only
    ``case.body``; the answer must come without the rest of the body."""
    host = url.removeprefix("http://")
    address, port = host.split(":")
    if address != "127.0.0.1":
        raise ValueError(f"loopback only, not {address}")
    assert case.declared_length is not None
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(address, int(port))
        try:
            writer.write(request_head(host, case.path, case.headers, case.declared_length))
            writer.write(case.body)
            await writer.drain()
            status, headers, body, _ = await read_response(reader)
            return status, headers, body
        finally:
            writer.close()


class Load:
    """``concurrency`` clients sending the mix until the time or the count runs out."""

    def __init__(self, url: str, kinds: list[Kind], args: argparse.Namespace) -> None:
        self.url = url
        self.kinds = kinds
        self.weights = [kind.weight for kind in kinds]
        self.args = args
        self.results = Results()
        self.deadline = 0.0
        self.stopping = False

    def should_stop(self) -> bool:
        return (
            self.stopping
            or time.monotonic() >= self.deadline
            or self.results.total() >= self.args.max_requests
        )

    async def run(self) -> Results:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        interrupts = 0

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            self.stopping = True
            self.results.interrupted = True
            if interrupts == 1:
                print("\nstopping: waiting for requests in flight (again to abort)", flush=True)
            elif main is not None:
                main.cancel()

        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, on_signal)
        limits = httpx.Limits(
            max_connections=self.args.concurrency, max_keepalive_connections=self.args.concurrency
        )
        timeout = httpx.Timeout(self.args.timeout)
        async with httpx.AsyncClient(base_url=self.url, timeout=timeout, limits=limits) as client:
            shared = client if self.args.client == "httpx" else None
            self.results.started = time.monotonic()
            cpu_before, machine_before = os.times(), machine_busy_seconds()
            self.deadline = self.results.started + self.args.seconds
            progress = asyncio.create_task(self.progress())
            try:
                await asyncio.gather(
                    *(self.client(shared, seed) for seed in range(self.args.concurrency))
                )
            finally:
                self.results.finished = time.monotonic()
                cpu_after = os.times()
                self.results.machine_busy_s = machine_busy_seconds() - machine_before
                self.results.client_cpu_s = (cpu_after.user + cpu_after.system) - (
                    cpu_before.user + cpu_before.system
                )
                progress.cancel()
                for number in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(number)
        return self.results

    async def progress(self) -> None:
        while True:
            await asyncio.sleep(10)
            elapsed = time.monotonic() - self.results.started
            done = self.results.completed()
            bad = sum(self.results.server_errors.values()) + sum(self.results.wrong.values())
            print(
                f"  {elapsed:5.0f} s  {done:8d} answers  {done / elapsed:7.0f}/s  "
                f"5xx+wrong {bad}  transport errors {sum(self.results.transport_errors.values())}",
                flush=True,
            )

    async def client(self, shared: httpx.AsyncClient | None, number: int) -> None:
        """One client: a request at a time, on its own kept-alive connection (or httpx's pool)."""
        rng = random.Random(self.args.seed * 1000 + number)
        results = self.results
        connection = Connection(self.url, self.args.timeout)
        try:
            await self.send_until_done(rng, connection, shared)
        finally:
            connection.drop()
            results.stale_retries += connection.stale_retries
            results.connections_opened += connection.opened

    async def send_until_done(
        self, rng: random.Random, connection: Connection, shared: httpx.AsyncClient | None
    ) -> None:
        results = self.results
        while not self.should_stop():
            kind = rng.choices(self.kinds, self.weights)[0]
            case = rng.choice(kind.cases)
            results.sent[kind.name] += 1
            start = time.perf_counter()
            try:
                if case.declared_length is not None:
                    status, headers, body = await post_declared(self.url, case, self.args.timeout)
                elif shared is not None:
                    reply = await shared.post(case.path, content=case.body, headers=case.headers)
                    status, body = reply.status_code, reply.content
                    headers = {name.lower(): value for name, value in reply.headers.items()}
                else:
                    status, headers, body = await connection.post(
                        case.path, case.headers, case.body
                    )
            except (
                httpx.TransportError,
                OSError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
                TimeoutError,
                ProtocolError,
                ValueError,
            ) as error:
                name = type(error).__name__
                results.transport_errors[f"{kind.name}: {name}"] += 1
                self.fail(kind, case, f"transport error {name}: {error}", None, b"")
                continue
            results.latencies[kind.name].append(time.perf_counter() - start)
            results.statuses[status] += 1
            results.by_kind_status[kind.name][status] += 1
            if status >= 500:
                results.server_errors[kind.name] += 1
                self.fail(kind, case, f"status {status}", status, body)
                continue
            if status != case.status:
                results.wrong[kind.name] += 1
                self.fail(kind, case, f"status {status} instead of {case.status}", status, body)
                continue
            if results.sent[kind.name] % self.args.verify_every:
                continue
            results.checked[kind.name] += 1
            try:
                if kind.group == "large":  # decoding 8-16 MiB: off the event loop
                    problem = await asyncio.to_thread(case.check, headers, body)
                else:
                    problem = case.check(headers, body)
            except Exception as error:  # an undecodable answer is a wrong answer
                problem = f"answer does not decode: {type(error).__name__}: {error}"
            if problem is not None:
                results.wrong[kind.name] += 1
                self.fail(kind, case, problem, status, body)

    def fail(self, kind: Kind, case: Case, what: str, status: int | None, answer: bytes) -> None:
        if len(self.results.failures) < 200:
            self.results.failures.append(Failure(kind.name, case, what, status, answer[:4096]))


# --------------------------------------------------------------------------------------------
# Report


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "p50_ms": math.nan, "p90_ms": math.nan, "p99_ms": math.nan,
                "max_ms": math.nan}  # fmt: skip
    array = np.asarray(values) * 1000
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return {
        "count": len(values),
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "max_ms": float(array.max()),
    }


def save_failures(failures: list[Failure], url: str, directory: Path) -> list[str]:
    """Each failing request's body and a curl command replaying it; returns the commands."""
    directory.mkdir(parents=True, exist_ok=True)
    commands = []
    seen: Counter[str] = Counter()
    for number, failure in enumerate(failures):
        seen[failure.kind] += 1
        if seen[failure.kind] > 5:
            continue
        stem = directory / f"{number:03d}-{failure.kind}"
        stem.with_suffix(".body").write_bytes(failure.case.body)
        stem.with_suffix(".answer").write_bytes(failure.answer)
        headers = " ".join(f"-H '{name}: {value}'" for name, value in failure.case.headers.items())
        if failure.case.declared_length is not None:
            headers += f" -H 'Content-Length: {failure.case.declared_length}'"
        command = (
            f"curl -sS -i {url}{failure.case.path} {headers} "
            f"--data-binary @{stem.with_suffix('.body')}"
        )
        meta = {
            "kind": failure.kind,
            "what": failure.what,
            "status": failure.status,
            "expected_status": failure.case.status,
            "path": failure.case.path,
            "headers": failure.case.headers,
            "declared_length": failure.case.declared_length,
            "curl": command,
        }
        stem.with_suffix(".json").write_text(json.dumps(meta, indent=2))
        commands.append(command)
    return commands


def build_report(
    results: Results,
    kinds: list[Kind],
    sampler: RssSampler,
    memory: dict[str, int],
    args: argparse.Namespace,
    url: str,
    log_problems: list[str],
    worker_pids: list[int],
) -> dict[str, Any]:
    duration = results.finished - results.started
    groups = {kind.name: kind.group for kind in kinds}
    every = [value for values in results.latencies.values() for value in values]
    small = [
        value
        for name, values in results.latencies.items()
        if groups[name] == "small"
        for value in values
    ]
    workers = [m for m in sampler.processes.values() if m.role == "worker"]
    restarted = [m.pid for m in workers if m.pid not in worker_pids]
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "url": url,
        "workers": WORKERS,
        "concurrency": args.concurrency,
        "seconds_requested": args.seconds,
        "max_requests": args.max_requests,
        "duration_s": duration,
        "interrupted": results.interrupted,
        "requests_sent": results.total(),
        "answers": results.completed(),
        "requests_per_s": results.completed() / duration if duration > 0 else 0.0,
        "latency_all": percentiles(every),
        "latency_small_valid": percentiles(small),
        "status_counts": {str(code): count for code, count in sorted(results.statuses.items())},
        "kinds": {
            kind.name: {
                "group": kind.group,
                "weight_percent": kind.weight,
                "description": kind.description,
                "expected_status": sorted({case.status for case in kind.cases}),
                "sent": results.sent[kind.name],
                "statuses": {
                    str(code): count
                    for code, count in sorted(results.by_kind_status[kind.name].items())
                },
                "checked": results.checked[kind.name],
                "wrong": results.wrong[kind.name],
                "server_errors": results.server_errors[kind.name],
                "latency": percentiles(results.latencies[kind.name]),
            }
            for kind in kinds
        },
        "server_errors_5xx": sum(results.server_errors.values()),
        "transport_errors": sum(results.transport_errors.values()),
        "transport_errors_by_kind": dict(results.transport_errors),
        "http_client": args.client,
        "connections_opened": results.connections_opened,
        "stale_keepalive_retries": results.stale_retries,
        "wrong_answers": sum(results.wrong.values()),
        "answers_checked": sum(results.checked.values()),
        "failures": [
            {"kind": f.kind, "what": f.what, "status": f.status, "path": f.case.path}
            for f in results.failures[:50]
        ],
        "memory": {
            "peak_total_kib": sampler.peak_total_kib,
            "idle_before_kib": memory["before"],
            "idle_after_kib": memory["after"],
            "peak_first_quarter_kib": memory["first_quarter"],
            "peak_last_quarter_kib": memory["last_quarter"],
            "samples": len(sampler.timeline),
            "peak_by_tenth_kib": memory_by_tenth(sampler, results.started, results.finished),
            "processes": [
                {
                    "pid": m.pid,
                    "role": m.role,
                    "first_kib": m.first_kib,
                    "peak_kib": m.peak_kib,
                    "last_kib": m.last_kib,
                }
                for m in sampler.processes.values()
            ],
            "peak_per_worker_kib": max((m.peak_kib for m in workers), default=0),
        },
        "cpu_s": cpu_figures(results, sampler, duration),
        "workers_started_during_run": restarted,
        "server_log_problems": log_problems[:20],
    }


def memory_by_tenth(sampler: RssSampler, start: float, end: float) -> list[int]:
    """The peak total RSS in each tenth of the run: a flat line, or growth."""
    step = (end - start) / 10
    return [sampler.peak_between(start + i * step, start + (i + 1) * step) for i in range(10)]


def cpu_figures(results: Results, sampler: RssSampler, duration: float) -> dict[str, Any]:
    """CPU seconds used during the run by the server, this client and everything else."""
    server = sum(m.cpu_s - m.first_cpu_s for m in sampler.processes.values())
    cores = os.cpu_count() or 1
    return {
        "server": server,
        "server_by_pid": {str(m.pid): m.cpu_s - m.first_cpu_s for m in sampler.processes.values()},
        "load_client": results.client_cpu_s,
        "other_processes": max(0.0, results.machine_busy_s - server - results.client_cpu_s),
        "machine_busy": results.machine_busy_s,
        "available": cores * duration,
        "cores": cores,
    }


def mib(kib: int) -> str:
    return f"{kib / 1024:8.1f} MiB"


def print_report(report: dict[str, Any]) -> None:
    line = "-" * 100
    print(line)
    print(f"tensor-ops load test  {report['command']}")
    print(
        f"server {report['url']} ({report['workers']} workers), concurrency "
        f"{report['concurrency']}, {report['seconds_requested']} s or "
        f"{report['max_requests']} requests" + ("  [INTERRUPTED]" if report["interrupted"] else "")
    )
    print(line)
    print(f"duration            {report['duration_s']:10.2f} s")
    print(f"requests sent       {report['requests_sent']:10d}")
    print(f"answers             {report['answers']:10d}")
    print(f"requests/s          {report['requests_per_s']:10.1f}")
    print()
    print(f"{'latency (ms)':28} {'count':>8} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}")
    for title, key in (("all requests", "latency_all"), ("small valid", "latency_small_valid")):
        stats = report[key]
        print(
            f"{title:28} {stats['count']:8d} {stats['p50_ms']:9.1f} {stats['p90_ms']:9.1f} "
            f"{stats['p99_ms']:9.1f} {stats['max_ms']:9.1f}"
        )
    print()
    print(
        f"{'kind':26} {'group':7} {'want':>4} {'sent':>7} {'statuses':20} {'checked':>7} "
        f"{'wrong':>5} {'p50':>8} {'p99':>8} {'max':>8} {'weight':>6}"
    )
    for name, kind in report["kinds"].items():
        statuses = " ".join(f"{code}:{count}" for code, count in kind["statuses"].items())
        want = "/".join(str(code) for code in kind["expected_status"])
        stats = kind["latency"]
        print(
            f"{name:26} {kind['group']:7} {want:>4} {kind['sent']:7d} {statuses:20} "
            f"{kind['checked']:7d} {kind['wrong']:5d} {stats['p50_ms']:8.1f} "
            f"{stats['p99_ms']:8.1f} {stats['max_ms']:8.1f} {kind['weight_percent']:5.1f}%"
        )
    print()
    print(
        "status codes        " + "  ".join(f"{c}: {n}" for c, n in report["status_counts"].items())
    )
    print(f"5xx                 {report['server_errors_5xx']:10d}")
    print(f"transport errors    {report['transport_errors']:10d}", end="")
    print(f"  {report['transport_errors_by_kind']}" if report["transport_errors"] else "")
    if report["http_client"] == "raw":
        print(
            f"connections         {report['connections_opened']:10d}  opened by the clients "
            f"(besides body_over_limit's); {report['stale_keepalive_retries']} requests resent "
            "after the server had closed a kept-alive connection"
        )
    print(
        f"wrong answers       {report['wrong_answers']:10d}  "
        f"(of {report['answers_checked']} answers checked)"
    )
    memory = report["memory"]
    print()
    print(
        f"memory (VmRSS, {memory['samples']} samples every 0.2 s)   idle before "
        f"{mib(memory['idle_before_kib']).strip()}, peak {mib(memory['peak_total_kib']).strip()}, "
        f"idle after {mib(memory['idle_after_kib']).strip()}"
    )
    print(
        f"  peak total in the first quarter {mib(memory['peak_first_quarter_kib']).strip()}, "
        f"in the last quarter {mib(memory['peak_last_quarter_kib']).strip()}"
    )
    print(f"  {'pid':>8} {'role':18} {'first':>12} {'peak':>12} {'last':>12}")
    for process in memory["processes"]:
        print(
            f"  {process['pid']:8d} {process['role']:18} {mib(process['first_kib'])} "
            f"{mib(process['peak_kib'])} {mib(process['last_kib'])}"
        )
    print(f"  peak per worker {mib(memory['peak_per_worker_kib']).strip()}")
    tenths = " ".join(f"{kib / 1024:.0f}" for kib in memory["peak_by_tenth_kib"])
    print(f"  peak total in each tenth of the run, MiB: {tenths}")
    cpu = report["cpu_s"]
    print(
        f"CPU time during the run: server {cpu['server']:.1f} s, load client "
        f"{cpu['load_client']:.1f} s, other processes {cpu['other_processes']:.1f} s, of "
        f"{cpu['available']:.0f} s ({cpu['cores']} cores)"
    )
    if cpu["other_processes"] > 0.1 * cpu["available"]:
        print("  NOTE: other processes took over 10% of the CPU: throughput and latency are skewed")
    if report.get("left_running_after_sigterm"):
        print(f"STILL RUNNING AFTER SIGTERM (killed): {report['left_running_after_sigterm']}")
    if report["workers_started_during_run"]:
        print(
            f"WORKERS STARTED DURING THE RUN (a worker died): {report['workers_started_during_run']}"
        )
    if report["server_log_problems"]:
        print(f"server log: {len(report['server_log_problems'])} problem lines, first ones:")
        for text in report["server_log_problems"][:5]:
            print(f"  {text[:300]}")
    if report["failures"]:
        print("first failures:")
        for failure in report["failures"][:10]:
            print(f"  {failure['kind']} {failure['path']}: {failure['what'][:200]}")
    print(line)


def log_problems(text: str) -> list[str]:
    """Lines of the server's log at level error or above, or of a traceback."""
    found = []
    for line in text.splitlines():
        lowered = line.lower()
        markers = ("traceback", '"level": "error"', '"level": "critical"', "exception")
        if any(marker in lowered for marker in markers):
            found.append(line)
    return found


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to send (60)")
    parser.add_argument("--concurrency", type=int, default=16, help="clients at once (16)")
    parser.add_argument("--max-requests", type=int, default=200_000, help="stop after (200000)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request, seconds (60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="HTTP client: a small asyncio one (default) or httpx (slower, a cross-check)",
    )
    parser.add_argument(
        "--large-percent", type=float, default=3.0, help="share of 8-16 MiB requests (3)"
    )
    parser.add_argument(
        "--verify-every", type=int, default=1, help="check the body of every Nth answer (1: all)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--failures-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "tensor-ops-load-failures",
        help="where failing requests are saved for replay",
    )
    args = parser.parse_args()
    if args.seconds <= 0 or args.concurrency < 1 or args.max_requests < 1 or args.verify_every < 1:
        parser.error("--seconds, --concurrency, --max-requests and --verify-every must be positive")
    if not 0 <= args.large_percent < 100:
        parser.error("--large-percent must be in [0, 100)")
    return args


def main() -> int:
    args = parse_args()
    if args.client == "httpx" and "sniffio" not in sys.modules:
        # httpcore runs ``import sniffio`` on every request; anyio 4.16 no longer installs it,
        # and a failing import searches all of sys.path each time (a third of httpx's CPU here).
        # None in sys.modules makes it fail at once; httpcore then assumes asyncio, as it is.
        sys.modules["sniffio"] = None  # type: ignore[assignment]
    print("building the request mix ...", flush=True)
    kinds = build_mix(args.seed, args.large_percent)
    env = {
        "TENSOR_OPS_WORKERS": str(WORKERS),
        "TENSOR_OPS_LOG_LEVEL": "warning",
        "TENSOR_OPS_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "TENSOR_OPS_MAX_OUTPUT_BYTES": str(MAX_OUTPUT_BYTES),
    }
    url, process = launch_server(env, command=["-m", "app"])
    sampler = RssSampler(process.pid)
    started: list[int] = []
    log_text, left_running = "", list[int]()
    try:
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the server is not on loopback: {url}")
        worker_pids = wait_for_workers(process.pid, WORKERS)
        started = [*children(process.pid)]
        time.sleep(1.0)
        memory = {"before": sampler.sample()}
        sampler.start()
        print(
            f"server {url}: supervisor {process.pid}, workers {worker_pids}; sending for "
            f"{args.seconds:g} s with {args.concurrency} clients",
            flush=True,
        )
        load = Load(url, kinds, args)
        runner = uvloop.run if uvloop is not None else asyncio.run
        results = runner(load.run())
        sampler.stop()
        time.sleep(1.0)  # idle: what the workers keep once the load is gone
        memory["after"] = sampler.sample()
        quarter = (results.finished - results.started) / 4
        memory["first_quarter"] = sampler.peak_between(results.started, results.started + quarter)
        memory["last_quarter"] = sampler.peak_between(results.finished - quarter, results.finished)
        started = [*started, *children(process.pid)]
    finally:
        sampler.stop()
        log_text, left_running = shutdown(process, [*started, *sampler.processes])
    report = build_report(
        results, kinds, sampler, memory, args, url, log_problems(log_text), worker_pids
    )
    report["left_running_after_sigterm"] = left_running
    print_report(report)
    if results.failures:
        commands = save_failures(results.failures, url, args.failures_dir)
        print(f"failing requests saved in {args.failures_dir}; replay against a server with:")
        for command in commands[:5]:
            print(f"  {command}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"figures written to {args.json}")
    failed = (
        report["server_errors_5xx"]
        or report["transport_errors"]
        or report["wrong_answers"]
        or report["workers_started_during_run"]
    )
    if results.interrupted:
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
