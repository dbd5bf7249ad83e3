"""TLS on real sockets: ``python -m app`` with trustme's certificates serves HTTPS and gRPC over
TLS from one certificate; the client checks the server, plaintext and TLS below 1.2 are refused,
mutual TLS asks every client for a certificate on both ports; bad TLS files stop the start."""

import os
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, main
from tests.support import ROOT, free_port, stop_server

pytestmark = pytest.mark.e2e

DATA = np.arange(12, dtype=np.int64).reshape(4, 3)
EXPECTED_ROLL = np.roll(DATA, [-1, 2], [0, 1])


@dataclass(frozen=True)
class Pki:
    """trustme's certificates, as the PEM files the service and the client are given."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path
    other_key: Path


@dataclass(frozen=True)
class Served:
    """A ``python -m app`` over TLS: its https:// URL, its gRPC target and its process."""

    url: str
    grpc_target: str
    process: "subprocess.Popen[bytes]"
    log: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def grpc_port(self) -> int:
        return int(self.grpc_target.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@tensor-ops.test")
    stranger = other.issue_cert("stranger@tensor-ops.test")
    files = {
        "ca": ca.cert_pem,
        "cert": server.cert_chain_pems[0],
        "key": server.private_key_pem,
        "client_cert": client.cert_chain_pems[0],
        "client_key": client.private_key_pem,
        "other_ca": other.cert_pem,
        "other_client_cert": stranger.cert_chain_pems[0],
        "other_client_key": stranger.private_key_pem,
        "other_key": other.issue_cert("127.0.0.1").private_key_pem,
    }
    paths = {}
    for name, blob in files.items():
        paths[name] = folder / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    return Pki(**paths)


@pytest.fixture(autouse=True)
def no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSOR_OPS_API_KEY", raising=False)


def context(pki: Pki, client_cert: bool = False) -> ssl.SSLContext:
    """A client's context trusting the test CA (and presenting the client certificate)."""
    made = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        made.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return made


def launch(env: dict[str, str], log: Path) -> Served:
    """``python -m app`` on free ports of 127.0.0.1 with ``env``; not waited for."""
    port, grpc_port = free_port(), free_port()
    settings = {
        "TENSOR_OPS_HOST": "127.0.0.1",
        "TENSOR_OPS_PORT": str(port),
        "TENSOR_OPS_GRPC_PORT": str(grpc_port),
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env={**os.environ, **settings, **env},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Served(f"https://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", process, log)


def wait_serving(served: Served, verify: ssl.SSLContext) -> None:
    """Until /health answers over HTTPS (gRPC is bound before HTTP serves)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            break
        try:
            if httpx.get(f"{served.url}/health", verify=verify, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"python -m app did not serve HTTPS: {served.log.read_text()}")


@pytest.fixture(scope="module")
def servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    """Two services started side by side: TLS, and mutual TLS (a client CA)."""
    logs = tmp_path_factory.mktemp("logs")
    tls = {"TENSOR_OPS_TLS_CERT_FILE": str(pki.cert), "TENSOR_OPS_TLS_KEY_FILE": str(pki.key)}
    started: dict[str, Served] = {}
    try:
        started["tls"] = launch(tls, logs / "tls.log")
        mutual = {**tls, "TENSOR_OPS_TLS_CLIENT_CA_FILE": str(pki.ca)}
        started["mtls"] = launch(mutual, logs / "mtls.log")
        wait_serving(started["tls"], context(pki))
        wait_serving(started["mtls"], context(pki, client_cert=True))
        yield started
    finally:
        for served in started.values():
            stop_server(served.process)


@pytest.fixture(scope="module")
def tls(servers: dict[str, Served]) -> Served:
    return servers["tls"]


@pytest.fixture(scope="module")
def mtls(servers: dict[str, Served]) -> Served:
    return servers["mtls"]


def handshake(port: int, made: ssl.SSLContext, alpn: list[str] | None = None) -> tuple[Any, ...]:
    """TLS version, ALPN protocol and peer certificate's subject of a bare handshake."""
    if alpn:
        made.set_alpn_protocols(alpn)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        made.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped,
    ):
        peer = wrapped.getpeercert() or {}
        return wrapped.version(), wrapped.selected_alpn_protocol(), peer.get("subjectAltName")


# --- HTTPS ---------------------------------------------------------------------------------------


def test_the_client_checks_the_server_against_the_ca_and_rolls(tls: Served, pki: Pki) -> None:
    with TensorOpsClient(tls.url, verify=str(pki.ca)) as client:
        assert client.roll(DATA, [-1, 2], [0, 1]).tolist() == EXPECTED_ROLL.tolist()
        gathered = client.gather(np.arange(10.0).reshape(2, 5), [[0, 4], [-1, 9]], 1, 1)
        assert gathered.tolist() == [[0.0, 4.0], [9.0, 0.0]]  # index 9 is out of range: 0
    with TensorOpsClient(tls.url, transport="json", verify=context(pki)) as client:
        assert client.roll([1, 2, 3], 1, 0).tolist() == [3, 1, 2]


@pytest.mark.anyio
async def test_the_async_client_over_https_and_grpc_tls(tls: Served, pki: Pki) -> None:
    for transport in ("npz", "grpc"):
        async with AsyncTensorOpsClient(
            tls.url, transport=transport, grpc_target=tls.grpc_target, verify=pki.ca
        ) as client:
            assert (await client.roll(DATA, [-1, 2], [0, 1])).tolist() == EXPECTED_ROLL.tolist()


def test_a_client_that_does_not_trust_the_ca_is_refused_the_handshake(
    tls: Served, pki: Pki
) -> None:
    # httpx's own default roots (certifi's) do not hold trustme's CA.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{tls.url}/health")
    for verify in (True, str(pki.other_ca)):
        with (
            TensorOpsClient(tls.url, verify=verify, timeout=10) as client,
            pytest.raises(TensorOpsError) as caught,
        ):
            client.roll([1, 2, 3], 1, 0)
        assert caught.value.status == 0
        assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


def test_the_certificate_served_is_the_one_configured(tls: Served, pki: Pki) -> None:
    version, alpn, names = handshake(tls.port, context(pki), alpn=["h2", "http/1.1"])
    assert version == "TLSv1.3"
    # HTTP/1.1 only: uvicorn offers no ALPN protocol, so the client falls back to HTTP/1.1.
    assert alpn is None
    assert names == (("IP Address", "127.0.0.1"), ("DNS", "localhost"))


def test_plain_http_to_the_https_port_gets_no_answer(tls: Served) -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        httpx.get(f"http://127.0.0.1:{tls.port}/health", timeout=10)
    with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw:
        raw.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert raw.recv(4096) == b""  # closed: not a byte of an HTTP answer
    with pytest.raises(ValueError, match="verify= and cert= are for TLS"):
        TensorOpsClient(f"http://127.0.0.1:{tls.port}", verify=True, cert=("a.pem", "a.key"))


def old_tls_context(pki: Pki, newest: ssl.TLSVersion) -> ssl.SSLContext:
    """A client offering TLS 1.0 up to ``newest``, at OpenSSL's security level 0 so that the
    local OpenSSL lets it offer the old versions at all."""
    made = context(pki)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0 and 1.1 are deprecated
        made.minimum_version = ssl.TLSVersion.TLSv1
        made.maximum_version = newest
    made.set_ciphers("DEFAULT:@SECLEVEL=0")
    return made


@pytest.mark.parametrize("port_of", ["http", "grpc"])
def test_tls_below_1_2_is_refused_on_both_ports(tls: Served, pki: Pki, port_of: str) -> None:
    port = tls.port if port_of == "http" else tls.grpc_port
    alpn = ["h2"] if port_of == "grpc" else None
    # The same client, allowed TLS 1.2: served, so what follows is the server's refusal.
    assert handshake(port, old_tls_context(pki, ssl.TLSVersion.TLSv1_2), alpn)[0] == "TLSv1.2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        newest_old = ssl.TLSVersion.TLSv1_1
    try:
        handshake(port, old_tls_context(pki, newest_old), alpn)
    except ssl.SSLError as error:
        if error.reason in ("NO_CIPHERS_AVAILABLE", "NO_PROTOCOLS_AVAILABLE"):
            pytest.skip(f"the local OpenSSL cannot offer TLS 1.1 at all ({error.reason})")
        # uvicorn's and gRPC's servers end the handshake on a ClientHello of TLS 1.1 at most.
        assert isinstance(error, ssl.SSLEOFError) or "VERSION" in str(error.reason), error
    else:
        raise AssertionError(f"TLS 1.1 was accepted on the {port_of} port")


# --- gRPC over TLS, from the same certificate ---------------------------------------------------


def test_grpc_over_tls_with_the_same_certificate(tls: Served, pki: Pki) -> None:
    version, alpn, names = handshake(tls.grpc_port, context(pki), alpn=["h2"])
    assert (version, alpn) == ("TLSv1.3", "h2")
    assert names == (("IP Address", "127.0.0.1"), ("DNS", "localhost"))
    with TensorOpsClient(
        tls.url, transport="grpc", grpc_target=tls.grpc_target, verify=pki.ca
    ) as client:
        assert client.roll(DATA, [-1, 2], [0, 1]).tolist() == EXPECTED_ROLL.tolist()
        assert client.gather([[1, 2, 3], [4, 5, 6]], [[1, 1]], 0).tolist() == [
            [[4, 5, 6], [4, 5, 6]]
        ]


def test_grpc_health_over_a_raw_secure_channel(tls: Served, pki: Pki) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    with grpc.secure_channel(tls.grpc_target, credentials) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_plaintext_grpc_channel_to_the_tls_port_is_unavailable(tls: Served) -> None:
    plain = f"http://127.0.0.1:{tls.port}"
    with (
        TensorOpsClient(plain, transport="grpc", grpc_target=tls.grpc_target, timeout=10) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2, 3], 1, 0)
    assert caught.value.status == 0
    assert caught.value.detail["grpc_code"] == "UNAVAILABLE"


