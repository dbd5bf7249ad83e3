"""The declaration's vocabulary on every way in: several outputs, a variadic input, an optional
input typed like data, enumerated and required attributes, an output typed by another input.

Two toy ops, declared as the real ones are and registered for these tests only, so that the
transports are checked for what the vocabulary can say, whatever the real ops use of it.
"""

import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.main import create_app
from app.ops.declaration import (
    ALL_TYPES,
    INTEGER_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    SplitPlan,
    example,
)
from app.ops.errors import SpecError
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_client import TRANSPORTS, TensorOpsClient, Transport
from tensor_ops_client import main as command_line
from tensor_ops_wire.npy import encode_npy_base64
from tests.support import (
    assert_same_bits,
    free_port,
    launch_server,
    npz_bytes,
    serving_ops,
    stop_server,
)

pytestmark = pytest.mark.anyio


def _axis(arrays: Arrays, rank: int) -> int:
    axis = int(np.asarray(arrays["axis"]).reshape(-1)[0])
    if not -rank <= axis < rank:
        raise SpecError("axis", f"axis {axis} is out of range for data of rank {rank}")
    return axis % rank


def _plan_halves(arrays: Arrays, attributes: Attributes) -> SplitPlan:
    data = arrays["data"]
    axis = _axis(arrays, data.ndim)
    parts = attributes["parts"]
    if parts < 1 or data.shape[axis] % parts:
        raise SpecError("parts", f"parts must divide data.shape[axis] = {data.shape[axis]}")
    shape = list(data.shape)
    shape[axis] //= parts
    return SplitPlan(
        tuple(tuple(shape) for _ in range(parts)),
        lambda: np.split(data, parts, axis),
    )


#: A toy Split: ``data`` cut into ``parts`` equal parts along ``axis``.
PARTS = Op(
    name="toy_parts",
    spec="Split-1",
    summary="Cut data into equal parts",
    description="The parts of `data` along `axis`.",
    request_doc="Toy split.",
    inputs=(
        Input("data", "The tensor to cut.", "T: any supported type.", ALL_TYPES),
        Input("axis", "The axis.", "T_AXIS: any integer type.", INTEGER_TYPES),
    ),
    attributes=(Attribute("parts", None, "How many parts (required)."),),
    plan=_plan_halves,
    several_outputs=True,
    examples={
        "example_1": example(
            "Two halves",
            {"data": [1, 2, 3, 4], "axis": 0, "parts": 2},
            [[1, 2], [3, 4]],
        )
    },
)


def _plan_join(arrays: Arrays, attributes: Attributes) -> Plan:
    count = sum(1 for name in arrays if name.startswith("part_"))
    parts = [arrays[f"part_{index}"] for index in range(count)]
    if attributes["order"] == "backward":
        parts.reverse()
    if "fill" in arrays:
        fill = arrays["fill"]
        if fill.ndim != 0 or fill.dtype != parts[0].dtype:
            raise SpecError("fill", "fill must be a scalar of the parts' type")
        parts.append(fill.reshape(1))
    if any(part.ndim != 1 or part.dtype != parts[0].dtype for part in parts):
        raise SpecError("part_0", "parts must be 1D tensors of one type")
    shape = (sum(part.shape[0] for part in parts),)

    def run(out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        joined = np.concatenate(parts)
        if out is None:
            return joined
        np.copyto(out, joined, casting="equiv")
        return out

    return Plan(shape, run)


#: A toy Concat: the 1-D ``part_<n>`` joined in the ``order`` asked, then the optional ``fill``.
JOIN = Op(
    name="toy_join",
    spec="Concat-1",
    summary="Join 1-D parts",
    description="The parts joined.",
    request_doc="Toy concat.",
    inputs=(
        Input("part", "A part.", "T: any supported type.", ALL_TYPES, variadic=True),
        Input("fill", "Appended.", "T: a scalar of the parts' type.", ALL_TYPES, optional=True),
    ),
    attributes=(Attribute("order", "forward", "The order.", choices=("forward", "backward")),),
    plan=_plan_join,
    output_type_from="part_0",
    examples={
        "example_1": example(
            "Two parts backward",
            {"part_0": [1, 2], "part_1": [3], "order": "backward"},
            [3, 1, 2],
        )
    },
)


@pytest.fixture
def registered() -> Iterator[None]:
    for op in (PARTS, JOIN):
        REGISTRY[op.name] = op
    try:
        yield
    finally:
        for op in (PARTS, JOIN):
            del REGISTRY[op.name]


@pytest.fixture
async def client(registered: None) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


DATA = np.array([[1.5, -0.0, np.nan, 4], [5, 6, 7, 8]], dtype=np.float32)


async def test_several_outputs_json_form(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/toy_parts", json={"data": [[1, 2, 3, 4], [5, 6, 7, 8]], "axis": 1, "parts": 2}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "outputs": [
            {"name": "output_0", "data": [[1, 2], [5, 6]], "dtype": "int64", "shape": [2, 2]},
            {"name": "output_1", "data": [[3, 4], [7, 8]], "dtype": "int64", "shape": [2, 2]},
        ]
    }


