"""Verifying a 64 MiB candidate beside the op's own row: in process and over HTTP.

    .venv/bin/python tests/benchmarks/bench_verify.py            # 64 MiB float32
    .venv/bin/python tests/benchmarks/bench_verify.py --mib 16   # another size

In process, ``tensor_ops_wire.verdict.compare`` (bit-equal, and with a ULP tolerance on a
candidate whose every 1000th element is 1 ULP off) against the Roll kernel the verdict checks
(``app.ops.roll``) and ``np.copyto`` of the same bytes. Through the client (a fresh
single-worker server on 127.0.0.1, HTTP and gRPC), per transport, ``client.verify`` (the
inputs and the candidate up, the verdict down: a case file over ``npz``, ``v2`` and ``grpc``,
a JSON body over ``json``) against ``client.call`` of the op on the same transport (the inputs
up, the output down). Each pair is timed side by side, interleaved, its order swapped every
round; the medians are printed, never asserted.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))

from app.ops.roll import roll
from tensor_ops_client import TensorOpsClient, Transport
from tensor_ops_wire.verdict import compare

ROUNDS = 7


def interleaved(things: dict[str, Callable[[], object]], rounds: int = ROUNDS) -> dict[str, float]:
    """The median seconds of each thing, timed one after the other, the order swapped each
    round (a shared machine's noise hits them alike)."""
    times: dict[str, list[float]] = {name: [] for name in things}
    names = list(things)
    for number in range(rounds):
        for name in names if number % 2 == 0 else reversed(names):
            started = time.perf_counter()
            things[name]()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def in_process(data: np.ndarray) -> dict[str, float]:
    reference = np.roll(data, 1, axis=0)
    equal = reference.copy()
    near = reference.copy()
    near.reshape(-1).view(np.uint32)[::1000] += np.uint32(1)
    target = np.empty_like(data)
    return interleaved(
        {
            "np.copyto (the bytes' floor)": lambda: np.copyto(target, data),
            "roll kernel (the op)": lambda: roll(data, 1, 0),
            "compare, equal candidate": lambda: compare({"output": reference}, {"output": equal}),
            "compare, 0.1% 1 ULP off, ulp 1": lambda: compare(
                {"output": reference}, {"output": near}, {"ulp": 1}
            ),
        }
    )


def through_the_client(
    data: np.ndarray, transports: list[Transport]
) -> dict[str, dict[str, float]]:
    """Per transport, ``client.verify`` (inputs and candidate up, the verdict down) against
    ``client.call`` of the op (inputs up, the output down), as a user's program runs them."""
    from tests.support import free_port, launch_server, stop_server  # noqa: PLC0415

    inputs = {"data": data, "shift": np.array(1), "axes": np.array(0)}
    expected = np.roll(data, 1, axis=0)
    grpc_port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(grpc_port)}, settled=True)
    figures = {}
    try:
        for transport in transports:
            target = f"127.0.0.1:{grpc_port}" if transport == "grpc" else None
            with TensorOpsClient(
                url, transport=transport, timeout=120, grpc_target=target
            ) as client:

                def verify(client: TensorOpsClient = client) -> None:
                    assert client.verify("roll", inputs, {"output": expected}).equal

                def call(client: TensorOpsClient = client) -> None:
                    assert client.call("roll", inputs).shape == data.shape

                verify()  # warm up both
                call()
                figures[f"transport {transport!r}"] = interleaved(
                    {"call('roll')": call, "verify('roll')": verify}, rounds=5
                )
    finally:
        stop_server(process)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="the candidate's size (default 64)")
    parser.add_argument("--no-http", action="store_true", help="in process only")
    parser.add_argument(
        "--transports",
        default="npz,json,v2,grpc",
        help="the client's transports to time (default npz,json,v2,grpc)",
    )
    args = parser.parse_args()
    count = args.mib * (1 << 20) // 4
    data = np.random.default_rng(0).standard_normal(count).astype(np.float32).reshape(-1, 1024)
    print(f"float32 {data.shape}, {args.mib} MiB; medians of interleaved runs\n")
    tables = {"in process": in_process(data)}
    if not args.no_http:
        tables |= through_the_client(data, cast(list[Transport], args.transports.split(",")))
    for title, figures in tables.items():
        anchor = next(iter(figures.values()))
        print(f"{title}:")
        for name, seconds in figures.items():
            print(f"  {name:<48} {seconds * 1e3:8.1f} ms  {seconds / anchor:5.2f}x")
        print()


if __name__ == "__main__":
    main()
