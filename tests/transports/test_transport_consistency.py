"""One fault, one status, on every transport (contract, section 4), tested as a table.

Rows are faults, columns are transports; each cell is one request and one test id
(``missing-input:v2-binary``), so a failure names its cell. A cell checks the status, the error
body's shape (``{"detail": [{"loc", "msg", "type"}]}`` on the plain routes, ``{"error"}`` alone on
``/v2``) and, where the fault concerns a field, that the field is named (in ``loc``, or in the
``/v2`` error text). docs/contract.md holds the same table; ``test_readme_table_matches`` keeps
the two from drifting.

Transports:

- ``json``: ``POST /roll|/gather``, a JSON body, tensors as nested arrays;
- ``npy``: the same routes, tensors as base64 ``.npy`` strings in the JSON body;
- ``npz``: the same routes, an ``np.savez`` archive (``application/x-npz``), ``batch_dims`` and
  ``dtype`` as query parameters;
- ``v2-json``: ``POST /v2/models/{roll|gather}/infer``, JSON tensor data;
- ``v2-binary``: the same with Triton's binary tensor extension;
- ``gRPC``: ``ModelInfer`` of KServe V2 over gRPC, tensors as raw contents, sent to the same
  app's pipeline served in-process; the cell checks the status code the contract maps the
  status to, that the message names the field, and that the fault kind (trailing metadata)
  is the plain routes' ``type``.
"""

import base64
import gzip
import hashlib
import io
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from dataclasses import field as default
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import (
    assert_same_bits,
    b64,
    grpc_channel,
    grpc_serving,
    npy_b64,
    npy_bytes,
    npz_bytes,
    raw_infer,
    v2_binary_body,
    zip_bytes,
)

pytestmark = pytest.mark.anyio

README = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
SECTION = "## Errors: one fault, one status on every transport"
TRANSPORTS = ("json", "npy", "npz", "v2-json", "v2-binary")
PLAIN = ("json", "npy", "npz")
#: The gRPC code of each HTTP status (contract, section 4).
GRPC_CODES = {
    400: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    413: "RESOURCE_EXHAUSTED",
    503: "RESOURCE_EXHAUSTED",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
}
#: The small limits of the limit rows, one app each (built once per module).
LIMITED_SETTINGS = {
    "body": Settings(max_body_bytes=2048),
    "output": Settings(max_output_bytes=4096),
    "rank": Settings(max_rank=4),
}

Array = npt.NDArray[Any]
Arrays = dict[str, Array]


# --- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One HTTP request: POST ``path`` with ``content``, ``headers`` and query ``params``."""

    path: str
    content: bytes
    headers: dict[str, str]
    params: dict[str, str] = default(default_factory=dict)


JSON_HEADERS = {"content-type": "application/json"}
NPZ_HEADERS = {"content-type": "application/x-npz"}
V2_TYPES = {
    "bool": "BOOL",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}


def plain(
    op: str,
    arrays: Arrays,
    *,
    npy: bool = False,
    batch_dims: object = None,
    dtype: str | None = None,
    raw: dict[str, Any] | None = None,
) -> Call:
    """A JSON body for ``/roll`` or ``/gather``: tensors as nested arrays, or as base64 .npy."""
    body: dict[str, Any] = {
        name: npy_b64(array) if npy else array.tolist() for name, array in arrays.items()
    }
    if batch_dims is not None:
        body["batch_dims"] = batch_dims
    if dtype is not None:
        body["dtype"] = dtype
    body.update(raw or {})
    return Call(f"/{op}", orjson.dumps(body), dict(JSON_HEADERS))


def js(op: str, arrays: Arrays, **options: Any) -> Call:
    return plain(op, arrays, **options)


def ny(op: str, arrays: Arrays, **options: Any) -> Call:
    return plain(op, arrays, npy=True, **options)