async def test_several_outputs_npy_form_and_raw(client: httpx.AsyncClient) -> None:
    body = {"data": encode_npy_base64(DATA), "axis": 1, "parts": 2}
    response = await client.post("/toy_parts", json=body)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    assert [item["name"] for item in outputs] == ["output_0", "output_1"]
    first = np.load(io.BytesIO(__import__("base64").b64decode(outputs[0]["data"])))
    assert_same_bits(first, DATA[:, :2].copy())
    raw = await client.post("/toy_parts", json=body, headers={"accept": "application/x-npy"})
    assert raw.headers["content-type"] == "application/x-npz"
    archive = np.load(io.BytesIO(raw.content))
    assert archive.files == ["output_0", "output_1"]
    assert_same_bits(archive["output_1"], DATA[:, 2:].copy())


async def test_several_outputs_npz_route(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/toy_parts?parts=4",
        content=npz_bytes(data=DATA, axis=np.array(-1, np.int8)),
        headers={"content-type": "application/x-npz"},
    )
    assert response.status_code == 200, response.text
    archive = np.load(io.BytesIO(response.content))
    assert archive.files == [f"output_{index}" for index in range(4)]
    for index in range(4):
        assert_same_bits(archive[f"output_{index}"], DATA[:, index : index + 1].copy())


async def test_several_outputs_v2_json_and_binary(client: httpx.AsyncClient) -> None:
    request: dict[str, Any] = {
        "inputs": [
            {"name": "data", "shape": [2, 4], "datatype": "INT32", "data": list(range(8))},
            {"name": "axis", "shape": [], "datatype": "INT64", "data": [0]},
        ],
        "parameters": {"parts": 2},
    }
    response = await client.post("/v2/models/toy_parts/infer", json=request)
    assert response.status_code == 200, response.text
    assert [(o["name"], o["shape"], o["data"]) for o in response.json()["outputs"]] == [
        ("output_0", [1, 4], [0, 1, 2, 3]),
        ("output_1", [1, 4], [4, 5, 6, 7]),
    ]
    request["outputs"] = [{"name": "output_1", "parameters": {"binary_data": True}}]
    binary = await client.post("/v2/models/toy_parts/infer", json=request)
    assert binary.status_code == 200, binary.text
    length = int(binary.headers["inference-header-content-length"])
    head = binary.json() if length == len(binary.content) else None
    assert head is None
    raw = binary.content[length:]
    assert np.frombuffer(raw, np.int32).tolist() == [4, 5, 6, 7]
    length = int(binary.headers["inference-header-content-length"])
    head = httpx.Response(200, content=binary.content[:length]).json()
    assert [output["name"] for output in head["outputs"]] == ["output_1"]  # the one asked for
    request["outputs"] = [{"name": "output_2"}]
    past = await client.post("/v2/models/toy_parts/infer", json=request)
    assert past.status_code == 422
    assert "this request makes output_0, output_1" in past.json()["error"]
    request["outputs"] = [{"name": "output"}]
    wrong = await client.post("/v2/models/toy_parts/infer", json=request)
    assert wrong.status_code == 422
    assert "output_0" in wrong.json()["error"]