@pytest.mark.parametrize("trusting", ["grpc-roots", "other-ca"])
def test_a_grpc_client_that_does_not_trust_the_ca_is_refused(
    tls: Served, pki: Pki, trusting: str
) -> None:
    verify = True if trusting == "grpc-roots" else pki.other_ca
    with (
        TensorOpsClient(
            tls.url, transport="grpc", grpc_target=tls.grpc_target, verify=verify, timeout=10
        ) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2, 3], 1, 0)
    assert caught.value.status == 0
    assert caught.value.detail["grpc_code"] == "UNAVAILABLE"
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


def test_grpc_refuses_what_it_cannot_do(tls: Served, pki: Pki) -> None:
    for verify, words in ((False, "cannot skip"), (context(pki), "not an ssl.SSLContext")):
        with pytest.raises(ValueError, match=words):
            TensorOpsClient(tls.url, transport="grpc", verify=verify)


# --- Mutual TLS ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["npz", "grpc"])
def test_mutual_tls_serves_a_client_certificate_of_the_ca(
    mtls: Served, pki: Pki, transport: str
) -> None:
    with TensorOpsClient(
        mtls.url,
        transport=transport,  # type: ignore[arg-type]
        grpc_target=mtls.grpc_target,
        verify=pki.ca,
        cert=(pki.client_cert, pki.client_key),
    ) as client:
        assert client.roll(DATA, [-1, 2], [0, 1]).tolist() == EXPECTED_ROLL.tolist()


