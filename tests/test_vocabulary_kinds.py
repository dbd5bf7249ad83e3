"""The vocabulary's newer words on every way in: boolean, integer-list and element-type
attributes, outputs of another type than the data, outputs sized only after computing, and an
op's older version (shared/api.md section 11).

One toy op, declared as the real ones are and registered for these tests only: ``toy_uniq``
gives the distinct values of ``data`` (sorted or in order of first appearance) that are not in
``drop``, and the index of each one's first appearance in the type ``index_element_type`` names.
Its version 1 has no ``drop``.
"""

import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.ops.declaration import (
    ALL_TYPES,
    BOOL,
    ELEMENT_TYPE,
    INTS,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Output,
    SplitPlan,
    example,
)
from app.registry import OLDER, REGISTRY, versions
from app.settings import Settings
from tensor_ops_client import TRANSPORTS, TensorOpsClient, Transport
from tensor_ops_client import main as command_line
from tests.support import assert_same_bits, free_port, launch_server, serving_ops, stop_server

pytestmark = pytest.mark.anyio


def _plan_uniq(arrays: Arrays, attributes: Attributes) -> SplitPlan:
    data = arrays["data"]
    flat = data.reshape(-1)
    drop = attributes.get("drop", ())
    index_type = np.int32 if attributes["index_element_type"] == "i32" else np.int64

    def run() -> list[Any]:
        values, first = np.unique(flat, return_index=True)
        keep = ~np.isin(values, np.array(drop, np.int64)) if drop else slice(None)
        values, first = values[keep], first[keep]
        if not attributes["sorted"]:
            order = np.argsort(first, kind="stable")
            values, first = values[order], first[order]
        return [values, first.astype(index_type)]

    # Known only once it has run: at most one of each element.
    return SplitPlan(((flat.size,), (flat.size,)), run, bounded=True)


_TEXTS: dict[str, Any] = {
    "summary": "Distinct values",
    "description": "The distinct values of `data` not in `drop`.",
    "request_doc": "Toy unique.",
}
_DATA = Input("data", "The values.", "T: any supported type.", ALL_TYPES)
_SORTED = Attribute("sorted", True, "Sorted, or in order of appearance.", kind=BOOL)
_INDEX_TYPE = Attribute(
    "index_element_type", "i64", "The indices' type.", choices=("i32", "i64"), kind=ELEMENT_TYPE
)
_OUTPUTS = (
    Output("output_0", "The distinct values."),
    Output("output_1", "Each one's first index.", element_type="index_element_type"),
)

UNIQ = Op(
    name="toy_uniq",
    spec="Unique-10",
    **_TEXTS,
    inputs=(_DATA,),
    attributes=(_SORTED, _INDEX_TYPE, Attribute("drop", (), "Values left out.", kind=INTS)),
    plan=_plan_uniq,
    outputs=_OUTPUTS,
    examples={
        "example_1": example(
            "In order of appearance, 2 dropped, indices as i32",
            {"data": [3, 1, 3, 2], "sorted": False, "index_element_type": "i32", "drop": [2]},
            [[3, 1], [0, 1]],
        )
    },
)

UNIQ_1 = Op(
    name="toy_uniq",
    spec="Unique-1",
    **_TEXTS,
    inputs=(_DATA,),
    attributes=(_SORTED, _INDEX_TYPE),
    plan=_plan_uniq,
    outputs=_OUTPUTS,
    examples={
        "example_1": example("Sorted", {"data": [3, 1, 3]}, [[1, 3], [1, 0]]),
    },
)


@pytest.fixture
def registered() -> Iterator[None]:
    REGISTRY[UNIQ.name] = UNIQ
    OLDER[UNIQ.name] = (UNIQ_1,)
    try:
        yield
    finally:
        del REGISTRY[UNIQ.name]
        del OLDER[UNIQ.name]


@pytest.fixture
async def client(registered: None) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


DATA = np.array([3, 1, 3, 2], np.int64)
ASKED: dict[str, Any] = {"sorted": False, "index_element_type": "i32", "drop": [2]}


def _expected() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    return np.array([3, 1], np.int64), np.array([0, 1], np.int32)


