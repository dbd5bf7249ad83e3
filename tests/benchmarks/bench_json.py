"""JSON-form arrays end to end against the in-process orjson floor (issue 13 point 4).

    .venv/bin/python tests/benchmarks/bench_json.py             # full run, 10^3-10^7, ~3 min
    .venv/bin/python tests/benchmarks/bench_json.py --quick     # 10^3-10^6, fewer rounds, ~40 s
    .venv/bin/python tests/benchmarks/bench_json.py --json bench-json.json  # figures as JSON too
    .venv/bin/python tests/benchmarks/bench_json.py --no-stages # end to end and the floor only

A roll of a numeric tensor of 10^3 to 10^7 elements (float32 and int64 in 2-D, float32 in 3-D;
shift 1, -2 (, 3) over every axis), its ``data`` sent as nested JSON arrays with ``dtype``
named, and the answer asked for in the same form:

- service: ``POST /roll`` to a real server (``python -m uvicorn app.main:app``, one worker, gRPC
  off: ``launch_server`` of ``tests/support.py``), the request's bytes made beforehand and the
  whole answer read by ``bench.py``'s raw-socket client (keep-alive, no parsing);
- echo: the same body posted to a bare FastAPI app that answers it back as it is
  (``tests/benchmarks/echo_app.py``, started the same way): what the HTTP stack costs for a
  request and an answer of that size with no work, to tell the transport from the service's own
  work (the answer is about the body's size);
- floor: the same work in this process with nothing but orjson and NumPy, as issue 13 measured
  it: ``orjson.loads`` of the same body, ``np.array(data, dtype)``, ``np.roll`` and
  ``orjson.dumps`` of the same answer object with ``OPT_SERIALIZE_NUMPY``;
- stages (unless ``--no-stages``; up to 10^6 elements): the service's own decoding (``JsonExchange.prepare`` +
  ``decode``: the JSON parse, the request model, the tensors and the checks) and encoding
  (``JsonExchange.encode``: the kernel and the JSON text) timed in this process, beside the
  floor's two halves (``loads`` + ``np.array``; ``np.roll`` + ``dumps``).

The target is service <= 1.5x the floor; the ratio is printed against it, never asserted. Every
figure is a median of rounds taken side by side, interleaved (the order reversed every other
round: ``bench.py``'s ``interleaved``), with fewer rounds for the largest sizes. Each case's
answer is checked once, untimed: it must equal ``np.roll`` of the data, and its bytes are
compared with the floor's (the same JSON text, byte for byte, is reported).
"""

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.http.op_routes import JsonExchange  # noqa: E402
from app.pipeline.jobs import Job, Limits  # noqa: E402
from app.registry import REGISTRY  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.benchmarks.bench import (  # noqa: E402
    SERVICE_ENV,
    RawHttp,
    echo_command,
    interleaved,
    server,
    table,
    verdict,
)

Array = npt.NDArray[Any]
TARGET = 1.5
EXPONENTS = [3, 4, 5, 6, 7]
#: The cases: label, element type, shape of each size (10^k elements, k in EXPONENTS).
Shapes = dict[int, tuple[int, ...]]
SHAPES_2D: Shapes = {3: (25, 40), 4: (100, 100), 5: (250, 400), 6: (1000, 1000), 7: (2500, 4000)}
SHAPES_3D: Shapes = {3: (10, 10, 10), 4: (20, 20, 25), 5: (40, 50, 50), 6: (100, 100, 100)}
SHAPES_3D[7] = (200, 200, 250)
KINDS: list[tuple[str, str, Shapes]] = [
    ("float32 2-D", "float32", SHAPES_2D),
    ("int64 2-D", "int64", SHAPES_2D),
    ("float32 3-D", "float32", SHAPES_3D),
]
#: The stages are timed below 10^7 elements only (they would double the run's longest part).
STAGES_BELOW = 7
HEADERS = {"Content-Type": "application/json"}
#: Less than uvicorn's keep-alive timeout (5 s): a connection idle longer is opened again.
IDLE_SECONDS = 3.0
ENV = {**SERVICE_ENV, "TENSOR_OPS_GRPC_PORT": "0", "TENSOR_OPS_WORKERS": "1"}


@dataclass
class Case:
    label: str
    exponent: int
    data: Array
    shift: list[int]
    axes: list[int]
    body: bytes

    @property
    def count(self) -> int:
        return self.data.size