async def test_metadata_and_config_list_several_outputs_and_variadic_inputs(
    client: httpx.AsyncClient,
) -> None:
    parts = (await client.get("/v2/models/toy_parts")).json()
    assert [item["name"] for item in parts["outputs"]] == ["output_0", "output_1"]
    assert parts["parameters"]["parts"] == "int64 request parameter, required"
    join = (await client.get("/v2/models/toy_join")).json()
    assert [item["name"] for item in join["inputs"]] == ["part_0", "part_1", "fill"]
    assert join["parameters"]["order"].startswith('string request parameter, one of "forward"')
    config = (await client.get("/v2/models/toy_parts/config")).json()
    assert [item["name"] for item in config["output"]] == ["output_0", "output_1"]
    info = (await client.get("/info")).json()
    described = info["op_details"]
    assert described["toy_join"]["variadic"] == "part"
    assert described["toy_join"]["optional"] == ["fill"]
    assert described["toy_join"]["choices"] == {"order": ["forward", "backward"]}
    # A required attribute is listed with a null default (issue 45: not "attributes: {}").
    assert {op["name"]: op for op in info["ops"]}["toy_parts"]["attributes"] == {"parts": None}
    assert described["toy_parts"]["required"] == ["parts"]
    assert described["toy_parts"]["outputs"] == ["output_0", "output_1", "..."]


async def test_variadic_optional_and_enumerated(client: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {"part_0": [1.5, 2], "part_1": [3], "part_2": [-0.0]}
    response = await client.post("/toy_join", json={**body, "dtype": "float16"})
    assert response.status_code == 200, response.text
    assert response.json() == {"data": [1.5, 2.0, 3.0, -0.0], "dtype": "float16", "shape": [4]}
    backward = await client.post("/toy_join", json={**body, "order": "backward", "fill": 7})
    assert backward.status_code == 200, backward.text
    # fill in JSON form takes the parts' type (float64 here, as NumPy infers the parts).
    assert backward.json()["data"] == [-0.0, 3.0, 1.5, 2.0, 7.0]
    wrong = await client.post("/toy_join", json={**body, "order": "sideways"})
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["body", "order"]
    gap = await client.post("/toy_join", json={"part_0": [1], "part_2": [2]})
    assert gap.status_code == 422
    assert gap.json()["detail"][0]["loc"] == ["body", "part_1"]
    none = await client.post("/toy_join", json={"fill": 1})
    assert none.status_code == 422
    assert none.json()["detail"][0]["loc"] == ["body", "part_0"]
    npz = await client.post(
        "/toy_join?order=backward",
        content=npz_bytes(part_0=np.array([1, 2], np.uint8), part_1=np.array([3], np.uint8)),
        headers={"content-type": "application/x-npz"},
    )
    assert npz.status_code == 200, npz.text
    assert_same_bits(np.load(io.BytesIO(npz.content)), np.array([3, 1, 2], np.uint8))


async def test_a_required_attribute_missing_is_named(client: httpx.AsyncClient) -> None:
    response = await client.post("/toy_parts", json={"data": [1, 2], "axis": 0})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "parts"]
    v2 = await client.post(
        "/v2/models/toy_parts/infer",
        json={
            "inputs": [
                {"name": "data", "shape": [2], "datatype": "INT64", "data": [1, 2]},
                {"name": "axis", "shape": [], "datatype": "INT64", "data": [0]},
            ]
        },
    )
    assert v2.status_code == 422
    assert "parts" in v2.json()["error"]
    npz = await client.post(
        "/toy_parts",
        content=npz_bytes(data=np.arange(2), axis=np.array(0)),
        headers={"content-type": "application/x-npz"},
    )
    assert npz.status_code == 422
    assert npz.json()["detail"][0]["loc"] == ["query", "parts"]