def test_versions_are_collected_oldest_first(registered: None) -> None:
    assert list(versions("toy_uniq")) == [1, 10]
    assert UNIQ.version == 10 and UNIQ_1.version == 1


def test_the_vocabulary_refuses_what_it_cannot_say() -> None:
    with pytest.raises(ValueError, match="needs its choices"):
        Attribute("t", "i32", "", kind=ELEMENT_TYPE)
    with pytest.raises(ValueError, match="no value of it"):
        Attribute("flag", 1, "", kind=BOOL)
    with pytest.raises(ValueError, match="unknown kind"):
        Attribute("x", 0, "", kind="float")
    assert Attribute("l", (1, -2), "", kind=INTS).from_text("4,-5") == (4, -5)
    assert Attribute("l", (), "", kind=INTS).from_text("") == ()


async def test_json_route(client: httpx.AsyncClient) -> None:
    response = await client.post("/toy_uniq", json={"data": DATA.tolist(), **ASKED})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "outputs": [
            {"name": "output_0", "data": [3, 1], "dtype": "int64", "shape": [2]},
            {"name": "output_1", "data": [0, 1], "dtype": "int32", "shape": [2]},
        ]
    }
    # Defaults: sorted, int64 indices, nothing dropped.
    plain = await client.post("/toy_uniq", json={"data": DATA.tolist()})
    assert [(o["data"], o["dtype"]) for o in plain.json()["outputs"]] == [
        ([1, 2, 3], "int64"),
        ([1, 3, 0], "int64"),
    ]


async def test_npz_route_takes_lists_and_booleans_in_the_query(client: httpx.AsyncClient) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, data=DATA)
    response = await client.post(
        "/toy_uniq?sorted=false&index_element_type=i32&drop=2",
        content=buffer.getvalue(),
        headers={"content-type": "application/x-npz"},
    )
    assert response.status_code == 200, response.text
    archive = np.load(io.BytesIO(response.content))
    values, first = _expected()
    assert_same_bits(archive["output_0"], values)
    assert_same_bits(archive["output_1"], first)


async def test_v2_parameters_carry_a_list_as_one_string(client: httpx.AsyncClient) -> None:
    request = {
        "inputs": [{"name": "data", "shape": [4], "datatype": "INT64", "data": DATA.tolist()}],
        "parameters": {"sorted": False, "index_element_type": "i32", "drop": "2"},
    }
    response = await client.post("/v2/models/toy_uniq/infer", json=request)
    assert response.status_code == 200, response.text
    assert [(o["name"], o["datatype"], o["shape"], o["data"]) for o in response.json()["outputs"]] == [
        ("output_0", "INT64", [2], [3, 1]),
        ("output_1", "INT32", [2], [0, 1]),
    ]  # fmt: skip
    metadata = (await client.get("/v2/models/toy_uniq")).json()
    assert metadata["parameters"]["sorted"] == "bool request parameter, default true"
    assert metadata["parameters"]["drop"].startswith("string request parameter, one string of")
    assert metadata["parameters"]["index_element_type"] == (
        'string request parameter, one of "i32", "i64", default i64'
    )


@pytest.mark.parametrize(
    ("route", "body", "field", "words"),
    [
        ("json", {"sorted": 1}, "sorted", "bool"),
        ("json", {"index_element_type": "i16"}, "index_element_type", '"i32", "i64"'),
        ("json", {"drop": [1, 2.5]}, "drop", "integer"),
        ("json", {"drop": list(range(65))}, "drop", "64"),
        ("v2", {"drop": [1, 2]}, "drop", "comma-separated"),
        ("v2", {"drop": "1,x"}, "drop", "comma-separated"),
        ("v2", {"drop": "1," * 5000}, "drop", "longer string"),
        ("v2", {"sorted": "yes"}, "sorted", "true or false"),
        ("v2", {"index_element_type": 3}, "index_element_type", '"i32", "i64"; got an integer'),
        ("npz", {"sorted": "yes"}, "sorted", "true or false"),
        ("npz", {"drop": "1;2"}, "drop", "comma-separated"),
    ],
)
async def test_a_bad_value_is_refused_naming_the_attribute_and_its_kind(
    client: httpx.AsyncClient, route: str, body: dict[str, Any], field: str, words: str
) -> None:
    if route == "json":
        response = await client.post("/toy_uniq", json={"data": [1], **body})
        text = str(response.json()["detail"])
    elif route == "v2":
        request = {
            "inputs": [{"name": "data", "shape": [1], "datatype": "INT64", "data": [1]}],
            "parameters": body,
        }
        response = await client.post("/v2/models/toy_uniq/infer", json=request)
        text = response.json()["error"]
    else:
        buffer = io.BytesIO()
        np.savez(buffer, data=np.array([1]))
        response = await client.post(
            "/toy_uniq",
            params=body,
            content=buffer.getvalue(),
            headers={"content-type": "application/x-npz"},
        )
        text = str(response.json()["detail"])
    assert response.status_code in (400, 422), response.text
    assert field in text and words in text, text


