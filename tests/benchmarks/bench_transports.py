"""One large roll through every transport of a real uvicorn, client work included, side by side.

    .venv/bin/python tests/benchmarks/bench_transports.py [--mib 64] [--repeat 5]

Unlike ``bench.py`` (which times the server against an echo with a bare socket client), this
times what a user sees with httpx: the request sent, the answer read and decoded into an array;
and the Python client of ``app/client.py``. Prints medians and ratios to the JSON route with
base64 .npy. Never asserts a time.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tensor_ops_client import TensorOpsClient
from tests.benchmarks.bench import ROLL_AXES, ROLL_SHIFT, Transport, transports
from tests.support import launch_server, stop_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    side = int((args.mib * (1 << 20) // 4) ** 0.5)
    data = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    expected = np.roll(data, tuple(ROLL_SHIFT), tuple(ROLL_AXES))
    limits = {
        "TENSOR_OPS_MAX_BODY_BYTES": str(2 << 30),
        "TENSOR_OPS_MAX_OUTPUT_BYTES": str(4 << 30),
    }
    url, process = launch_server(limits)
    try:
        http = httpx.Client(base_url=url, timeout=600)
        client = TensorOpsClient(url, timeout=600)
        calls: list[tuple[str, Callable[[], np.ndarray]]] = []
        for transport in transports(data):

            def call(transport: Transport = transport) -> np.ndarray:
                reply = http.post(transport.path, content=transport.body, headers=transport.headers)
                return transport.decode(dict(reply.headers), memoryview(reply.content))

            calls.append((transport.label, call))
        calls.append(("Python client (.npz)", lambda: client.roll(data, ROLL_SHIFT, ROLL_AXES)))
        times: dict[str, list[float]] = {name: [] for name, _ in calls}
        for round_ in range(args.repeat + 1):
            for name, run in calls:  # interleaved, so noise hits all alike
                start = time.perf_counter()
                output = run()
                elapsed = time.perf_counter() - start
                if round_ == 0:
                    np.testing.assert_array_equal(output, expected)
                else:
                    times[name].append(elapsed)
        anchor = statistics.median(times[calls[0][0]])
        print(
            f"roll of {data.nbytes / (1 << 20):.0f} MiB float32 {data.shape}, median of {args.repeat}"
        )
        print(f"{'transport':40} {'median ms':>10} {'vs JSON base64':>15}")
        for name, _ in calls:
            median = statistics.median(times[name])
            print(f"{name:40} {median * 1000:10.0f} {median / anchor:14.2f}x")
    finally:
        stop_server(process)


if __name__ == "__main__":
    main()
