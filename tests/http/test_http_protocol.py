"""Each HTTP answer's head and body leave in one write (app/http/protocol.py)."""

import asyncio
from typing import Any

import httpx
import pytest
import uvicorn
import uvicorn.server
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.http.protocol import HELD_BYTES, UVICORN_MEMBERS, JoinedWrites
from tests.support import launch_server, server_output, stop_server

pytestmark = pytest.mark.anyio


class RecordingTransport:
    """A transport that records what is written, as the system calls would see it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, pieces: list[bytes]) -> None:
        self.calls.append(("writelines", b"".join(pieces)))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def get_extra_info(self, name: str) -> Any:
        return f"extra:{name}"


def joined() -> tuple[JoinedWrites, RecordingTransport]:
    raw = RecordingTransport()
    return JoinedWrites(raw), raw  # type: ignore[arg-type]


async def test_head_and_body_written_in_one_turn_leave_in_one_call() -> None:
    writes, raw = joined()
    writes.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writes.write(b"{}")
    await asyncio.sleep(0)
    assert raw.calls == [("writelines", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]


async def test_a_lone_small_write_leaves_at_the_end_of_the_turn() -> None:
    writes, raw = joined()
    writes.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert raw.calls == []
    await asyncio.sleep(0)
    assert raw.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")]
    await asyncio.sleep(0)
    assert len(raw.calls) == 1  # not twice


async def test_a_large_write_goes_at_once_and_joins_a_held_head() -> None:
    writes, raw = joined()
    large = b"x" * (HELD_BYTES + 1)
    writes.write(large)
    assert raw.calls == [("write", large)]
    writes.write(b"head")
    writes.write(large)
    assert raw.calls[1] == ("writelines", b"head" + large)
    writes.write(b"")  # nothing to send, nothing held
    await asyncio.sleep(0)
    assert len(raw.calls) == 2


async def test_close_sends_what_is_held_first_and_the_rest_is_the_transports() -> None:
    writes, raw = joined()
    writes.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    writes.close()
    await asyncio.sleep(0)
    assert raw.calls == [("write", b"HTTP/1.1 400 Bad Request\r\n\r\n"), ("close", b"")]
    assert writes.get_extra_info("peername") == "extra:peername"
    assert writes.is_closing()


async def test_nothing_is_written_to_a_transport_already_closing() -> None:
    writes, raw = joined()
    writes.write(b"late")
    raw.closing = True
    await asyncio.sleep(0)
    assert raw.calls == []


def test_python_m_app_serves_with_it() -> None:
    url, process = launch_server(command=["-m", "app"])
    try:
        for _ in range(3):  # keep-alive: several answers on one connection
            with httpx.Client() as client:
                answers = [
                    client.post(f"{url}/roll", json={"data": [1, 2, 3], "shift": 1, "axes": 0})
                    for _ in range(5)
                ]
            assert [answer.json()["data"] for answer in answers] == [[3, 1, 2]] * 5
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        assert "Traceback" not in server_output(process)
    finally:
        stop_server(process)


def test_uvicorns_members_the_protocol_relies_on_are_still_there() -> None:
    """``ServiceHttpProtocol`` extends uvicorn's httptools protocol through its ``http=`` option
    and uses members uvicorn does not document: when an upgrade renames or drops one, this
    names it (pyproject.toml bounds uvicorn for the same reason)."""
    config = uvicorn.Config(app=lambda *_: None)
    config.load()

    async def made() -> HttpToolsProtocol:
        return HttpToolsProtocol(
            config=config, server_state=uvicorn.server.ServerState(), app_state={}
        )

    protocol = asyncio.run(made())
    missing = [name for name in UVICORN_MEMBERS if not hasattr(protocol, name)]
    assert not missing, (
        f"uvicorn {uvicorn.__version__} no longer has {missing}, which "
        "app/http/protocol.py:ServiceHttpProtocol uses: adapt it before raising "
        "uvicorn's bound in pyproject.toml"
    )
