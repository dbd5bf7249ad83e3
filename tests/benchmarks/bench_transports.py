"""One large roll through every transport of a real uvicorn, timed side by side in one run.

    .venv/bin/python tests/benchmarks/bench_transports.py [--mib 64] [--repeat 5]

Prints the median wall time of each transport (request sent, answer read and decoded by the
client) and its ratio to the JSON route with base64 .npy. Never asserts a time.
"""

import argparse
import base64
import io
import statistics
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.client import TensorOpsClient
from tests.conftest import launch_server, stop_server


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--v2-json", action="store_true", help="also time /v2 with JSON tensors")
    args = parser.parse_args()
    side = int((args.mib * (1 << 20) // 4) ** 0.5)
    data = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    shift, axes = np.array([3, -7]), np.array([0, 1])
    expected = np.roll(data, (3, -7), (0, 1))
    url, process = launch_server(
        {"TENSOR_OPS_MAX_BODY_BYTES": str(2 << 30), "TENSOR_OPS_MAX_OUTPUT_BYTES": str(4 << 30)}
    )
    try:
        http = httpx.Client(base_url=url, timeout=600)
        json_body = orjson.dumps(
            {
                "data": base64.b64encode(npy(data)).decode(),
                "shift": shift.tolist(),
                "axes": axes.tolist(),
            }
        )
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, array in (("data", data), ("shift", shift), ("axes", axes)):
                archive.writestr(f"{name}.npy", npy(array))
        npz_body = buffer.getvalue()
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
        v2_body = head + data.tobytes() + shift.tobytes() + axes.tobytes()

        def json_base64() -> np.ndarray:
            reply = http.post(
                "/roll", content=json_body, headers={"content-type": "application/json"}
            )
            return np.load(io.BytesIO(base64.b64decode(orjson.loads(reply.content)["data"])))

        def json_accept_npy() -> np.ndarray:
            reply = http.post(
                "/roll",
                content=json_body,
                headers={"content-type": "application/json", "accept": "application/x-npy"},
            )
            return np.load(io.BytesIO(reply.content))

        def npz_raw() -> np.ndarray:
            reply = http.post(
                "/roll", content=npz_body, headers={"content-type": "application/x-npz"}
            )
            return np.load(io.BytesIO(reply.content))

        def v2_binary() -> np.ndarray:
            reply = http.post(
                "/v2/models/roll/infer",
                content=v2_body,
                headers={"inference-header-content-length": str(len(head))},
            )
            length = int(reply.headers["inference-header-content-length"])
            return np.frombuffer(reply.content[length:], dtype="<f4").reshape(data.shape)

        client = TensorOpsClient(url, timeout=600)

        def python_client() -> np.ndarray:
            return client.roll(data, shift, axes)

        def v2_json() -> np.ndarray:
            request = {
                "inputs": [
                    {
                        "name": "data",
                        "shape": list(data.shape),
                        "datatype": "FP32",
                        "data": data.reshape(-1),
                    },
                    {"name": "shift", "shape": [2], "datatype": "INT64", "data": shift},
                    {"name": "axes", "shape": [2], "datatype": "INT64", "data": axes},
                ]
            }
            body = orjson.dumps(request, option=orjson.OPT_SERIALIZE_NUMPY)
            reply = http.post(
                "/v2/models/roll/infer", content=body, headers={"content-type": "application/json"}
            )
            return np.array(
                orjson.loads(reply.content)["outputs"][0]["data"], dtype=np.float32
            ).reshape(data.shape)

        transports: list[tuple[str, Callable[[], np.ndarray]]] = [
            ("JSON, base64 .npy in and out", json_base64),
            ("JSON, base64 .npy in, Accept: .npy", json_accept_npy),
            (".npz in, raw .npy out", npz_raw),
            ("/v2 binary tensors", v2_binary),
            ("Python client (.npz)", python_client),
        ]
        if args.v2_json:
            transports.append(("/v2 JSON tensors", v2_json))
        times: dict[str, list[float]] = {name: [] for name, _ in transports}
        for round_ in range(args.repeat + 1):
            for name, call in transports:  # interleaved, so noise hits all alike
                start = time.perf_counter()
                output = call()
                elapsed = time.perf_counter() - start
                if round_ == 0:
                    np.testing.assert_array_equal(output, expected)
                else:
                    times[name].append(elapsed)
        anchor = statistics.median(times[transports[0][0]])
        print(
            f"roll of {data.nbytes / (1 << 20):.0f} MiB float32 {data.shape}, median of {args.repeat}"
        )
        print(f"{'transport':40} {'median ms':>10} {'vs JSON base64':>15}")
        for name, _ in transports:
            median = statistics.median(times[name])
            print(f"{name:40} {median * 1000:10.0f} {median / anchor:14.2f}x")
    finally:
        stop_server(process)


if __name__ == "__main__":
    main()
