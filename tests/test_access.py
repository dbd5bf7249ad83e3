"""API keys: the key file, the 401s of every HTTP way in and of gRPC, probes, reloads, logs."""

import hashlib
import hmac
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from grpc_health.v1 import health_pb2, health_pb2_grpc

import app.access as access_module
from app.access import ApiKeys
from app.keyfile import KeyFileError, parse_keys
from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import (
    LogCollector,
    grpc_channel,
    grpc_serving,
    inference_stub,
    launch_server,
    npz_bytes,
    server_output,
    stop_server,
)

KEY = "k-7f3a9c1e5b2d4086a1c3e5f7091b2d4f"
OTHER_KEY = "k-0000aaaa1111bbbb2222cccc3333dddd"
ROLL = {"data": [1, 2, 3, 4], "shift": 1, "axes": 0}
V2_ROLL = {
    "inputs": [
        {"name": "data", "datatype": "INT32", "shape": [4], "data": [1, 2, 3, 4]},
        {"name": "shift", "datatype": "INT32", "shape": [1], "data": [1]},
        {"name": "axes", "datatype": "INT32", "shape": [1], "data": [0]},
    ]
}


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "keys"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


@pytest.fixture
def service_log() -> Iterator[LogCollector]:
    """The service's records (ask for it after the app's fixture: create_app sets the
    handlers anew)."""
    collector = LogCollector()
    logger = logging.getLogger("tensor_ops")
    logger.addHandler(collector)
    try:
        yield collector
    finally:
        logger.removeHandler(collector)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


# ------------------------------------------------------------------------------------------------
# The key file


def test_key_file_lines_hashes_labels_and_comments() -> None:
    text = (
        "# keys of the service\n"
        f"{digest(KEY)} ci-runner   # the CI's key\n"
        "\n"
        f"   {digest(OTHER_KEY).upper()}\n"
    )
    keys = parse_keys(text)
    assert [key.label for key in keys] == ["ci-runner", f"sha256:{digest(OTHER_KEY)[:8]}"]
    assert [key.digest for key in keys] == [
        hashlib.sha256(KEY.encode()).digest(),
        hashlib.sha256(OTHER_KEY.encode()).digest(),
    ]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        pytest.param(KEY, "expected '<sha256", id="a-key-not-its-hash"),
        pytest.param(digest(KEY)[:63], "expected '<sha256", id="63-hex-digits"),
        pytest.param(f"{digest(KEY)} two labels", "expected '<sha256", id="three-fields"),
        pytest.param(f"{digest(KEY)} bad/label", "a label is 1 to 64", id="label-characters"),
        pytest.param(f"{digest(KEY)} {'x' * 65}", "a label is 1 to 64", id="label-too-long"),
    ],
)
def test_a_malformed_line_is_refused_by_number_without_quoting_it(line: str, words: str) -> None:
    with pytest.raises(KeyFileError) as caught:
        parse_keys(f"# first\n{line}\n", "keys.txt")
    message = str(caught.value)
    assert message.startswith("keys.txt, line 2: ")
    assert words in message
    assert KEY not in message  # a key pasted by mistake is never shown


def test_every_stored_hash_is_compared_whatever_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = [f"key-{number}" for number in range(5)]
    keys = ApiKeys(
        key_file(tmp_path, *(f"{digest(f'k{n}')} {label}" for n, label in enumerate(labels)))
    )
    compared: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(1)
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for number, label in enumerate(labels):
        compared.clear()
        assert keys.label_of(f"k{number}") == label
        assert len(compared) == len(labels)  # no early exit on the first match
    compared.clear()
    assert keys.label_of("nobody") is None
    assert len(compared) == len(labels)


# ------------------------------------------------------------------------------------------------
# HTTP: every way in