@pytest.mark.parametrize("transport", ["npz", "grpc"])
@pytest.mark.parametrize("certificate", ["none", "other-ca"])
def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_ca(
    mtls: Served, pki: Pki, transport: str, certificate: str
) -> None:
    cert = (pki.other_client_cert, pki.other_client_key) if certificate == "other-ca" else None
    with (
        TensorOpsClient(
            mtls.url,
            transport=transport,  # type: ignore[arg-type]
            grpc_target=mtls.grpc_target,
            verify=pki.ca,
            cert=cert,
            timeout=10,
        ) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2, 3], 1, 0)
    assert caught.value.status == 0  # no answer at all
    if transport == "grpc":
        assert caught.value.detail["grpc_code"] == "UNAVAILABLE"


@pytest.mark.parametrize("client_cert", [False, True], ids=["without", "with"])
def test_mutual_tls_answers_only_after_a_client_certificate(
    mtls: Served, pki: Pki, client_cert: bool
) -> None:
    # Under TLS 1.3 the client's side of the handshake completes before the server has checked
    # its certificate: the refusal is what the first read finds.
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with (
        socket.create_connection(("127.0.0.1", mtls.port), timeout=10) as raw,
        context(pki, client_cert).wrap_socket(raw, server_hostname="127.0.0.1") as wrapped,
    ):
        assert wrapped.version() == "TLSv1.3"
        wrapped.sendall(request)
        answer = b""
        try:
            while chunk := wrapped.recv(4096):  # to the end: the server closes
                answer += chunk
        except ssl.SSLError:  # an alert, where a TLS stack sends one before closing
            pass
    if client_cert:
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert answer.endswith(b'{"status":"ok"}')
    else:
        assert answer == b""  # closed: not a byte of an HTTP answer


