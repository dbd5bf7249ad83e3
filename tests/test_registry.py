"""A new op is one registry entry: every transport, the docs and /v2 metadata pick it up."""

import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest

from app.main import create_app
from app.ops.errors import SpecError
from app.registry import ALL_TYPES, INTEGER_TYPES, REGISTRY, Arrays, Attributes, Input, Op, Plan
from app.settings import Settings
from tensor_ops_client import TRANSPORTS, TensorOpsClient, Transport
from tensor_ops_client import main as command_line
from tensor_ops_wire.ops import OPS, from_info
from tests.support import (
    assert_same_bits,
    free_port,
    launch_server,
    npz_bytes,
    serving_ops,
    stop_server,
)

pytestmark = pytest.mark.anyio


def _axes(arrays: Arrays) -> tuple[int, ...]:
    rank = arrays["data"].ndim
    axes = [int(axis) for axis in np.asarray(arrays["axes"]).reshape(-1)]
    for axis in axes:
        if not -rank <= axis < rank:
            raise SpecError("axes", f"axis {axis} is out of range for data of rank {rank}")
    return tuple(axis % rank for axis in axes)


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    flipped = np.flip(arrays["data"], _axes(arrays))

    def run(out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        if out is None:
            return flipped.copy()
        np.copyto(out, flipped, casting="equiv")
        return out

    return Plan(flipped.shape, run)


#: A toy third op, declared exactly as the real ones are (Reverse-1 in "index" mode).
FLIP = Op(
    name="flip",
    spec="Reverse-1",
    summary="Reverse the order of elements along axes",
    description="The elements of `data` in reverse order along `axes`.",
    request_doc="Reverse-1: `data` reversed along `axes`.",
    inputs=(
        Input("data", "The tensor to reverse.", "T: any supported type.", ALL_TYPES),
        Input("axes", "Axes to reverse along.", "T_AXIS: any integer type.", INTEGER_TYPES),
    ),
    plan=_plan,
    examples={
        "example_1": {
            "summary": "Reverse rows",
            "value": {"data": [[1, 2], [3, 4]], "axes": [0]},
            "x-expected-output": [[3, 4], [1, 2]],
        }
    },
)


@pytest.fixture
def registered() -> Iterator[Op]:
    REGISTRY[FLIP.name] = FLIP
    try:
        yield FLIP
    finally:
        del REGISTRY[FLIP.name]


@pytest.fixture
async def client(registered: Op) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


DATA = np.arange(12, dtype=np.float32).reshape(3, 4)
EXPECTED = DATA[::-1, ::-1]


async def test_json_route(client: httpx.AsyncClient) -> None:
    response = await client.post("/flip", json={"data": DATA.tolist(), "axes": [0, -1]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["shape"] == [3, 4]
    np.testing.assert_array_equal(np.array(body["data"]), EXPECTED)


async def test_npz_route(client: httpx.AsyncClient) -> None:
    body = npz_bytes(data=DATA, axes=np.array([0, 1], dtype=np.uint8))
    response = await client.post(
        "/flip", content=body, headers={"content-type": "application/x-npz"}
    )
    assert response.status_code == 200, response.text
    np.testing.assert_array_equal(np.load(io.BytesIO(response.content)), EXPECTED)


async def test_v2_metadata_and_infer(client: httpx.AsyncClient) -> None:
    metadata = (await client.get("/v2/models/flip")).json()
    assert [tensor["name"] for tensor in metadata["inputs"]] == ["data", "axes"]
    request = {
        "inputs": [
            {"name": "data", "shape": [3, 4], "datatype": "FP32", "data": DATA.ravel().tolist()},
            {"name": "axes", "shape": [2], "datatype": "INT8", "data": [0, 1]},
        ]
    }
    response = await client.post("/v2/models/flip/infer", json=request)
    assert response.status_code == 200, response.text
    output = response.json()["outputs"][0]
    np.testing.assert_array_equal(np.array(output["data"]).reshape(output["shape"]), EXPECTED)


async def test_docs_list_the_route_its_model_and_its_examples(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    content = schema["paths"]["/flip"]["post"]["requestBody"]["content"]["application/json"]
    assert set(content["examples"]) == {"example_1"}
    assert content["schema"] == {"$ref": "#/components/schemas/FlipRequest"}
    fields = schema["components"]["schemas"]["FlipRequest"]["properties"]
    assert set(fields) == {"data", "axes", "dtype"}
    assert fields["axes"]["x-element-types"] == list(INTEGER_TYPES)


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/flip", orjson.dumps({"data": [1.0]}), {}),
        (
            "/v2/models/flip/infer",
            orjson.dumps(
                {"inputs": [{"name": "data", "shape": [1], "datatype": "FP32", "data": [1]}]}
            ),
            {},
        ),
    ],
)
async def test_its_faults_get_the_shared_statuses(
    client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]
) -> None:
    response = await client.post(path, content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "axes" in response.text


async def test_spec_violation_is_located_at_its_input(client: httpx.AsyncClient) -> None:
    response = await client.post("/flip", json={"data": [[1, 2]], "axes": [5]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "axes"]
    assert "out of range" in response.json()["detail"][0]["msg"]


# --- The clients' description of the ops -------------------------------------------------------


def test_the_wire_description_is_the_registrys() -> None:
    """``tensor_ops_wire.ops.OPS`` (what the client and the command line know without asking
    the service) says of each op what the registry says: spec, inputs in order, attributes and
    their defaults. An op of the registry's that it has not is reached through ``/info``."""
    for op in OPS:
        assert op.name in REGISTRY, op.name
        served = REGISTRY[op.name]
        assert op.spec == served.spec, op.name
        assert op.input_names == served.input_names, op.name
        assert op.attribute_defaults() == served.attribute_defaults(), op.name
        assert [item.name for item in op.attributes] == [item.name for item in served.attributes]
        assert all(item.required for item in op.inputs), op.name  # the registry's all are
    assert [op.name for op in OPS] == [name for name in REGISTRY if name in {o.name for o in OPS}]


async def test_info_lists_the_ops_as_the_wire_reads_them(client: httpx.AsyncClient) -> None:
    described = from_info((await client.get("/info")).json()["ops"])
    assert [op.name for op in described] == list(REGISTRY)  # flip included
    for op in described:
        served = REGISTRY[op.name]
        assert (op.spec, op.input_names) == (served.spec, served.input_names)
        assert op.attribute_defaults() == served.attribute_defaults()


# --- The toy op on a real server: every transport, the client and the command line -------------

#: The server, with the toy op in its registry before the app is made.
SERVE_WITH_FLIP = serving_ops("tests.test_registry", ["FLIP"])


@pytest.fixture(scope="module")
def flip_server() -> Iterator[tuple[str, str]]:
    """A server whose registry holds the toy op, gRPC on: its URL and its gRPC target."""
    port = free_port()
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port)}, command=["-c", SERVE_WITH_FLIP]
    )
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_toy_op_through_the_client_on_every_transport(
    flip_server: tuple[str, str], transport: Transport
) -> None:
    url, target = flip_server
    with TensorOpsClient(url, transport=transport, grpc_target=target, retry=False) as tops:
        assert "flip" in [op["name"] for op in tops.info()["ops"]]
        output = tops.call("flip", {"data": DATA, "axes": np.array([0, -1], np.int8)})
        assert_same_bits(np.asarray(output), EXPECTED.copy())
        assert_same_bits(np.asarray(tops.roll(DATA, 1, 0)), np.roll(DATA, 1, 0))


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_toy_op_through_the_command_line(
    flip_server: tuple[str, str], transport: Transport, tmp_path: Path
) -> None:
    """The command line builds ``flip``'s command from the service's ``/info`` (``--url``)."""
    url, target = flip_server
    source, out = tmp_path / "data.npy", tmp_path / "out.npy"
    np.save(source, DATA)
    service = ["--url", url, "--transport", transport]
    if transport == "grpc":
        service += ["--grpc-target", target]
    assert command_line([*service, "flip", str(source), "--axes", "0", "1", "-o", str(out)]) == 0
    assert_same_bits(np.load(out), EXPECTED.copy())
    # The options may come after the command's name too.
    assert command_line(["flip", str(source), "--axes", "1", *service, "-o", str(out)]) == 0
    assert_same_bits(np.load(out), DATA[:, ::-1].copy())


@pytest.mark.e2e
def test_toy_op_command_help_and_refusals(
    flip_server: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TENSOR_OPS_URL", raising=False)
    url, _ = flip_server
    with pytest.raises(SystemExit) as exited:
        command_line(["--url", url, "flip", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "Reverse-1" in shown and "--axes" in shown
    source = tmp_path / "data.npy"
    np.save(source, DATA)
    # A missing input is the command line's usage error; the service's refusal exits 3.
    assert command_line(["--url", url, "flip", str(source)]) == 2
    assert "--axes is required" in capsys.readouterr().err
    assert command_line(["--url", url, "flip", str(source), "--axes", "2"]) == 3
    assert "[422 spec_violation] axes:" in capsys.readouterr().err
    # A service that cannot be asked is said so, in one line, and no "invalid choice".
    closed = f"http://127.0.0.1:{free_port()}"
    assert command_line(["--url", closed, "flip", str(source), "--axes", "0"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"'flip' is no op known without the service, and no service answers at {closed}" in err
    assert "invalid choice" not in err
