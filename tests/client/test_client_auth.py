"""The client's and the CLI's API key against a real ``python -m app`` with a key file: sent from
``api_key=`` or ``TENSOR_OPS_API_KEY`` on every transport, a 401 as ``TensorOpsError`` (kind
``unauthenticated``) without it or with a wrong one, and the key never shown."""

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, Transport, main
from tests.support import free_port, launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

KEY = "tok-3c9e1a7f5b2d4e6081a3c5e7f9b1d3e5"
WRONG_KEY = "tok-wrong-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
TRANSPORTS: list[Transport] = ["npz", "json", "grpc"]
DATA = np.arange(12, dtype=np.int32).reshape(4, 3)
EXPECTED_ROLL = np.roll(DATA, [-1, 2], [0, 1])


class Keyed:
    """A live server with API keys on: its HTTP URL and gRPC target."""

    def __init__(self, url: str, grpc_target: str, process: Any) -> None:
        self.url = url
        self.grpc_target = grpc_target
        self.process = process

    def client(self, transport: Transport = "npz", **options: Any) -> TensorOpsClient:
        return TensorOpsClient(
            self.url, transport=transport, grpc_target=self.grpc_target, **options
        )


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    keys = tmp_path_factory.mktemp("keys") / "api-keys"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} client-tests\n")
    grpc_port = free_port()
    url, process = launch_server(
        {"TENSOR_OPS_API_KEYS_FILE": str(keys), "TENSOR_OPS_GRPC_PORT": str(grpc_port)},
        command=["-m", "app"],
    )
    try:
        yield Keyed(url, f"127.0.0.1:{grpc_port}", process)
    finally:
        stop_server(process)


@pytest.fixture(autouse=True)
def no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSOR_OPS_API_KEY", raising=False)


def assert_unauthenticated(error: TensorOpsError, transport: Transport, words: str) -> None:
    """A 401 of the service, its kind ``unauthenticated`` as each transport carries it."""
    assert error.status == 401
    assert words in error.message
    # One error model: the same kind, field and words on every transport.
    assert (error.kind, error.field) == ("unauthenticated", "authorization")
    assert error.message.startswith("authorization: ")
    if transport == "grpc":
        assert error.detail["grpc_code"] == "UNAUTHENTICATED"
        assert error.detail["fault"] == "unauthenticated"
    else:
        assert [item["type"] for item in error.detail] == ["unauthenticated"]


def assert_unquoted(key: str, *shown: object) -> None:
    for thing in shown:
        assert key not in str(thing)
        assert key not in repr(thing)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_key_given_is_sent(keyed: Keyed, transport: Transport) -> None:
    with keyed.client(transport, api_key=KEY) as client:
        assert client.roll(DATA, [-1, 2], [0, 1]).tolist() == EXPECTED_ROLL.tolist()
        gathered = client.gather([[1, 2, 3], [4, 5, 6]], [2, 0], 1)
        assert gathered.tolist() == [[3, 1], [6, 4]]
        assert_unquoted(KEY, client)
    assert '"key":"client-tests"' in server_output(keyed.process)  # the label, logged
    assert KEY not in server_output(keyed.process)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_key_of_the_environment_is_sent(
    keyed: Keyed, transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSOR_OPS_API_KEY", KEY)
    with keyed.client(transport) as client:
        assert client.roll([1, 2, 3], 1, 0).tolist() == [3, 1, 2]
        assert_unquoted(KEY, client)
    # An empty key given outright sends none, whatever the environment holds.
    with keyed.client(transport, api_key="") as client, pytest.raises(TensorOpsError) as caught:
        client.roll([1, 2, 3], 1, 0)
    assert_unauthenticated(caught.value, transport, "a key is needed")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_async_client_sends_the_key(keyed: Keyed, transport: Transport) -> None:
    async with AsyncTensorOpsClient(
        keyed.url, transport=transport, grpc_target=keyed.grpc_target, api_key=KEY
    ) as client:
        assert (await client.roll(DATA, [-1, 2], [0, 1])).tolist() == EXPECTED_ROLL.tolist()
    async with AsyncTensorOpsClient(
        keyed.url, transport=transport, grpc_target=keyed.grpc_target
    ) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2, 3], 1, 0)
    assert_unauthenticated(caught.value, transport, "a key is needed")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_key_is_a_401(keyed: Keyed, transport: Transport) -> None:
    with keyed.client(transport) as client, pytest.raises(TensorOpsError) as caught:
        client.roll([1, 2, 3], 1, 0)
    assert_unauthenticated(caught.value, transport, "a key is needed")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_wrong_key_is_a_401_that_never_quotes_it(keyed: Keyed, transport: Transport) -> None:
    with keyed.client(transport, api_key=WRONG_KEY) as client:
        with pytest.raises(TensorOpsError) as caught:
            client.roll([1, 2, 3], 1, 0)
        assert_unquoted(WRONG_KEY, client, caught.value, caught.value.detail)
    assert_unauthenticated(caught.value, transport, "the key is not valid")
    assert WRONG_KEY not in server_output(keyed.process)


def test_a_key_that_cannot_be_sent_is_refused_unquoted(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("two words", "line\nbreak", "caf\u00e9-key"):
        with pytest.raises(ValueError, match="printable ASCII without spaces") as caught:
            TensorOpsClient(api_key=key)
        assert key not in str(caught.value)
    monkeypatch.setenv("TENSOR_OPS_API_KEY", "from the environment")
    with pytest.raises(ValueError, match=r"api_key \(or TENSOR_OPS_API_KEY\)") as caught:
        TensorOpsClient()
    assert "from the environment" not in str(caught.value)


# --- The command line ---------------------------------------------------------------------------


def cli(keyed: Keyed, transport: Transport, source: Path, out: Path) -> list[str]:
    return [
        "--url", keyed.url, "--transport", transport,
        *(["--grpc-target", keyed.grpc_target] if transport == "grpc" else []),
        "roll", str(source), "--shift", "-1", "2", "--axes", "0", "1", "-o", str(out),
    ]  # fmt: skip


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_cli_sends_its_key(
    keyed: Keyed,
    transport: Transport,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, out = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(source, DATA)
    argv = cli(keyed, transport, source, out)
    assert main(["--api-key", KEY, *argv]) == 0
    assert np.load(out).tolist() == EXPECTED_ROLL.tolist()
    out.unlink()
    monkeypatch.setenv("TENSOR_OPS_API_KEY", KEY)
    assert main(argv) == 0
    assert np.load(out).tolist() == EXPECTED_ROLL.tolist()
    out.unlink()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_cli_without_a_valid_key_exits_3_with_the_services_message(
    keyed: Keyed, transport: Transport, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(source, DATA)
    argv = cli(keyed, transport, source, out)
    assert main(argv) == 3  # refused by the service
    missing = capsys.readouterr()
    assert missing.err.startswith("tensor-ops: [401 unauthenticated] authorization: ")
    assert "a key is needed: send 'Authorization: Bearer <key>'" in missing.err
    assert main(["--api-key", WRONG_KEY, *argv]) == 3
    wrong = capsys.readouterr()
    assert wrong.err.startswith("tensor-ops: [401 unauthenticated] authorization: ")
    assert "the key is not valid" in wrong.err
    assert WRONG_KEY not in wrong.out + wrong.err
    assert not out.exists()