async def test_the_docs_show_the_toy_ops_examples(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    fields = schema["components"]["schemas"]["ToyJoinRequest"]["properties"]
    assert {"part_0", "part_1", "fill", "order", "dtype"} <= set(fields)
    for path, op in (("/toy_parts", PARTS), ("/toy_join", JOIN)):
        for example_ in op.examples.values():
            response = await client.post(path, json=example_["value"])
            assert response.status_code == 200, response.text
            body = response.json()
            got = [item["data"] for item in body["outputs"]] if "outputs" in body else body["data"]
            assert got == example_["x-expected-output"]


# --- On a real server: gRPC, shared memory's absence aside, the client and the command line -----

SERVE_WITH_TOYS = serving_ops("tests.test_vocabulary", ["PARTS", "JOIN"])


@pytest.fixture(scope="module")
def toy_server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port)}, command=["-c", SERVE_WITH_TOYS]
    )
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_client_on_every_transport(toy_server: tuple[str, str], transport: Transport) -> None:
    url, target = toy_server
    with TensorOpsClient(url, transport=transport, grpc_target=target, retry=False) as tops:
        parts = tops.call("toy_parts", {"data": DATA, "axis": np.array(1)}, {"parts": 2})
        assert isinstance(parts, list) and len(parts) == 2
        assert_same_bits(np.asarray(parts[0]), DATA[:, :2].copy())
        assert_same_bits(np.asarray(parts[1]), DATA[:, 2:].copy())
        joined = tops.call(
            "toy_join",
            {"part_0": DATA[0], "part_1": DATA[1], "fill": np.float32(-0.0)},
            {"order": "backward"},
        )
        assert_same_bits(np.asarray(joined), np.concatenate([DATA[1], DATA[0], np.float32([-0.0])]))


@pytest.mark.e2e
def test_the_command_line(toy_server: tuple[str, str], tmp_path: Any) -> None:
    url, _ = toy_server
    first, second, out = tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "out.npz"
    np.save(first, DATA[0])
    np.save(second, DATA[1])
    service = ["--url", url]
    assert (
        command_line(
            [
                *service,
                "toy_join",
                str(first),
                str(second),
                "--order",
                "backward",
                "-o",
                str(tmp_path / "j.npy"),
            ]
        )
        == 0
    )
    assert_same_bits(np.load(tmp_path / "j.npy"), np.concatenate([DATA[1], DATA[0]]))
    np.save(first, DATA)
    assert (
        command_line(
            [*service, "toy_parts", str(first), "--axis", "0", "--parts", "2", "-o", str(out)]
        )
        == 0
    )
    archive = np.load(out)
    assert_same_bits(archive["output_1"], DATA[1:].copy())
    assert command_line([*service, "toy_parts", str(first), "--axis", "0"]) == 2


@pytest.mark.e2e
@pytest.mark.parametrize("transport", ["v2", "grpc"])
def test_the_client_through_shared_memory(
    toy_server: tuple[str, str], transport: Transport
) -> None:
    """An op the client cannot size ahead: its inputs through the region, its outputs in the
    answer."""
    url, target = toy_server
    with TensorOpsClient(
        url, transport=transport, grpc_target=target, retry=False, shared_memory=True
    ) as tops:
        parts = tops.call("toy_parts", {"data": DATA, "axis": np.array(0)}, {"parts": 2})
        assert len(parts) == 2
        assert_same_bits(np.asarray(parts[0]), DATA[:1].copy())
        assert_same_bits(np.asarray(parts[1]), DATA[1:].copy())


