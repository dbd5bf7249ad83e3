"""Every kind of malformed or hostile body, on every transport, against 2 real workers.

Each gets its 4xx with the error shape of its route (``{"detail": [...]}``, or ``{"error"}`` on
/v2), no traceback, and afterwards both workers are the same processes, still serving.
"""

import gzip
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.support import (
    b64,
    gzip_bomb,
    header_npy,
    launch_server,
    npy_bytes,
    server_output,
    stop_server,
    zip_bytes,
)

pytestmark = pytest.mark.e2e
JSON = {"content-type": "application/json"}
NPZ = {"content-type": "application/x-npz"}


def roll_json(data: Any, **extra: Any) -> bytes:
    return orjson.dumps({"data": data, "shift": 1, "axes": 0, **extra})


def v2(inputs: list[dict[str, Any]], **extra: Any) -> bytes:
    return orjson.dumps({"inputs": inputs, **extra})


GOOD_SHIFT = {"name": "shift", "shape": [], "datatype": "INT64", "data": [1]}
GOOD_AXES = {"name": "axes", "shape": [], "datatype": "INT64", "data": [0]}
DEEP = b"[" * 100 + b"1" + b"]" * 100

CASES: list[tuple[str, str, dict[str, str], bytes, int]] = [
    # (name, path, headers, body, status)
    ("bad JSON", "/roll", JSON, b'{"data": [1, 2', 400),
    ("bad UTF-8", "/roll", JSON, b'{"data": "\xff\xfe", "shift": 1, "axes": 0}', 400),
    ("NaN token", "/roll", JSON, b'{"data": [NaN], "shift": 1, "axes": 0}', 400),
    ("Infinity token", "/roll", JSON, b'{"data": [Infinity], "shift": 1, "axes": 0}', 400),
    ("1e400", "/roll", JSON, b'{"data": [1e400], "shift": 1, "axes": 0}', 400),
    ("ragged", "/roll", JSON, roll_json([[1, 2], [3]]), 400),
    ("mixed bool and number", "/roll", JSON, roll_json([True, 2]), 422),
    ("strings", "/roll", JSON, roll_json(["a", "b"]), 422),
    ("nulls", "/roll", JSON, roll_json([None]), 422),
    ("deep nesting", "/roll", JSON, b'{"data": ' + DEEP + b', "shift": 1, "axes": 0}', 413),
    ("very deep nesting", "/roll", JSON, b'{"data": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    ("int8 overflow", "/roll", JSON, roll_json([300], dtype="int8"), 422),
    ("float16 overflow", "/roll", JSON, roll_json([1e6], dtype="float16"), 422),
    ("int64 overflow", "/roll", JSON, roll_json([2**63]), 422),
    ("float shift", "/roll", JSON, orjson.dumps({"data": [1], "shift": 1.5, "axes": 0}), 422),
    ("bool axes", "/roll", JSON, orjson.dumps({"data": [1], "shift": 1, "axes": True}), 422),
    ("huge axis", "/roll", JSON, b'{"data": [1], "shift": 1, "axes": 100000000000000000000}', 422),
    ("bad base64", "/roll", JSON, roll_json("@@@@"), 400),
    ("not an npy", "/roll", JSON, roll_json(b64(b"hello world, not numpy")), 400),
    (
        "shape larger than payload",
        "/roll",
        JSON,
        roll_json(
            b64(header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000,)}", b"\0" * 8))
        ),
        400,
    ),
    (
        "negative dimension",
        "/roll",
        JSON,
        roll_json(b64(header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}"))),
        400,
    ),
    (
        "overflowing dimensions",
        "/roll",
        JSON,
        roll_json(
            b64(
                header_npy(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"
                )
            )
        ),
        400,
    ),
    (
        "code in the header",
        "/roll",
        JSON,
        roll_json(b64(header_npy("__import__('os').system('id')"))),
        400,
    ),
    (
        "pickled object array",
        "/roll",
        JSON,
        roll_json(b64(npy_bytes(np.array([{"x": 1}], dtype=object)))),
        400,
    ),
    ("raw pickle", "/roll", JSON, roll_json(b64(pickle.dumps([1, 2, 3]))), 400),
    ("complex dtype", "/roll", JSON, roll_json(b64(npy_bytes(np.zeros(2, np.complex128)))), 422),
    ("string dtype", "/roll", JSON, roll_json(b64(npy_bytes(np.array(["ab", "cd"])))), 422),
    ("object dtype name", "/roll", JSON, roll_json([1], dtype="object"), 422),
    ("truncated npy", "/roll", JSON, roll_json(b64(npy_bytes(np.arange(10))[:-7])), 400),
    ("wrong content type", "/roll", {"content-type": "text/csv"}, b"1,2,3", 415),
    (
        "form content type",
        "/gather",
        {"content-type": "application/x-www-form-urlencoded"},
        b"a=1",
        415,
    ),
    ("axes out of range", "/roll", JSON, orjson.dumps({"data": [[1]], "shift": 1, "axes": 2}), 422),
    (
        "batch_dims above axis",
        "/gather",
        JSON,
        orjson.dumps({"data": [[1, 2]], "indices": [[0]], "axis": 0, "batch_dims": 1}),
        422,
    ),
    (
        "gather output of 10**11 bytes",
        "/gather",
        JSON,
        orjson.dumps(
            {
                "data": b64(npy_bytes(np.zeros((1, 100000)))),
                "indices": b64(npy_bytes(np.zeros(125000, np.int64))),
                "axis": 0,
            }
        ),
        413,
    ),
    (
        "gzip bomb",
        "/roll",
        {**JSON, "content-encoding": "gzip"},
        gzip_bomb(16 << 20),  # twice what the workers take (8 MiB)
        413,
    ),
    (
        "truncated gzip",
        "/roll",
        {**JSON, "content-encoding": "gzip"},
        gzip.compress(roll_json([1, 2]))[:-9],
        400,
    ),
    ("npz not a zip", "/roll", NPZ, b"PK\x05\x06garbage", 400),
    (
        "npz pickled member",
        "/roll",
        NPZ,
        zip_bytes(
            {
                "data.npy": npy_bytes(np.array([None], dtype=object)),
                "shift.npy": npy_bytes(1),
                "axes.npy": npy_bytes(0),
            }
        ),
        400,
    ),
    (
        "npz missing member",
        "/roll",
        NPZ,
        zip_bytes({"data.npy": npy_bytes([1, 2]), "shift.npy": npy_bytes(1)}),
        422,
    ),
    (
        "v2 BYTES",
        "/v2/models/roll/infer",
        JSON,
        v2(
            [
                {"name": "data", "shape": [1], "datatype": "BYTES", "data": ["a"]},
                GOOD_SHIFT,
                GOOD_AXES,
            ]
        ),
        422,
    ),
    (
        "v2 shape lies",
        "/v2/models/roll/infer",
        JSON,
        v2(
            [
                {"name": "data", "shape": [1000], "datatype": "FP32", "data": [1.0]},
                GOOD_SHIFT,
                GOOD_AXES,
            ]
        ),
        400,
    ),
    (
        "v2 binary size lies",
        "/v2/models/roll/infer",
        {"inference-header-content-length": "999999"},
        b"{}",
        400,
    ),
    ("v2 unknown model", "/v2/models/conv/infer", JSON, v2([]), 404),
]


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[str, Any]]:
    # Bodies of 8 MiB at most (the largest case is 2.4 MB): the gzip bomb need not be huge.
    env = {"TENSOR_OPS_WORKERS": "2", "TENSOR_OPS_MAX_BODY_BYTES": str(8 << 20)}
    url, process = launch_server(env, command=["-m", "app"])
    yield url, process
    stop_server(process)


