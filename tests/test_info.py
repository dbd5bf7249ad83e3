"""``GET /info``: what a client needs to know of the service (the CLI's ``tensor-ops info``),
and the fault kind of a ``/v2`` refusal in its ``Tensor-Ops-Fault`` header."""

import hashlib
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.registry import REGISTRY, versions
from app.settings import Settings
from app.version import VERSION

pytestmark = pytest.mark.anyio


async def test_info_gives_version_ops_limits_and_ports() -> None:
    settings = Settings(
        max_body_bytes=1000, max_output_bytes=2000, max_rank=8, memory_budget_bytes=1 << 20,
        grpc_port=0,
    )  # fmt: skip
    app = create_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        answer = await c.get("/info")
    assert answer.status_code == 200
    info = answer.json()
    assert info["name"] == "tensor-ops"
    assert info["version"] == VERSION
    # The registry's ops, in its order, as a client reads them (a new op is listed unasked).
    assert info["ops"] == [
        {
            "name": op.name,
            "spec": op.spec,
            "inputs": list(op.input_names),
            # Every attribute, a required one's default null (Reverse's mode, Pad's pad_mode).
            "attributes": {
                item.name: list(item.default) if isinstance(item.default, tuple) else item.default
                for item in op.attributes
            },
            "versions": [str(version) for version in versions(op.name)],
        }
        for op in REGISTRY.values()
    ]
    assert info["ops"][[op["name"] for op in info["ops"]].index("reverse")]["attributes"] == {
        "mode": None
    }
    roll, gather = info["ops"][:2]
    assert roll == {
        "name": "roll", "spec": "Roll-7", "inputs": ["data", "shift", "axes"], "attributes": {},
        "versions": ["7"],
    }  # fmt: skip
    assert gather == {
        "name": "gather",
        "spec": "Gather-8",
        "inputs": ["data", "indices", "axis"],
        "attributes": {"batch_dims": 0},
        "versions": [str(version) for version in versions("gather")],
    }
    limits = info["limits"]
    assert limits["max_body_bytes"] == 1000
    assert limits["max_output_bytes"] == 2000
    assert limits["max_rank"] == 8
    assert limits["memory_budget_bytes"] == 1 << 20
    assert info["transports"] == {"http": ["json", "npz", "v2"], "grpc_port": 0}
    assert info["access"] == {"api_keys": False, "tls": False}


async def test_info_needs_the_key_when_keys_are_on(tmp_path: Path) -> None:

    keys = tmp_path / "keys"
    keys.write_text(hashlib.sha256(b"sesame").hexdigest() + " ci\n")
    app = create_app(Settings(api_keys_file=keys))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        refused = await c.get("/info")
        admitted = await c.get("/info", headers={"authorization": "Bearer sesame"})
    assert refused.status_code == 401
    assert admitted.status_code == 200
    assert admitted.json()["access"]["api_keys"] is True


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"inputs": []}, 422, "missing"),
        (b"{", 400, "json_invalid"),
    ],
)
async def test_v2_refusals_name_their_fault_kind(body: object, status: int, kind: str) -> None:
    app = create_app(Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        if isinstance(body, bytes):
            answer = await c.post(
                "/v2/models/roll/infer", content=body, headers={"content-type": "application/json"}
            )
        else:
            answer = await c.post("/v2/models/roll/infer", json=body)
    assert answer.status_code == status
    assert answer.headers["tensor-ops-fault"] == kind
    assert set(answer.json()) == {"error"}


async def test_v2_refusals_name_their_field() -> None:
    app = create_app(Settings())
    body = {
        "inputs": [
            {"name": "data", "shape": [2], "datatype": "INT64", "data": [1, 2]},
            {"name": "shift", "shape": [1], "datatype": "INT64", "data": [1]},
            {"name": "axes", "shape": [1], "datatype": "INT64", "data": [3]},
        ]
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        answer = await c.post("/v2/models/roll/infer", json=body)
    assert answer.status_code == 422
    assert answer.headers["tensor-ops-fault"] == "spec_violation"
    assert answer.headers["tensor-ops-field"] == "axes"
    assert answer.json()["error"].startswith("axes: ")