@pytest.mark.parametrize("transport", ["npz", "grpc"])
def test_the_cli_over_mutual_tls(
    mtls: Served, pki: Pki, transport: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(source, DATA)
    argv = [
        "--url", mtls.url, "--transport", transport, "--ca-cert", str(pki.ca),
        "roll", str(source), "--shift", "-1", "2", "--axes", "0", "1", "-o", str(out),
    ]  # fmt: skip
    if transport == "grpc":
        argv[4:4] = ["--grpc-target", mtls.grpc_target]
    assert main(["--no-retry", *argv]) == 4  # no client certificate: refused, no answer
    assert "tensor-ops: cannot reach the service at " in capsys.readouterr().err
    assert not out.exists()
    mutual = ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
    assert main([*mutual, *argv]) == 0
    assert np.load(out).tolist() == EXPECTED_ROLL.tolist()
    with pytest.raises(SystemExit) as caught:
        main(["--client-cert", str(pki.client_cert), *argv])
    assert caught.value.code == 2
    assert "--client-cert and --client-key go together" in capsys.readouterr().err


# --- Start-up refusals --------------------------------------------------------------------------


def start_refused(env: dict[str, str]) -> str:
    """What ``python -m app`` logs as it refuses to start with ``env``: status 2, one line."""
    result = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=ROOT,
        env={**os.environ, "TENSOR_OPS_PORT": "0", "TENSOR_OPS_GRPC_PORT": "0", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def encrypted_key(pki: Pki, folder: Path) -> Path:
    key = serialization.load_pem_private_key(pki.key.read_bytes(), password=None)
    path = folder / "encrypted.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"a passphrase"),
        )
    )
    return path


def test_bad_tls_files_stop_the_start_with_their_reason(pki: Pki, tmp_path: Path) -> None:
    cert, key = str(pki.cert), str(pki.key)
    cases: list[tuple[dict[str, str], str]] = [
        (
            {"TENSOR_OPS_TLS_CERT_FILE": cert},
            "TENSOR_OPS_TLS_CERT_FILE and TENSOR_OPS_TLS_KEY_FILE go together",
        ),
        (
            {
                "TENSOR_OPS_TLS_CERT_FILE": str(tmp_path / "absent.pem"),
                "TENSOR_OPS_TLS_KEY_FILE": key,
            },
            "absent.pem' cannot be read: No such file or directory",
        ),
        (
            {"TENSOR_OPS_TLS_CERT_FILE": key, "TENSOR_OPS_TLS_KEY_FILE": key},
            "TENSOR_OPS_TLS_CERT_FILE = '" + key + "' holds no PEM certificate",
        ),
        (
            {"TENSOR_OPS_TLS_CERT_FILE": cert, "TENSOR_OPS_TLS_KEY_FILE": cert},
            "TENSOR_OPS_TLS_KEY_FILE = '" + cert + "' holds no PEM private key",
        ),
        (
            {"TENSOR_OPS_TLS_CERT_FILE": cert, "TENSOR_OPS_TLS_KEY_FILE": str(pki.other_key)},
            "is not the private key of the certificate in TENSOR_OPS_TLS_CERT_FILE",
        ),
        (
            {
                "TENSOR_OPS_TLS_CERT_FILE": cert,
                "TENSOR_OPS_TLS_KEY_FILE": str(encrypted_key(pki, tmp_path)),
            },
            "encrypted.pem' is encrypted: give the key unencrypted",
        ),
        (
            {
                "TENSOR_OPS_TLS_CERT_FILE": cert,
                "TENSOR_OPS_TLS_KEY_FILE": key,
                "TENSOR_OPS_TLS_CLIENT_CA_FILE": key,
            },
            "TENSOR_OPS_TLS_CLIENT_CA_FILE = '" + key + "' holds no PEM certificate",
        ),
        (
            {"TENSOR_OPS_TLS_CLIENT_CA_FILE": str(pki.ca)},
            "TENSOR_OPS_TLS_CLIENT_CA_FILE checks client certificates over TLS",
        ),
    ]
    for env, words in cases:
        line = start_refused(env)
        assert words in line, line
        assert '"level":"error"' in line