def keyed_app(tmp_path: Path, **settings: Any) -> FastAPI:
    path = key_file(tmp_path, f"{digest(KEY)} ci-runner", f"{digest(OTHER_KEY)} notebook")
    return create_app(Settings(api_keys_file=path, **settings))


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=keyed_app(tmp_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


#: A request of every protected way in: the plain routes (JSON and .npz), V2 infer (JSON and
#: binary), V2 metadata, an unknown path.
PROTECTED = [
    pytest.param("POST", "/roll", {"json": ROLL}, "detail", id="roll-json"),
    pytest.param(
        "POST",
        "/gather",
        {
            "content": npz_bytes(data=np.arange(4), indices=np.array([3, 0]), axis=np.array(0)),
            "headers": {"content-type": "application/x-npz"},
        },
        "detail",
        id="gather-npz",
    ),
    pytest.param("POST", "/v2/models/roll/infer", {"json": V2_ROLL}, "error", id="v2-infer"),
    pytest.param(
        "POST", "/v2/models/roll/versions/7/infer", {"json": V2_ROLL}, "error", id="v2-infer-v1"
    ),
    pytest.param("GET", "/v2", {}, "error", id="v2-server-metadata"),
    pytest.param("GET", "/v2/models/gather", {}, "error", id="v2-model-metadata"),
    pytest.param("GET", "/no/such/route", {}, "detail", id="unknown-path"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("method", "path", "request_args", "shape"), PROTECTED)
@pytest.mark.parametrize(
    ("authorization", "challenge", "words"),
    [
        pytest.param(None, 'Bearer realm="tensor-ops"', "a key is needed", id="no-key"),
        pytest.param(
            f"Bearer {KEY}x",
            'Bearer realm="tensor-ops", error="invalid_token"',
            "the key is not valid",
            id="unknown-key",
        ),
        pytest.param(
            f"Basic {KEY}",
            'Bearer realm="tensor-ops", error="invalid_request"',
            "must be 'Bearer <key>'",
            id="other-scheme",
        ),
        pytest.param(
            "Bearer ",
            'Bearer realm="tensor-ops", error="invalid_request"',
            "must be 'Bearer <key>'",
            id="empty-key",
        ),
    ],
)
async def test_a_request_without_a_valid_key_is_401_in_its_protocols_shape(
    keyed: httpx.AsyncClient,
    method: str,
    path: str,
    request_args: dict[str, Any],
    shape: str,
    authorization: str | None,
    challenge: str,
    words: str,
) -> None:
    headers = dict(request_args.get("headers", {}))
    if authorization is not None:
        headers["authorization"] = authorization
    response = await keyed.request(method, path, **{**request_args, "headers": headers})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == challenge
    body = response.json()
    if shape == "detail":
        [item] = body["detail"]
        assert item["loc"] == ["header", "authorization"]
        assert item["type"] == "unauthenticated"
        assert words in item["msg"]
    else:
        assert words in body["error"]
        assert body["error"].startswith("authorization: ")
    assert KEY not in response.text


@pytest.mark.anyio
async def test_each_way_in_serves_a_valid_key(keyed: httpx.AsyncClient) -> None:
    roll = await keyed.post("/roll", json=ROLL, headers=bearer(KEY))
    assert roll.status_code == 200
    assert roll.json()["data"] == [4, 1, 2, 3]
    # The scheme's name is case-insensitive (RFC 7235), and the second key is as good.
    gather = await keyed.post(
        "/gather",
        content=npz_bytes(data=np.arange(4), indices=np.array([3, 0]), axis=np.array(0)),
        headers={"content-type": "application/x-npz", "authorization": f"bearer {OTHER_KEY}"},
    )
    assert gather.status_code == 200
    infer = await keyed.post("/v2/models/roll/infer", json=V2_ROLL, headers=bearer(KEY))
    assert infer.status_code == 200
    assert infer.json()["outputs"][0]["data"] == [4, 1, 2, 3]
    metadata = await keyed.get("/v2/models/gather", headers=bearer(KEY))
    assert metadata.json()["name"] == "gather"


OPEN_ALWAYS = ["/docs", "/openapi.json", "/redoc"]
PROBES = [
    "/health",
    "/health/ready",
    "/metrics",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/roll/ready",
    "/v2/models/gather/versions/1/ready",
]


@pytest.mark.anyio
@pytest.mark.parametrize("path", OPEN_ALWAYS + PROBES)
async def test_docs_and_probes_are_open_by_default(keyed: httpx.AsyncClient, path: str) -> None:
    response = await keyed.get(path)
    assert response.status_code == 200, response.text


@pytest.mark.anyio
async def test_probes_need_a_key_under_auth_probes(tmp_path: Path) -> None:
    transport = httpx.ASGITransport(app=keyed_app(tmp_path, auth_probes=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path in PROBES:
            refused = await client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert (await client.get(path, headers=bearer(KEY))).status_code == 200, path
        for path in OPEN_ALWAYS:
            assert (await client.get(path)).status_code == 200, path


@pytest.mark.anyio
async def test_the_label_is_logged_and_counted_and_the_key_never(
    keyed: httpx.AsyncClient, service_log: LogCollector
) -> None:
    await keyed.post("/roll", json=ROLL, headers=bearer(OTHER_KEY))
    await keyed.post("/roll", json=ROLL, headers=bearer(KEY + "x"))
    lines = [record for record in service_log.records if record.getMessage() == "request"]
    assert [(line.__dict__["status"], line.__dict__.get("key")) for line in lines] == [
        (200, "notebook"),
        (401, None),
    ]
    assert lines[1].__dict__["route"] == "/roll"
    everything = json.dumps([record.__dict__ for record in service_log.records], default=str)
    assert KEY not in everything and OTHER_KEY not in everything
    metrics = (await keyed.get("/metrics")).text
    counted = [
        line for line in metrics.splitlines() if line.startswith("tensor_ops_key_requests_total{")
    ]
    assert any(
        line.startswith('tensor_ops_key_requests_total{key="notebook"} ') for line in counted
    )


def test_openapi_declares_the_bearer_scheme_only_with_keys_on(tmp_path: Path) -> None:
    schema = keyed_app(tmp_path).openapi()
    assert schema["components"]["securitySchemes"] == {
        "apiKey": {
            "type": "http",
            "scheme": "bearer",
            "description": access_scheme_description(),
        }
    }
    paths = schema["paths"]
    for path, method in [
        ("/roll", "post"),
        ("/gather", "post"),
        ("/v2/models/{name}/infer", "post"),
        ("/v2", "get"),
        ("/v2/models/{name}", "get"),
    ]:
        assert paths[path][method]["security"] == [{"apiKey": []}], path
        assert "401" in paths[path][method]["responses"]
    for path in [
        "/health",
        "/health/ready",
        "/metrics",
        "/v2/health/live",
        "/v2/models/{name}/ready",
    ]:
        assert "security" not in paths[path]["get"], path
    plain = create_app(Settings()).openapi()
    assert "securitySchemes" not in plain["components"]
    assert all("security" not in op for item in plain["paths"].values() for op in item.values())


def access_scheme_description() -> str:
    from app.main import BEARER_SCHEME  # noqa: PLC0415

    description = BEARER_SCHEME["description"]
    assert "TENSOR_OPS_API_KEYS_FILE" in description
    return description


# ------------------------------------------------------------------------------------------------
# Reloading


@pytest.mark.anyio
async def test_a_changed_key_file_is_read_again_and_a_broken_one_keeps_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access_module, "RECHECK_SECONDS", 0.0)
    path = key_file(tmp_path, f"{digest(KEY)} first")
    transport = httpx.ASGITransport(app=create_app(Settings(api_keys_file=path)))
    service_log = LogCollector()  # after create_app, which sets the service's handlers anew
    logging.getLogger("tensor_ops").addHandler(service_log)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.post("/roll", json=ROLL, headers=bearer(KEY))).status_code == 200
        # Replaced by a new file (a new inode), as editors and Kubernetes' Secret updates do.
        fresh = tmp_path / "keys.new"
        fresh.write_text(f"{digest(OTHER_KEY)} second\n")
        fresh.replace(path)
        assert (await client.post("/roll", json=ROLL, headers=bearer(KEY))).status_code == 401
        assert (await client.post("/roll", json=ROLL, headers=bearer(OTHER_KEY))).status_code == 200
        # A broken edit: the keys stay as they were, and the log says why.
        path.write_text(f"{digest(OTHER_KEY)} second\nnot a hash\n")
        kept = await client.post("/roll", json=ROLL, headers=bearer(OTHER_KEY))
        assert kept.status_code == 200
        errors = [r.getMessage() for r in service_log.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "API keys not reloaded, the previous ones stay" in errors[0]
        assert "line 2: expected '<sha256" in errors[0]
        # Gone altogether: likewise.
        path.unlink()
        assert (await client.post("/roll", json=ROLL, headers=bearer(OTHER_KEY))).status_code == 200
    logging.getLogger("tensor_ops").removeHandler(service_log)


def test_sighup_reloads_the_keys_of_a_running_server(tmp_path: Path) -> None:
    path = key_file(tmp_path, f"{digest(KEY)} first")
    url, process = launch_server({"TENSOR_OPS_API_KEYS_FILE": str(path)})
    try:
        assert httpx.post(f"{url}/roll", json=ROLL, headers=bearer(KEY)).status_code == 200
        # Rewritten in place with the same length and the old time stamp: the file's change
        # cannot be seen, so only the signal can make the server read it.
        stat = path.stat()
        path.write_text(f"{digest(OTHER_KEY)} later\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        time.sleep(1.2)  # past the once-a-second look at the file
        assert httpx.post(f"{url}/roll", json=ROLL, headers=bearer(KEY)).status_code == 200
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        status = 0
        while time.monotonic() < deadline:
            status = httpx.post(f"{url}/roll", json=ROLL, headers=bearer(OTHER_KEY)).status_code
            if status == 200:
                break
            time.sleep(0.05)
        assert status == 200, server_output(process)
        assert httpx.post(f"{url}/roll", json=ROLL, headers=bearer(KEY)).status_code == 401
        assert process.poll() is None  # SIGHUP's default would have ended it
        assert '"API keys loaded"' in server_output(process)
    finally:
        stop_server(process)
    assert KEY not in server_output_safe(process)


def server_output_safe(process: Any) -> str:
    try:
        return server_output(process)
    except (KeyError, OSError):
        return ""


def start_refused(env: dict[str, str]) -> str:
    """What ``python -m app`` says as it refuses to start with ``env``; it must exit non-zero."""
    result = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "TENSOR_OPS_PORT": "0", "TENSOR_OPS_GRPC_PORT": "0", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0, result.stderr
    return result.stderr


def test_an_unreadable_key_file_stops_the_start_with_its_reason(tmp_path: Path) -> None:
    path = key_file(tmp_path, f"{digest(KEY)} ok", "not-a-hash")
    malformed = start_refused({"TENSOR_OPS_API_KEYS_FILE": str(path)})
    assert "line 2: expected '<sha256" in malformed
    assert "Traceback" not in malformed
    missing = start_refused({"TENSOR_OPS_API_KEYS_FILE": str(tmp_path / "absent")})
    assert "TENSOR_OPS_API_KEYS_FILE" in missing
    assert "cannot be read" in missing
    assert "Traceback" not in missing


# ------------------------------------------------------------------------------------------------
# gRPC


def roll_request() -> Any:
    request = pb.ModelInferRequest(model_name="roll")
    for name, values in (("data", [1, 2, 3, 4]), ("shift", [1]), ("axes", [0])):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[len(values)])
        tensor.contents.int_contents.extend(values)
    return request


@pytest.mark.anyio
@pytest.mark.parametrize("probes", [False, True], ids=["probes-open", "auth-probes"])
async def test_grpc_calls_need_the_key_in_their_metadata(tmp_path: Path, probes: bool) -> None:
    app = keyed_app(tmp_path, auth_probes=probes)
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stub = inference_stub(channel)
        for metadata, details in [
            ((), "a key is needed"),
            ((("authorization", f"Bearer {KEY}x"),), "the key is not valid"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(roll_request(), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert details in (refused.value.details() or "")
            trailing = dict(refused.value.trailing_metadata() or ())
            assert trailing["www-authenticate"].startswith('Bearer realm="tensor-ops"')
            assert trailing["tensor-ops-fault"] == "unauthenticated"
        answer = await stub.ModelInfer(
            roll_request(), metadata=(("authorization", f"Bearer {KEY}"),)
        )
        assert list(np.frombuffer(answer.raw_output_contents[0], np.int32)) == [4, 1, 2, 3]
        with pytest.raises(grpc.aio.AioRpcError) as metadata_refused:
            await stub.ModelMetadata(pb.ModelMetadataRequest(name="roll"))
        assert metadata_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

        health: Any = health_pb2_grpc.HealthStub(channel)
        keyed_call = (("authorization", f"Bearer {OTHER_KEY}"),)
        if probes:
            for probe in (
                stub.ServerLive(pb.ServerLiveRequest()),
                stub.ModelReady(pb.ModelReadyRequest(name="roll")),
                health.Check(health_pb2.HealthCheckRequest()),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as probe_refused:
                    await probe
                assert probe_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            watch = health.Watch(health_pb2.HealthCheckRequest())
            with pytest.raises(grpc.aio.AioRpcError) as watch_refused:
                await watch.read()
            assert watch_refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        live = await stub.ServerLive(
            pb.ServerLiveRequest(), metadata=() if not probes else keyed_call
        )
        assert live.live is True
        checked = await health.Check(
            health_pb2.HealthCheckRequest(), metadata=() if not probes else keyed_call
        )
        assert checked.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.anyio
async def test_a_non_ascii_key_matches_the_hash_of_its_utf8_bytes_over_http(
    tmp_path: Path,
) -> None:
    """A key of non-ASCII characters, hashed as README says (its UTF-8 bytes), is admitted
    over HTTP (the header's bytes as sent); the same characters as Latin-1 bytes are another
    key. (gRPC's clients refuse to send a metadata value that is not ASCII.)"""
    key = "clé-ünïcode-ключ"
    path = key_file(tmp_path, f"{hashlib.sha256(key.encode()).hexdigest()} unicode")
    app = create_app(Settings(api_keys_file=path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        admitted = await client.post(
            "/roll",
            json={"data": [1, 2, 3], "shift": 1, "axes": 0},
            headers=[(b"authorization", b"Bearer " + key.encode())],
        )
        assert admitted.status_code == 200, admitted.text
        assert admitted.json()["data"] == [3, 1, 2]
        latin = await client.post(
            "/roll",
            json={"data": [1, 2, 3], "shift": 1, "axes": 0},
            headers=[(b"authorization", b"Bearer " + "clé".encode("latin-1"))],
        )
        assert latin.status_code == 401