async def test_a_verdict_on_several_outputs(client: httpx.AsyncClient) -> None:
    """POST /verify/<op> of an op of several outputs judges each by its name."""
    request = {"data": [[1, 2, 3, 4], [5, 6, 7, 8]], "axis": 1, "parts": 2}
    right = {"output_0": [[1, 2], [5, 6]], "output_1": [[3, 4], [7, 8]]}
    response = await client.post("/verify/toy_parts", json={**request, "outputs": right})
    assert response.status_code == 200, response.text
    verdict = response.json()
    assert verdict["equal"] is True
    assert [item["name"] for item in verdict["outputs"]] == ["output_0", "output_1"]
    wrong = {**right, "output_1": [[3, 4], [7, 9]]}
    response = await client.post("/verify/toy_parts", json={**request, "outputs": wrong})
    verdict = response.json()
    assert verdict["equal"] is False
    first, second = verdict["outputs"]
    assert first["equal"] is True
    assert (second["mismatches"], second["first"][0]["index"]) == (1, [1, 1])


@pytest.mark.e2e
async def test_several_outputs_over_grpc_typed_and_asked_for(toy_server: tuple[str, str]) -> None:
    """gRPC: typed contents when raw ones are not asked for, and only the outputs named."""
    from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: PLC0415
    from tests.support import grpc_channel, inference_stub  # noqa: PLC0415

    _, target = toy_server
    request = pb.ModelInferRequest(model_name="toy_parts", id="t")
    request.parameters["parts"].int64_param = 2
    request.parameters["binary_data_output"].bool_param = False
    data = request.inputs.add(name="data", datatype="INT32", shape=[2, 2])
    data.contents.int_contents.extend([1, 2, 3, 4])
    axis = request.inputs.add(name="axis", datatype="INT64", shape=[])
    axis.contents.int64_contents.append(1)
    async with grpc_channel(target) as channel:
        answer = await inference_stub(channel).ModelInfer(request)
        assert [output.name for output in answer.outputs] == ["output_0", "output_1"]
        assert list(answer.outputs[0].contents.int_contents) == [1, 3]
        assert list(answer.outputs[1].contents.int_contents) == [2, 4]
        assert not answer.raw_output_contents
        request.outputs.add(name="output_1")
        answer = await inference_stub(channel).ModelInfer(request)
        assert [output.name for output in answer.outputs] == ["output_1"]
        assert list(answer.outputs[0].contents.int_contents) == [2, 4]


async def test_more_outputs_than_an_answer_carries_are_refused(client: httpx.AsyncClient) -> None:
    """A few bytes asking for 2,048 outputs (each an answer's head beyond its elements): 413."""
    body = {"data": [0] * 2048, "axis": 0, "parts": 2048}
    response = await client.post("/toy_parts", json=body)
    assert response.status_code == 413
    assert "more than the 1024 an answer carries" in response.json()["detail"][0]["msg"]
    fine = await client.post("/toy_parts", json={**body, "data": [0] * 1024, "parts": 1024})
    assert fine.status_code == 200
    assert len(fine.json()["outputs"]) == 1024


@pytest.mark.parametrize("name", ["part_01", "part_5000", "part_-1"])
async def test_a_numbered_name_that_is_no_input_is_refused_on_every_way_in(
    client: httpx.AsyncClient, name: str
) -> None:
    """``part_01`` (a leading zero), ``part_5000`` (past the 1,024 a variadic input takes):
    an unknown input, 422, as a JSON field, an .npz member and a V2 input alike."""
    npz = await client.post(
        "/toy_join",
        content=npz_bytes(False, **{"part_0": np.array([1]), name: np.array([2])}),
        headers={"content-type": "application/x-npz"},
    )
    assert npz.status_code == 422, npz.text
    assert npz.json()["detail"][0]["loc"] == ["body", name]
    body = await client.post("/toy_join", json={"part_0": [1], name: [2]})
    assert body.status_code == 422
    tensors = [
        {"name": "part_0", "shape": [1], "datatype": "INT64", "data": [1]},
        {"name": name, "shape": [1], "datatype": "INT64", "data": [2]},
    ]
    v2 = await client.post("/v2/models/toy_join/infer", json={"inputs": tensors})
    assert v2.status_code == 422
    assert name in v2.json()["error"]
