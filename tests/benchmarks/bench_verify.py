"""Verifying a 64 MiB candidate beside the op's own row: in process and over HTTP.

    .venv/bin/python tests/benchmarks/bench_verify.py            # 64 MiB float32
    .venv/bin/python tests/benchmarks/bench_verify.py --mib 16   # another size

In process, ``tensor_ops_wire.verdict.compare`` (bit-equal, and with a ULP tolerance on a
candidate whose every 1000th element is 1 ULP off) against the Roll kernel the verdict checks
(``app.ops.roll``) and ``np.copyto`` of the same bytes. Over HTTP (a fresh single-worker
server on 127.0.0.1), ``POST /verify/roll`` with a case file (inputs and the candidate, raw
``.npz``) against ``POST /roll`` with the inputs (``.npz`` in, raw ``.npy`` out). Each pair is
timed side by side, interleaved, its order swapped every round; the medians are printed, never
asserted.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))

from app.ops.roll import roll
from tensor_ops_wire.cases import encode_case
from tensor_ops_wire.npz import encode_npz
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


def over_http(data: np.ndarray) -> dict[str, float]:
    from tests.support import launch_server, stop_server  # noqa: PLC0415

    inputs = {"data": data, "shift": np.array(1), "axes": np.array(0)}
    op_body = encode_npz(inputs)
    case_body = encode_case("roll", inputs, {"output": np.roll(data, 1, axis=0)})
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": "0", "TENSOR_OPS_LOG_LEVEL": "warning"}
    )
    try:
        with httpx.Client(base_url=url, timeout=120) as client:

            def post(path: str, body: bytes, accept: str) -> None:
                answer = client.post(
                    path,
                    content=body,
                    headers={"content-type": "application/x-npz", "accept": accept},
                )
                assert answer.status_code == 200, answer.text[:200]

            post("/verify/roll", case_body, "application/json")  # warm up
            return interleaved(
                {
                    "POST /roll (.npz in, .npy out)": lambda: post(
                        "/roll", op_body, "application/x-npy"
                    ),
                    "POST /verify/roll (case file in, verdict out)": lambda: post(
                        "/verify/roll", case_body, "application/json"
                    ),
                },
                rounds=5,
            )
    finally:
        stop_server(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="the candidate's size (default 64)")
    parser.add_argument("--no-http", action="store_true", help="in process only")
    args = parser.parse_args()
    count = args.mib * (1 << 20) // 4
    data = np.random.default_rng(0).standard_normal(count).astype(np.float32).reshape(-1, 1024)
    print(f"float32 {data.shape}, {args.mib} MiB; medians of interleaved runs\n")
    for title, figures in [("in process", in_process(data))] + (
        [] if args.no_http else [("over HTTP, one worker", over_http(data))]
    ):
        anchor = next(iter(figures.values()))
        print(f"{title}:")
        for name, seconds in figures.items():
            print(f"  {name:<48} {seconds * 1e3:8.1f} ms  {seconds / anchor:5.2f}x")
        print()


if __name__ == "__main__":
    main()
