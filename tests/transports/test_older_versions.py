"""Every older version of every op the registry serves, on every way in: what its newest version
has and it has not (an attribute or an input) is refused naming it, even at the newest version's
default; its page in /docs carries its own examples; the statistics and /metrics count it under
its own version; the client's ``verify(version=)`` and the command line's ``--op-version`` select
it. Older versions are found from the registry, so a new one is covered without a line here."""

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from app.ops.declaration import Op
from app.registry import REGISTRY, every_version, versions
from tensor_ops_client import TRANSPORTS, TensorOpsClient, TensorOpsError, Transport
from tensor_ops_client.cli import main
from tensor_ops_wire.ops import parameter_value
from tests.transports.test_every_op import app, client, example_arrays, server, v2_inputs

pytestmark = pytest.mark.anyio
__all__ = [
    "app",
    "client",
    "server",
]  # test_every_op's fixtures: its app, a client of it, a real server

#: Every declaration older than its op's newest.
OLDER = [op for op in every_version() if REGISTRY[op.name] is not op]


def _newest_value(newest: Op, name: str) -> Any:
    """A value of the newest version's field ``name`` that the newest accepts: its default, or
    the value one of its examples gives."""
    attribute = newest.attribute(name)
    if attribute is not None and attribute.default is not None:
        return attribute.default
    for example in newest.examples.values():
        if name in example["value"]:
            return example["value"][name]
    raise AssertionError(f"{newest.spec}: no value of {name!r} to send")


def lacked(op: Op) -> list[tuple[str, Any]]:
    """(name, value) of each attribute and input the newest version of ``op`` has and ``op``
    has not."""
    newest = REGISTRY[op.name]
    own = {item.name for item in op.inputs} | {item.name for item in op.attributes}
    fields = [item.name for item in newest.inputs] + [item.name for item in newest.attributes]
    names = [name for name in fields if name not in own]
    return [(name, _newest_value(newest, name)) for name in names]


CASES = [(op.name, op.version, name, value) for op in OLDER for name, value in lacked(op)]
IDS = [f"{name}-v{version}-{field}" for name, version, field, _ in CASES]


def test_the_older_versions_lack_what_their_specs_say() -> None:
    """The registry's older versions and what each lacks of its newest (the cases below)."""
    found = {(name, version): field for name, version, field, _ in CASES}
    assert found[("gather", 1)] == "batch_dims"
    assert found[("scatter_nd_update", 3)] == "reduction"
    assert {(name, version) for name, version, _, _ in CASES} <= {
        (op.name, op.version) for op in OLDER
    }


def _first_example(op: Op) -> dict[str, Any]:
    return dict(next(iter(op.examples.values()))["value"])


@pytest.mark.parametrize(("op_name", "version", "field", "value"), CASES, ids=IDS)
async def test_what_a_version_lacks_is_refused_on_the_json_route(
    client: httpx.AsyncClient, op_name: str, version: int, field: str, value: Any
) -> None:
    op = versions(op_name)[version]
    body = _first_example(op)
    assert (await client.post(f"/{op_name}/v{version}", json=body)).status_code == 200
    refused = await client.post(f"/{op_name}/v{version}", json={**body, field: value})
    assert refused.status_code == 422, refused.text
    [problem] = [item for item in refused.json()["detail"] if field in item["loc"]]
    assert f"{op.spec} has no {field} ({REGISTRY[op_name].spec} has" in problem["msg"], problem


@pytest.mark.parametrize(("op_name", "version", "field", "value"), CASES, ids=IDS)
async def test_what_a_version_lacks_is_refused_over_v2(
    client: httpx.AsyncClient, op_name: str, version: int, field: str, value: Any
) -> None:
    op = versions(op_name)[version]
    arrays, attributes = example_arrays(op, _first_example(op))
    parameters = {key: parameter_value(item) for key, item in attributes.items()}
    path = f"/v2/models/{op_name}/versions/{version}/infer"
    inputs = v2_inputs(arrays)
    answered = await client.post(path, json={"inputs": inputs, "parameters": parameters})
    assert answered.status_code == 200, answered.text
    assert answered.json()["model_version"] == str(version)
    newest = REGISTRY[op_name]
    if newest.attribute(field) is not None:
        request = {"inputs": inputs, "parameters": {**parameters, field: parameter_value(value)}}
    else:  # an input: a tensor of its name
        extra = np.asarray(value, dtype=np.int64)
        request = {"inputs": [*inputs, *v2_inputs({field: extra})], "parameters": parameters}
    refused = await client.post(path, json=request)
    assert 400 <= refused.status_code < 500, refused.text
    assert field in refused.json()["error"], refused.text