def nz(
    op: str,
    arrays: Arrays,
    *,
    batch_dims: object = None,
    dtype: str | None = None,
    members: dict[str, bytes] | None = None,
    raw: dict[str, Any] | None = None,
) -> Call:
    """An ``.npz`` body (``np.savez``), ``batch_dims`` and ``dtype`` in the query (and ``raw``'s
    names, as their text); ``members``: an archive laid out as ``np.savez`` writes one, with
    members of any bytes."""
    if members is None:
        named: dict[str, Any] = dict(arrays)
        content = npz_bytes(**named)
    else:
        content = zip_bytes({f"{name}.npy": payload for name, payload in members.items()})
    params = {}
    if batch_dims is not None:
        params["batch_dims"] = str(batch_dims)
    if dtype is not None:
        params["dtype"] = dtype
    params.update({name: str(value) for name, value in (raw or {}).items()})
    return Call(f"/{op}", content, dict(NPZ_HEADERS), params)


def v2_input(name: str, array: Array, datatype: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype or V2_TYPES[array.dtype.name],
    }


def v2_head(
    arrays: Arrays,
    parameters: dict[str, Any] | None,
    datatypes: dict[str, str] | None,
    shapes: dict[str, list[int]] | None,
    binary_output: bool | None,
) -> dict[str, Any]:
    head: dict[str, Any] = {
        "inputs": [
            v2_input(name, array, (datatypes or {}).get(name)) for name, array in arrays.items()
        ]
    }
    for item in head["inputs"]:
        item["shape"] = (shapes or {}).get(item["name"], item["shape"])
    if parameters is not None:
        head["parameters"] = parameters
    if binary_output is not None:
        head["outputs"] = [{"name": "output", "parameters": {"binary_data": binary_output}}]
    return head


def vj(
    op: str,
    arrays: Arrays,
    *,
    parameters: dict[str, Any] | None = None,
    datatypes: dict[str, str] | None = None,
    shapes: dict[str, list[int]] | None = None,
    model: str | None = None,
) -> Call:
    """A ``/v2`` infer request with JSON tensor data (flat, row-major)."""
    head = v2_head(arrays, parameters, datatypes, shapes, None)
    for item, array in zip(head["inputs"], arrays.values(), strict=True):
        item["data"] = array.reshape(-1).tolist()
    return Call(f"/v2/models/{model or op}/infer", orjson.dumps(head), dict(JSON_HEADERS))


def vb(
    op: str,
    arrays: Arrays,
    *,
    parameters: dict[str, Any] | None = None,
    datatypes: dict[str, str] | None = None,
    shapes: dict[str, list[int]] | None = None,
    model: str | None = None,
    binary_output: bool = True,
) -> Call:
    """A ``/v2`` infer request with Triton's binary tensors (a JSON header, then raw bytes)."""
    head = v2_head(arrays, parameters, datatypes, shapes, binary_output)
    chunks = [
        np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        for array in arrays.values()
    ]
    content, headers = v2_binary_body(head, chunks)
    return Call(f"/v2/models/{model or op}/infer", content, headers)


def gr(
    op: str,
    arrays: Arrays,
    *,
    parameters: dict[str, Any] | None = None,
    datatypes: dict[str, str] | None = None,
    shapes: dict[str, list[int]] | None = None,
    model: str | None = None,
) -> bytes:
    """A gRPC ``ModelInferRequest``, serialised: every tensor as raw contents."""
    request = pb.ModelInferRequest(model_name=model or op)
    for name, array in arrays.items():
        request.inputs.add(
            name=name,
            datatype=(datatypes or {}).get(name) or V2_TYPES[array.dtype.name],
            shape=(shapes or {}).get(name, list(array.shape)),
        )
        little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        request.raw_input_contents.append(little.tobytes())
    for name, value in (parameters or {}).items():
        parameter = request.parameters[name]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            parameter.int64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        else:
            parameter.string_param = str(value)
    return request.SerializeToString()


def with_headers(call: Call, **headers: str) -> Call:
    return Call(call.path, call.content, {**call.headers, **headers}, call.params)