def worker_pids(parent: int) -> set[int]:
    """The uvicorn workers under ``parent`` (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return {
        int(pid)
        for pid in children
        if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    }


@pytest.fixture(scope="module")
def results(workers: tuple[str, Any]) -> dict[str, httpx.Response]:
    url, process = workers
    before = worker_pids(process.pid)
    assert len(before) == 2
    answers = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for name, path, headers, body, _ in CASES:
            answers[name] = client.post(path, content=body, headers=headers)
        assert client.post("/roll", json={"data": [1, 2, 3], "shift": 1, "axes": 0}).json()[
            "data"
        ] == [3, 1, 2]
    assert worker_pids(process.pid) == before, "a worker died or was replaced"
    output = server_output(process)
    assert "Traceback" not in output
    assert not re.search(r'"status": 5\d\d', output)
    return answers


@pytest.mark.parametrize(
    ("name", "path", "headers", "body", "status"), CASES, ids=[case[0] for case in CASES]
)
def test_hostile_input_gets_its_4xx(
    results: dict[str, httpx.Response],
    name: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
) -> None:
    response = results[name]
    assert response.status_code == status, response.text[:500]
    payload = response.json()
    if path.startswith("/v2"):
        assert set(payload) == {"error"}
        assert payload["error"]
    else:
        item = payload["detail"][0]
        assert item["msg"]
        assert item["type"]
        assert isinstance(item["loc"], list)
    assert "Traceback" not in response.text