@pytest.mark.parametrize("op", OLDER, ids=[op.spec for op in OLDER])
def test_each_version_s_page_has_its_own_examples(app: FastAPI, op: Op) -> None:
    operation = app.openapi()["paths"][f"/{op.name}/v{op.version}"]["post"]
    examples = operation["requestBody"]["content"]["application/json"]["examples"]
    assert [item["value"] for item in examples.values()] == [
        item["value"] for item in op.examples.values()
    ]
    assert op.spec in operation["summary"] + operation["description"]
    newest = app.openapi()["paths"][f"/{op.name}"]["post"]
    assert newest["requestBody"]["content"]["application/json"]["examples"] != examples


async def test_statistics_and_metrics_count_a_version_as_its_own(
    client: httpx.AsyncClient,
) -> None:
    op = versions("gather")[1]
    before = (await client.get("/v2/models/gather/versions/1/stats")).json()
    newest_before = (await client.get("/v2/models/gather/versions/8/stats")).json()
    assert (await client.post("/gather/v1", json=_first_example(op))).status_code == 200
    after = (await client.get("/v2/models/gather/versions/1/stats")).json()
    newest_after = (await client.get("/v2/models/gather/versions/8/stats")).json()

    def count(stats: dict[str, Any]) -> int:
        value: int = stats["model_stats"][0]["inference_stats"]["success"]["count"]
        return value

    assert count(after) == count(before) + 1
    assert count(newest_after) == count(newest_before)
    metrics = (await client.get("/metrics")).text
    assert 'tensor_ops_model_stage_total{model="gather",stage="success",version="1"}' in metrics


# --- Through the client and the command line, against a real server --------------------------


#: GatherND with batch_dims 2: version 5 flattens the batch dimensions into one, version 8
#: keeps them.
ND_DATA = np.arange(2 * 3 * 4 * 5, dtype=np.int32).reshape(2, 3, 4, 5)
ND_INDICES = np.array([[[1], [0], [3]], [[2], [2], [0]]], dtype=np.int64)
ND_8 = np.stack([ND_DATA[i, j, ND_INDICES[i, j, 0]] for i in range(2) for j in range(3)])


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_client_selects_a_version_and_is_refused_what_it_lacks(
    server: tuple[str, str], transport: Transport
) -> None:
    url, target = server
    inputs: dict[str, Any] = {"data": ND_DATA, "indices": ND_INDICES}
    with TensorOpsClient(url, transport=transport, grpc_target=target, retry=False) as tops:
        five = np.asarray(tops.call("gather_nd", inputs, {"batch_dims": 2}, version=5))
        eight = np.asarray(tops.call("gather_nd", inputs, {"batch_dims": 2}, version=8))
        assert five.shape == (6, 5) and eight.shape == (2, 3, 5)
        assert five.tolist() == ND_8.tolist() and eight.tolist() == ND_8.reshape(2, 3, 5).tolist()
        verdict = tops.verify("gather_nd", inputs, {"output": five}, {"batch_dims": 2}, version=5)
        assert verdict.equal
        verdict = tops.verify("gather_nd", inputs, {"output": five}, {"batch_dims": 2}, version=8)
        assert not verdict.equal
        gather_inputs: dict[str, Any] = {
            "data": np.arange(6),
            "indices": np.array([1]),
            "axis": np.array(0),
        }
        with pytest.raises(TensorOpsError) as refused:
            tops.call("gather", gather_inputs, {"batch_dims": 0}, version=1)
        assert refused.value.status in (400, 422)
        assert "batch_dims" in str(refused.value)


@pytest.mark.e2e
def test_the_command_line_selects_a_version(server: tuple[str, str], tmp_path: Path) -> None:
    url, _ = server
    archive = tmp_path / "inputs.npz"
    np.savez(archive, data=ND_DATA, indices=ND_INDICES)
    answers = {}
    for version in ("5", "8"):
        out = tmp_path / f"out{version}.npy"
        argv = ["--url", url, "--op-version", version, "gather_nd", str(archive)]
        assert main([*argv, "--batch-dims", "2", "-o", str(out)]) == 0
        answers[version] = np.load(out)
    assert answers["5"].shape == (6, 5) and answers["8"].shape == (2, 3, 5)
    assert answers["5"].tolist() == ND_8.tolist()
    # Gather-1 refuses a negative index that Gather-8 counts from the end.
    data = tmp_path / "data.json"
    data.write_text(json.dumps([10, 20, 30]))
    out = tmp_path / "gather.npy"
    common = ["--url", url, "gather", str(data), "--indices", "[-1]", "--axis", "0"]
    assert main([*common[:2], "--op-version", "8", *common[2:], "-o", str(out)]) == 0
    assert np.load(out).tolist() == [30]
    assert main([*common[:2], "--op-version", "1", *common[2:], "-o", str(out)]) not in (0, 1)