def make_case(label: str, dtype: str, shape: tuple[int, ...], exponent: int) -> Case:
    rng = np.random.default_rng(exponent)
    if dtype == "int64":
        data = rng.integers(-(10**9), 10**9, size=shape, dtype=np.int64)
    else:
        data = rng.standard_normal(shape).astype(dtype)
    shift = [1, -2, 3][: len(shape)]
    axes = list(range(len(shape)))
    body = orjson.dumps(
        {"data": data, "dtype": dtype, "shift": shift, "axes": axes},
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return Case(label, exponent, data, shift, axes, body)


def floor_in(body: bytes) -> tuple[Array, dict[str, Any]]:
    payload = orjson.loads(body)
    return np.array(payload["data"], dtype=payload["dtype"]), payload


def floor_out(data: Array, payload: dict[str, Any]) -> bytes:
    output = np.roll(data, payload["shift"], payload["axes"])
    answer = {"data": output, "dtype": output.dtype.name, "shape": list(output.shape)}
    return orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)


def floor(body: bytes) -> bytes:
    """The in-process floor: parse, to NumPy, roll, serialise."""
    return floor_out(*floor_in(body))


def http_call(client: RawHttp, path: str, body: bytes) -> Callable[[], None]:
    def call() -> None:
        # uvicorn closes a connection idle for 5 s (its keep-alive timeout), which the floor's
        # rounds of 10^7 elements outlast: connect again (some 100 us, against seconds).
        if time.monotonic() - last[0] > IDLE_SECONDS:
            client.close()
        status, _, answer = client.post(path, body, HEADERS)
        last[0] = time.monotonic()
        if status != 200:
            raise AssertionError(f"POST {path} answered {status}: {bytes(answer[:300])!r}")

    last = [0.0]  # the first call connects afresh
    return call


def check(client: RawHttp, echo: RawHttp, case: Case) -> bool:
    """The service's answer equals np.roll's and the echo's is the body (raises if not); True
    when the service's bytes are the floor's."""
    echo.close()  # fresh connections: the last ones may have been idle too long
    status, _, echoed = echo.post("/echo", case.body, HEADERS)
    if status != 200 or echoed != case.body:
        raise AssertionError(f"echo of {case.label} 10^{case.exponent}: not the same bytes")
    client.close()
    status, _, view = client.post("/roll", case.body, HEADERS)
    answer = bytes(view)
    if status != 200:
        raise AssertionError(f"{case.label} 10^{case.exponent}: {status} {answer[:300]!r}")
    expected = np.roll(case.data, case.shift, case.axes)
    parsed = orjson.loads(answer)
    got = np.array(parsed["data"], dtype=parsed["dtype"])
    if parsed["shape"] != list(expected.shape) or not np.array_equal(got, expected):
        raise AssertionError(f"{case.label} 10^{case.exponent}: the answer is not np.roll's")
    return answer == floor(case.body)


def stage_calls(case: Case) -> list[tuple[str, Callable[[], object]]]:
    """The service's decoding and encoding, and the floor's two halves, in this process."""
    op = REGISTRY["roll"]
    limits = Limits.of(Settings(max_body_bytes=1 << 31, max_output_bytes=1 << 32))

    def decode() -> tuple[JsonExchange, Job]:
        exchange = JsonExchange(op, raw_npy=False)
        exchange.prepare(case.body)
        return exchange, exchange.decode(limits)

    exchange, job = decode()
    parsed = floor_in(case.body)
    return [
        ("decode", decode),
        ("encode", lambda: exchange.encode(job)),
        ("floor_in", lambda: floor_in(case.body)),
        ("floor_out", lambda: floor_out(*parsed)),
    ]


def rounds_for(exponent: int, quick: bool) -> tuple[int, int, int, float]:
    """Calls per round, most rounds, fewest rounds, and the seconds after which rounds stop."""
    number = max(1, 10 ** max(0, 5 - exponent))  # about 10^5 elements a round at least
    if exponent >= 7:
        return number, 3, 2 if quick else 3, 0.0
    if exponent == 6:
        return number, 3 if quick else 7, 3, 4.0 if quick else 10.0
    return number, 5 if quick else 15, 3, 2.0 if quick else 5.0