def text_plain(call: Call) -> Call:
    return with_headers(call, **{"content-type": "text/plain"})


def brotli(call: Call) -> Call:
    return with_headers(call, **{"content-encoding": "br"})


def corrupt_gzip(call: Call) -> Call:
    """The request gzip-compressed, its deflate stream damaged after the 10-byte gzip header."""
    packed = bytearray(gzip.compress(call.content))
    for position in range(10, len(packed) - 8):
        packed[position] ^= 0x5A
    return Call(call.path, bytes(packed), {**call.headers, "content-encoding": "gzip"})


def cut(call: Call) -> Call:
    """The first half of the body: JSON that ends mid-value, a zip with no directory."""
    return Call(call.path, call.content[: len(call.content) // 2], call.headers, call.params)


def cut_v2_header(call: Call) -> Call:
    """A binary ``/v2`` request whose JSON header is cut in half (its length header says so)."""
    length = int(call.headers["inference-header-content-length"])
    header, tensors = call.content[:length], call.content[length:]
    half = header[: length // 2]
    headers = {**call.headers, "inference-header-content-length": str(len(half))}
    return Call(call.path, half + tensors, headers)


# --- tensors ----------------------------------------------------------------------------------


def i64(value: Any) -> Array:
    return np.array(value, dtype=np.int64)


DATA = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
ROLL: Arrays = {"data": DATA, "shift": i64(1), "axes": i64(0)}
GATHER: Arrays = {"data": DATA, "indices": i64([2, 0]), "axis": i64(1)}
NAN_DATA = np.array([[1.5, np.nan], [-0.0, np.inf]], dtype=np.float32)
NAN_ROLL: Arrays = {"data": NAN_DATA, "shift": i64(1), "axes": i64(1)}


def roll_with(**changes: Array | None) -> Arrays:
    """Roll's inputs with some replaced (``None`` drops one), in the order data, shift, axes."""
    arrays = dict(ROLL)
    for name, value in changes.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    return arrays


def gather_with(**changes: Array) -> Arrays:
    return {**GATHER, **changes}


# The limit rows' requests.
BIG_ROLL = roll_with(data=np.zeros((2, 600), np.float32))  # ~4.8 KB as .npy; limit 2048 bytes
WIDE_GATHER = gather_with(  # a 1 KB body asking for a 4 x 1024 float32 output; limit 4096 bytes
    data=np.zeros((4, 8), np.float32), indices=np.zeros(1024, np.int8)
)
DEEP_ROLL = roll_with(data=np.zeros((1, 1, 1, 1, 2), np.float32), axes=i64(4))  # rank 5; limit 4


# --- 200 answers of the NaN row: the bits come back ---------------------------------------------


def expected_nan_output() -> Array:
    return np.roll(NAN_DATA, 1, axis=1)


def npy_answer_in_json(response: httpx.Response) -> None:
    body = response.json()
    output = np.load(io.BytesIO(base64.b64decode(body["data"])), allow_pickle=False)
    assert_same_bits(output, expected_nan_output())


def raw_npy_answer(response: httpx.Response) -> None:
    assert response.headers["content-type"] == "application/x-npy"
    assert_same_bits(
        np.load(io.BytesIO(response.content), allow_pickle=False), expected_nan_output()
    )


def binary_v2_answer(response: httpx.Response) -> None:
    length = int(response.headers["inference-header-content-length"])
    output = orjson.loads(response.content[:length])["outputs"][0]
    assert output["datatype"] == "FP32"
    raw = np.frombuffer(response.content[length:], dtype="<f4").reshape(output["shape"])
    assert_same_bits(raw, expected_nan_output())


# --- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One fault sent through one transport."""

    build: Callable[[], Call]
    #: The status the cell expects; ``None``: the row's status.
    status: int | None = None
    #: The field the fault concerns, when it names one (``None``: the row's field).
    field: str | None = None
    #: For a 200 cell: a check of the answer.
    verify: Callable[[httpx.Response], None] | None = None


@dataclass(frozen=True)
class Row:
    """One fault: its id, its README label, its status, the cells where it can be expressed."""

    key: str
    label: str
    status: int
    cells: dict[str, Cell]
    field: str | None = None
    app: str = "default"
    #: The gRPC code the contract maps the status to ("n/a" where gRPC cannot express it).
    grpc: str = ""
    #: The fault as a gRPC ``ModelInferRequest`` (serialised), where gRPC can express it.
    grpc_cell: Callable[[], bytes] | None = None
    #: Why a transport has no cell (README's "n/a"), keyed by transport.
    not_applicable: dict[str, str] = default(default_factory=dict)

    def expected(self, transport: str) -> int:
        status = self.cells[transport].status
        return self.status if status is None else status

    def grpc_code(self) -> str:
        return self.grpc or GRPC_CODES[self.status]


def every(builder: Callable[[Callable[..., Call]], Call]) -> dict[str, Cell]:
    """One cell per transport, each built by ``builder`` given the transport's request maker."""
    makers: dict[str, Callable[..., Call]] = {"json": js, "npy": ny, "npz": nz, "v2-json": vj}
    makers["v2-binary"] = vb

    def cell(maker: Callable[..., Call]) -> Cell:
        return Cell(lambda: builder(maker))

    return {transport: cell(makers[transport]) for transport in TRANSPORTS}


ROWS = [
    Row(
        "unreadable-body",
        "body not readable as JSON / not a zip archive / not a protobuf message",
        400,
        {
            "json": Cell(lambda: cut(js("roll", ROLL))),
            "npy": Cell(lambda: cut(ny("roll", ROLL))),
            "npz": Cell(lambda: cut(nz("roll", ROLL))),
            "v2-json": Cell(lambda: cut(vj("roll", ROLL))),
            "v2-binary": Cell(lambda: cut_v2_header(vb("roll", ROLL))),
        },
    ),
    Row(
        "unreadable-tensor",
        "tensor bytes unreadable (ragged array, bad .npy, v2 shape or binary_data_size "
        "not matching the data)",
        400,
        {
            "json": Cell(lambda: js("roll", ROLL, raw={"data": [[1, 2, 3], [4, 5]]})),
            "npy": Cell(lambda: ny("roll", ROLL, raw={"data": b64(b"not an npy")})),
            "npz": Cell(
                lambda: nz(
                    "roll",
                    ROLL,
                    members={
                        "data": b"not an npy",
                        "shift": npy_bytes(i64(1)),
                        "axes": npy_bytes(i64(0)),
                    },
                )
            ),
            "v2-json": Cell(lambda: vj("roll", ROLL, shapes={"data": [3, 3]})),
            "v2-binary": Cell(lambda: vb("roll", ROLL, shapes={"data": [3, 3]})),
        },
        field="data",
    ),
    Row(
        "corrupt-gzip",
        "gzip Content-Encoding with a corrupt body",
        400,
        every(lambda make: corrupt_gzip(make("roll", ROLL))),
        grpc="n/a",
    ),
    Row(
        "missing-input",
        "missing input (roll without axes)",
        422,
        every(lambda make: make("roll", roll_with(axes=None))),
        field="axes",
    ),
    Row(
        "unknown-input",
        "unknown input (an extra input, field or member `bogus`)",
        422,
        every(lambda make: make("roll", roll_with(bogus=i64(1)))),
        field="bogus",
    ),
    Row(
        "misspelt-attribute",
        "an attribute's name misspelt (`batchdims` for batch_dims)",
        422,
        {
            "json": Cell(lambda: js("gather", GATHER, raw={"batchdims": 1})),
            "npy": Cell(lambda: ny("gather", GATHER, raw={"batchdims": 1})),
            "npz": Cell(lambda: nz("gather", GATHER, raw={"batchdims": 1})),
            "v2-json": Cell(lambda: vj("gather", GATHER, parameters={"batchdims": 1})),
            "v2-binary": Cell(lambda: vb("gather", GATHER, parameters={"batchdims": 1})),
        },
        field="batchdims",
    ),
    Row(
        "batch-dims-on-roll",
        "batch_dims sent to roll",
        422,
        {
            "json": Cell(lambda: js("roll", ROLL, batch_dims=1)),
            "npy": Cell(lambda: ny("roll", ROLL, batch_dims=1)),
            "npz": Cell(lambda: nz("roll", ROLL, batch_dims=1)),
            "v2-json": Cell(lambda: vj("roll", ROLL, parameters={"batch_dims": 1})),
            "v2-binary": Cell(lambda: vb("roll", ROLL, parameters={"batch_dims": 1})),
        },
        field="batch_dims",
    ),
    Row(
        "batch-dims-not-integer",
        'batch_dims not an integer ("1", 1.5, query "x")',
        422,
        {
            "json": Cell(lambda: js("gather", GATHER, batch_dims="1")),
            "npy": Cell(lambda: ny("gather", GATHER, batch_dims=1.5)),
            "npz": Cell(lambda: nz("gather", GATHER, batch_dims="x")),
            "v2-json": Cell(lambda: vj("gather", GATHER, parameters={"batch_dims": "1"})),
            "v2-binary": Cell(lambda: vb("gather", GATHER, parameters={"batch_dims": 1.5})),
        },
        field="batch_dims",
    ),
    Row(
        "index-wrong-type",
        "index tensor of a wrong element type (shift 1.5 in JSON form, int16 elsewhere)",
        422,
        {
            "json": Cell(lambda: js("roll", roll_with(shift=np.array(1.5)))),
            **{
                transport: cell
                for transport, cell in every(
                    lambda make: make("roll", roll_with(shift=np.array(1, np.int16)))
                ).items()
                if transport != "json"
            },
        },
        field="shift",
    ),
    Row(
        "unknown-dtype",
        "unknown element type name (dtype complex128, query dtype=complex, v2 datatype FP8)",
        422,
        {
            "json": Cell(lambda: js("roll", ROLL, dtype="complex128")),
            "npy": Cell(lambda: ny("roll", ROLL, dtype="complex128")),
            "npz": Cell(lambda: nz("roll", ROLL, dtype="complex")),
            "v2-json": Cell(lambda: vj("roll", ROLL, datatypes={"data": "FP8"}), field="datatype"),
            "v2-binary": Cell(
                lambda: vb("roll", ROLL, datatypes={"data": "FP8"}), field="datatype"
            ),
        },
        field="dtype",
    ),
    Row(
        "roll-axis-out-of-range",
        "axis out of range (roll axes [5], data of rank 2)",
        422,
        every(lambda make: make("roll", roll_with(axes=i64([5])))),
        field="axes",
    ),
    Row(
        "gather-axis-out-of-range",
        "axis out of range (gather axis 3, data of rank 2)",
        422,
        every(lambda make: make("gather", gather_with(axis=i64(3)))),
        field="axis",
    ),
    Row(
        "shift-axes-lengths",
        "roll shift and axes of different lengths",
        422,
        every(lambda make: make("roll", roll_with(shift=i64([1, 1]), axes=i64([0])))),
        field="shift",
    ),
    Row(
        "batch-dims-out-of-range",
        "gather batch_dims out of range",
        422,
        {
            "json": Cell(lambda: js("gather", GATHER, batch_dims=3)),
            "npy": Cell(lambda: ny("gather", GATHER, batch_dims=3)),
            "npz": Cell(lambda: nz("gather", GATHER, batch_dims=3)),
            "v2-json": Cell(lambda: vj("gather", GATHER, parameters={"batch_dims": 3})),
            "v2-binary": Cell(lambda: vb("gather", GATHER, parameters={"batch_dims": 3})),
        },
        field="batch_dims",
    ),
    Row(
        "nan-as-json",
        "output holds NaN or infinity and must travel as JSON",
        422,
        {
            "npy": Cell(lambda: ny("roll", NAN_ROLL), status=200, verify=npy_answer_in_json),
            "npz": Cell(lambda: nz("roll", NAN_ROLL), status=200, verify=raw_npy_answer),
            # JSON tensor data cannot hold NaN, so the data travels as binary; the output is
            # asked for as JSON data, which is what this row is about.
            "v2-json": Cell(lambda: vb("roll", NAN_ROLL, binary_output=False)),
            "v2-binary": Cell(lambda: vb("roll", NAN_ROLL), status=200, verify=binary_v2_answer),
        },
        grpc="OK (carried)",
        not_applicable={
            "json": "JSON-form data cannot hold NaN (a NaN literal is unreadable JSON)"
        },
    ),
    Row(
        "unsupported-content-type",
        "unsupported Content-Type (text/plain)",
        415,
        every(lambda make: text_plain(make("roll", ROLL))),
        grpc="n/a",
    ),
    Row(
        "unsupported-encoding",
        "unsupported Content-Encoding (br)",
        415,
        every(lambda make: brotli(make("roll", ROLL))),
        grpc="n/a",
    ),
    Row(
        "body-too-large",
        "body over the body limit",
        413,
        every(lambda make: make("roll", BIG_ROLL)),
        app="body",
    ),
    Row(
        "output-too-large",
        "output over the output limit",
        413,
        every(lambda make: make("gather", WIDE_GATHER)),
        app="output",
    ),
    Row(
        "rank-too-large",
        "rank over the rank limit",
        413,
        every(lambda make: make("roll", DEEP_ROLL)),
        app="rank",
    ),
    Row(
        "no-api-key",
        "no API key (with TENSOR_OPS_API_KEYS_FILE set)",
        401,
        every(lambda make: make("roll", ROLL)),
        field="authorization",
        app="keyed",
    ),
    Row(
        "unknown-model",
        "unknown model",
        404,
        {
            "v2-json": Cell(lambda: vj("roll", ROLL, model="nope")),
            "v2-binary": Cell(lambda: vb("roll", ROLL, model="nope")),
        },
        not_applicable=dict.fromkeys(PLAIN, "no models on the plain routes"),
    ),
]

#: Each row's fault as a gRPC request, where gRPC can express it (its code: the row's ``grpc``).
GRPC_CELLS: dict[str, Callable[[], bytes]] = {
    # The message's last field (a raw tensor) cut short: not a protobuf message.
    "unreadable-body": lambda: gr("roll", ROLL)[:-3],
    "unreadable-tensor": lambda: gr("roll", ROLL, shapes={"data": [3, 3]}),
    "missing-input": lambda: gr("roll", roll_with(axes=None)),
    "unknown-input": lambda: gr("roll", roll_with(bogus=i64(1))),
    "misspelt-attribute": lambda: gr("gather", GATHER, parameters={"batchdims": 1}),
    "batch-dims-on-roll": lambda: gr("roll", ROLL, parameters={"batch_dims": 1}),
    "batch-dims-not-integer": lambda: gr("gather", GATHER, parameters={"batch_dims": "1"}),
    "index-wrong-type": lambda: gr("roll", roll_with(shift=np.array(1, np.int16))),
    "unknown-dtype": lambda: gr("roll", ROLL, datatypes={"data": "FP8"}),
    "roll-axis-out-of-range": lambda: gr("roll", roll_with(axes=i64([5]))),
    "gather-axis-out-of-range": lambda: gr("gather", gather_with(axis=i64(3))),
    "shift-axes-lengths": lambda: gr("roll", roll_with(shift=i64([1, 1]), axes=i64([0]))),
    "batch-dims-out-of-range": lambda: gr("gather", GATHER, parameters={"batch_dims": 3}),
    "nan-as-json": lambda: gr("roll", NAN_ROLL),
    "body-too-large": lambda: gr("roll", BIG_ROLL),
    "output-too-large": lambda: gr("gather", WIDE_GATHER),
    "rank-too-large": lambda: gr("roll", DEEP_ROLL),
    "unknown-model": lambda: gr("roll", ROLL, model="nope"),
    "no-api-key": lambda: gr("roll", ROLL),
}
ROWS = [replace(row, grpc_cell=GRPC_CELLS.get(row.key)) for row in ROWS]

CELLS = [
    pytest.param(row, transport, id=f"{row.key}:{transport}")
    for row in ROWS
    for transport in TRANSPORTS
    if transport in row.cells
]


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def apps(app: FastAPI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, FastAPI]:
    """The default app, one app per small limit, and one with API keys, built once."""
    limited = {name: create_app(settings) for name, settings in LIMITED_SETTINGS.items()}
    keys = tmp_path_factory.mktemp("keys") / "api-keys"
    keys.write_text(f"{hashlib.sha256(b'a key no cell sends').hexdigest()} table\n")
    keyed = create_app(Settings(api_keys_file=keys))
    return {"default": app, **limited, "keyed": keyed}


@pytest.fixture
async def clients(apps: dict[str, FastAPI]) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    opened = {
        name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        for name, app in apps.items()
    }
    try:
        yield opened
    finally:
        for client in opened.values():
            await client.aclose()


async def send(client: httpx.AsyncClient, call: Call) -> httpx.Response:
    return await client.post(
        call.path, content=call.content, headers=call.headers, params=call.params
    )


# --- checks -----------------------------------------------------------------------------------


def plain_error(response: httpx.Response) -> list[dict[str, Any]]:
    """The ``detail`` of a plain route's error, its shape checked."""
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict)
    assert set(body) == {"detail"}, body
    detail = body["detail"]
    assert isinstance(detail, list)
    assert detail, body
    for item in detail:
        assert set(item) == {"loc", "msg", "type"}, item
        assert isinstance(item["loc"], list)
        assert isinstance(item["msg"], str)
        assert isinstance(item["type"], str)
    return detail


def v2_error(response: httpx.Response) -> str:
    """The text of a ``/v2`` error, its shape (``{"error": str}`` and nothing else) checked."""
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict)
    assert set(body) == {"error"}, body
    assert isinstance(body["error"], str)
    return body["error"]


@pytest.mark.parametrize(("row", "transport"), CELLS)
async def test_one_fault_one_status(
    clients: dict[str, httpx.AsyncClient], row: Row, transport: str
) -> None:
    cell = row.cells[transport]
    response = await send(clients[row.app], cell.build())
    expected = row.expected(transport)
    assert response.status_code == expected, (
        f"{row.key} via {transport}: {response.status_code}, expected {expected}: "
        f"{response.text[:300]}"
    )
    if expected == 200:
        assert cell.verify is not None
        cell.verify(response)
        return
    named = cell.field or row.field
    if transport.startswith("v2"):
        text = v2_error(response)
        if named is not None:
            assert named in text, f"{named!r} is not named in {text!r}"
    else:
        detail = plain_error(response)
        if named is not None:
            assert named in detail[0]["loc"], f"{named!r} is not in the loc of {detail[0]}"


# An unreadable body is a different fault per format (not JSON, not a zip): same status, own kind.
_OWN_KIND_PER_FORMAT = {"unreadable-body"}
TYPED_KEYS = {
    row.key
    for row in ROWS
    if row.key not in _OWN_KIND_PER_FORMAT
    and all(transport in row.cells and row.expected(transport) != 200 for transport in PLAIN)
}
TYPED_ROWS = [pytest.param(row, id=row.key) for row in ROWS if row.key in TYPED_KEYS]


@pytest.mark.parametrize("row", TYPED_ROWS)
async def test_same_fault_kind_on_the_plain_routes(
    clients: dict[str, httpx.AsyncClient], row: Row
) -> None:
    """The same fault gives the same ``type`` (the first item's) in json, npy and npz alike."""
    kinds = {}
    for transport in PLAIN:
        response = await send(clients[row.app], row.cells[transport].build())
        kinds[transport] = plain_error(response)[0]["type"]
    assert len(set(kinds.values())) == 1, f"{row.key}: {kinds}"


GRPC_ROWS = [pytest.param(row, id=row.key) for row in ROWS if row.grpc_cell is not None]


@pytest.mark.parametrize("row", GRPC_ROWS)
async def test_one_fault_one_code_over_grpc(
    apps: dict[str, FastAPI], clients: dict[str, httpx.AsyncClient], row: Row
) -> None:
    """The row's fault through gRPC: the code of its HTTP status, the field named in the message,
    and the plain routes' fault kind in the trailing metadata."""
    assert row.grpc_cell is not None
    async with grpc_serving(apps[row.app]) as address, grpc_channel(address) as channel:
        try:
            answer = await raw_infer(channel)(row.grpc_cell())
        except grpc.aio.AioRpcError as error:
            code, message = error.code().name, error.details() or ""
            trailers = dict(error.trailing_metadata() or ())
        else:
            assert row.grpc_code() == "OK (carried)", f"{row.key}: answered, not refused"
            output = pb.ModelInferResponse.FromString(answer)
            raw = np.frombuffer(output.raw_output_contents[0], dtype="<f4")
            assert_same_bits(raw.reshape(list(output.outputs[0].shape)), expected_nan_output())
            return
    assert code == row.grpc_code(), f"{row.key}: {code} ({message}), expected {row.grpc_code()}"
    named = row.cells["v2-binary"].field or row.field if "v2-binary" in row.cells else row.field
    if named is not None:
        assert named in message, f"{named!r} is not named in {message!r}"
    if row.app != "body":  # past the message size limit, gRPC itself refuses the message
        assert "tensor-ops-fault" in trailers, trailers
    if "tensor-ops-fault" in trailers and row.key in TYPED_KEYS:
        plain_kind = plain_error(await send(clients[row.app], row.cells["json"].build()))[0]
        assert trailers["tensor-ops-fault"] == plain_kind["type"], row.key


def test_grpc_cells_are_the_rows_with_a_code() -> None:
    """Every row README gives a gRPC code has a gRPC cell; "n/a" rows have none."""
    for row in ROWS:
        assert (row.grpc_cell is None) == (row.grpc_code() == "n/a"), row.key


# --- README -----------------------------------------------------------------------------------


def readme_table() -> list[list[str]]:
    """The rows of the first table in README's section on the status table, cells stripped."""
    text = README.read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert rows, "the section holds no table"
    return [row for row in rows if not re.fullmatch(r"[-: ]*", "".join(row))]


def readme_cell(row: Row, transport: str) -> str:
    if transport not in row.cells:
        return "n/a"
    status = row.expected(transport)
    return f"{status} (carried)" if status == 200 else str(status)


def test_readme_table_matches() -> None:
    """README's table lists every fault row of this test, with the statuses it asserts."""
    header, *body = readme_table()
    assert header == ["fault", *TRANSPORTS, "gRPC"], header
    written = {line[0]: line[1:] for line in body}
    assert set(written) == {row.label for row in ROWS}, (
        f"README only: {sorted(set(written) - {r.label for r in ROWS})}; "
        f"test only: {sorted({r.label for r in ROWS} - set(written))}"
    )
    for row in ROWS:
        expected = [readme_cell(row, transport) for transport in TRANSPORTS] + [row.grpc_code()]
        assert written[row.label] == expected, row.label


def test_table_is_one_status_per_fault() -> None:
    """Every cell that has a fault expects the row's one status; only the NaN row carries NaN."""
    for row in ROWS:
        assert set(row.cells) | set(row.not_applicable) == set(TRANSPORTS), row.key
        assert not set(row.cells) & set(row.not_applicable), row.key
        statuses = {row.expected(transport) for transport in row.cells} - {200}
        assert statuses == {row.status}, row.key
        if row.grpc_code() not in ("n/a", "OK (carried)"):
            assert row.grpc_code() == GRPC_CODES[row.status]