async def test_an_older_version_refuses_what_it_does_not_have(client: httpx.AsyncClient) -> None:
    request = {
        "inputs": [{"name": "data", "shape": [3], "datatype": "INT64", "data": [3, 1, 3]}],
        "parameters": {"drop": "1"},
    }
    refused = await client.post("/v2/models/toy_uniq/versions/1/infer", json=request)
    assert refused.status_code == 422, refused.text
    assert "drop" in refused.json()["error"] and "version 1" in refused.json()["error"]
    del request["parameters"]
    answered = await client.post("/v2/models/toy_uniq/versions/1/infer", json=request)
    assert answered.status_code == 200, answered.text
    assert answered.json()["model_version"] == "1"
    assert [o["data"] for o in answered.json()["outputs"]] == [[1, 3], [1, 0]]
    route = await client.post("/toy_uniq/v1", json={"data": [3, 1, 3], "drop": [1]})
    assert route.status_code == 422, route.text
    assert "drop" in str(route.json()["detail"])
    newest = await client.post("/v2/models/toy_uniq/infer", json=request)
    assert newest.json()["model_version"] == "10"
    unknown = await client.post("/v2/models/toy_uniq/versions/3/infer", json=request)
    assert unknown.status_code == 404
    assert "1, 10" in unknown.json()["error"]
    metadata = (await client.get("/v2/models/toy_uniq")).json()
    assert metadata["versions"] == ["1", "10"]


SERVE_WITH_TOY = serving_ops("tests.test_vocabulary_kinds", ["UNIQ"])


@pytest.fixture(scope="module")
def toy_server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port)}, command=["-c", SERVE_WITH_TOY]
    )
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_client_on_every_transport(toy_server: tuple[str, str], transport: Transport) -> None:
    url, target = toy_server
    with TensorOpsClient(url, transport=transport, grpc_target=target, retry=False) as tops:
        values, first = tops.call("toy_uniq", {"data": DATA}, ASKED)
        expected_values, expected_first = _expected()
        assert_same_bits(np.asarray(values), expected_values)
        assert_same_bits(np.asarray(first), expected_first)
        values, first = tops.call("toy_uniq", {"data": DATA}, {"drop": (), "sorted": True})
        assert np.asarray(values).tolist() == [1, 2, 3]
        assert np.asarray(first).dtype == np.int64


@pytest.mark.e2e
def test_the_command_line(toy_server: tuple[str, str], tmp_path: Any) -> None:
    url, _ = toy_server
    data, out = tmp_path / "data.npy", tmp_path / "out.npz"
    np.save(data, DATA)
    arguments = ["--url", url, "toy_uniq", str(data), "--sorted", "false"]
    arguments += ["--index-element-type", "i32", "--drop", "2", "-o", str(out)]
    assert command_line(arguments) == 0
    archive = np.load(out)
    values, first = _expected()
    assert_same_bits(archive["output_0"], values)
    assert_same_bits(archive["output_1"], first)
    with pytest.raises(SystemExit) as refused:  # argparse's usage error
        command_line(["--url", url, "toy_uniq", str(data), "--sorted", "maybe"])
    assert refused.value.code == 2