def bench_case(
    client: RawHttp, echo: RawHttp, case: Case, stages: bool, quick: bool
) -> dict[str, Any]:
    same_bytes = check(client, echo, case)
    number, rounds, min_rounds, budget = rounds_for(case.exponent, quick)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("service", http_call(client, "/roll", case.body)),
        ("floor", lambda: floor(case.body)),
        ("echo", http_call(echo, "/echo", case.body)),
    ]
    if stages and case.exponent < STAGES_BELOW:
        calls += stage_calls(case)
    seconds = interleaved(calls, number=number, rounds=rounds, min_rounds=min_rounds, budget=budget)
    return {
        "case": case.label,
        "elements": case.count,
        "shape": list(case.data.shape),
        "body_bytes": len(case.body),
        "same_bytes_as_floor": same_bytes,
        "seconds": seconds,
        "ratio": seconds["service"] / seconds["floor"],
    }


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f}" if seconds < 0.01 else f"{seconds * 1e3:.1f}"


def print_results(results: list[dict[str, Any]], stages: bool) -> None:
    headers = ["case", "elements", "body", "service ms", "floor ms", "ratio", f"<= {TARGET}x"]
    headers.append("echo ms")
    if stages:
        headers += ["decode", "encode", "floor in", "floor out"]
    headers.append("bytes = floor's")
    rows = []
    for result in results:
        seconds = result["seconds"]
        body = result["body_bytes"]
        row = [
            result["case"],
            f"10^{round(math.log10(result['elements']))}",
            f"{body / 1e6:.2f} MB" if body >= 100_000 else f"{body / 1e3:.1f} kB",
            ms(seconds["service"]),
            ms(seconds["floor"]),
            f"{result['ratio']:.2f}x",
            verdict(result["ratio"] <= TARGET),
            ms(seconds["echo"]),
        ]
        if stages:
            row += [ms(seconds.get(key)) for key in ("decode", "encode", "floor_in", "floor_out")]
        row.append("yes" if result["same_bytes_as_floor"] else "NO")
        rows.append(row)
    print(table(headers, rows, left=2))
    print(
        "echo: the same body to a bare FastAPI app answering it back (the HTTP stack's cost "
        "for that size, no work)"
    )
    if stages:
        print(
            "decode: JsonExchange prepare + decode in process (parse, model, tensors, checks); "
            "encode: JsonExchange.encode (kernel, JSON text);\nfloor in: orjson.loads + "
            "np.array; floor out: np.roll + orjson.dumps (milliseconds, medians)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^3-10^6, fewer rounds")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--no-stages", action="store_true", help="skip the in-process stages")
    parser.add_argument(
        "--exponents",
        default=None,
        help="comma-separated sizes as powers of ten (default 3-7, or 3-6 with --quick)",
    )
    parser.add_argument(
        "--cases", default=None, help="comma-separated case labels (default: all three)"
    )
    args = parser.parse_args()
    exponents = (
        [int(k) for k in args.exponents.split(",")]
        if args.exponents
        else [k for k in EXPONENTS if not (args.quick and k > 6)]
    )
    kinds = [kind for kind in KINDS if args.cases is None or kind[0] in args.cases.split(",")]
    stages = not args.no_stages
    started = time.monotonic()
    load_before = os.getloadavg()
    print(
        f"JSON-form rolls, service against the in-process orjson floor: {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.2f}, NumPy {np.__version__}, orjson {orjson.__version__}"
        f", Python {platform.python_version()}"
    )
    results: list[dict[str, Any]] = []
    with server(ENV) as (url, _), server(ENV, echo_command()) as (echo_url, _):
        client, echo = RawHttp(url), RawHttp(echo_url)
        try:
            for exponent in exponents:
                for label, dtype, shapes in kinds:
                    case = make_case(label, dtype, shapes[exponent], exponent)
                    results.append(bench_case(client, echo, case, stages, args.quick))
                    del case
                    seconds = results[-1]["seconds"]
                    print(
                        f"  {label} 10^{exponent}: service {ms(seconds['service'])} ms, floor "
                        f"{ms(seconds['floor'])} ms ({results[-1]['ratio']:.2f}x), echo "
                        f"{ms(seconds['echo'])} ms",
                        flush=True,
                    )
        finally:
            client.close()
            echo.close()
    print()
    print_results(results, stages)
    elapsed = time.monotonic() - started
    print(
        f"\nTarget: service <= {TARGET}x the floor (printed, never asserted). Done in "
        f"{elapsed:.0f} s; load average before {load_before[0]:.2f}, after "
        f"{os.getloadavg()[0]:.2f}"
    )
    if args.json:
        report = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "numpy": np.__version__,
                "orjson": orjson.__version__,
            },
            "target": TARGET,
            "results": results,
            "seconds": elapsed,
            "load_average": {"before": load_before, "after": os.getloadavg()},
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"Figures written to {args.json}")


if __name__ == "__main__":
    main()
