"""TENSOR_OPS_LOG_FORMAT: json, text, or auto (JSON unless standard error is a terminal), and one
log line a request under both launchers (uvicorn's own access log is off: the service's line
replaces it)."""

import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from app import observability
from app.observability import TextFormatter, log_format
from tests.support import launch_server, server_output, stop_server

ROOT = Path(__file__).resolve().parents[1]

LAUNCHERS = {
    "python -m app": ["-m", "app"],
    "python -m uvicorn": None,  # launch_server's default: uvicorn app.main:app, the service's http
}
REQUEST_KEYS = {
    "time",
    "level",
    "logger",
    "message",
    "request_id",
    "method",
    "route",
    "path",
    "status",
    "duration_ms",
    "bytes_in",
    "bytes_out",
    "reserved_bytes",
}
TEXT_REQUEST = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d info  POST /roll 200 \d+\.\d ms  id=(\S+) in=\d+ out=\d+"
    r" reserved_bytes=\d+"
)


def one_request(url: str) -> str:
    """POST one roll with a fresh request id; its id."""
    request_id = uuid.uuid4().hex
    response = httpx.post(
        f"{url}/roll",
        json={"data": [1, 2, 3], "shift": 1, "axes": 0},
        headers={"x-request-id": request_id},
        timeout=30,
    )
    assert response.status_code == 200
    return request_id


@pytest.fixture(params=list(LAUNCHERS), ids=list(LAUNCHERS))
def launcher(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@contextmanager
def served(launcher: str, form: str) -> Iterator[tuple[str, str]]:
    """Launch a server with ``form``, send it one request: its log and the request's id."""
    url, process = launch_server({"TENSOR_OPS_LOG_FORMAT": form}, LAUNCHERS[launcher])
    try:
        request_id = one_request(url)
        # The line is written once the answer is sent: it may follow the answer by a moment.
        deadline = time.monotonic() + 10
        while request_id not in server_output(process) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # and a second line, if there were one
        yield server_output(process), request_id
    finally:
        stop_server(process)


@pytest.mark.e2e
def test_json_one_line_a_request_and_every_line_json(launcher: str) -> None:
    # auto: the log goes to a file, not a terminal, so JSON.
    with served(launcher, "auto") as (output, request_id):
        lines = [line for line in output.splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # every line: uvicorn's too
        mine = [record for record in records if request_id in json.dumps(record)]
        assert len(mine) == 1, output
        assert set(mine[0]) == REQUEST_KEYS, mine[0]
        assert mine[0]["message"] == "request"
        assert mine[0]["logger"] == "tensor_ops.access"
        assert (mine[0]["method"], mine[0]["path"], mine[0]["status"]) == ("POST", "/roll", 200)
        assert "HTTP/1.1" not in output  # no uvicorn access line for any request


@pytest.mark.e2e
def test_text_one_line_a_request(launcher: str) -> None:
    with served(launcher, "text") as (output, request_id):
        mine = [line for line in output.splitlines() if request_id in line]
        assert len(mine) == 1, output
        match = TEXT_REQUEST.fullmatch(mine[0])
        assert match, mine[0]
        assert match[1] == request_id
        assert "HTTP/1.1" not in output
        assert not any(line.startswith("{") for line in output.splitlines()), output
        assert re.search(r"^\S+ \S+ info  uvicorn: Started server process", output, re.M)


def test_auto_is_json_off_a_terminal_and_text_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(observability, "_REAL_STDERR", None)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert log_format("auto") == "json"
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert log_format("auto") == "text"
    assert log_format("json") == "json"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert log_format("text") == "text"


def test_text_escapes_control_characters() -> None:
    formatter = TextFormatter()
    record = logging.makeLogRecord(
        {"name": "tensor_ops.access", "levelname": "INFO", "msg": "request"}
    )
    record.__dict__.update(
        request_id="abc",
        method="GET",
        route="unmatched",
        path="/x\n2026-01-01 00:00:00 error  forged",
        status=404,
        duration_ms=0.25,
        bytes_in=0,
        bytes_out=9,
        reserved_bytes=0,
        key="a b",
    )
    line = formatter.format(record)
    assert "\n" not in line
    assert line.endswith(
        "info  GET /x\\n2026-01-01 00:00:00 error  forged 404 0.2 ms  id=abc in=0 out=9 "
        'reserved_bytes=0 key="a b"'
    )
    other = logging.makeLogRecord(
        {"name": "grpc", "levelname": "WARNING", "msg": "a\x1b[31mred\r\nline", "args": None}
    )
    assert formatter.format(other).endswith("warning grpc: a\\x1b[31mred\\r\\nline")


#: Every control and line separator a client's text may carry, and how each line format writes
#: it: C0, DEL, C1 (U+0080, U+0085 next line, U+009B the terminal's escape, U+009F) and the line
#: and paragraph separators.
SEPARATORS = {
    "\x00": ("\\x00", "\\u0000"),
    "\x1b": ("\\x1b", "\\u001b"),
    "\x7f": ("\\x7f", "\\u007f"),
    "\x80": ("\\x80", "\\u0080"),
    "\x85": ("\\x85", "\\u0085"),
    "\x9b": ("\\x9b", "\\u009b"),
    "\x9f": ("\\x9f", "\\u009f"),
    "\u2028": ("\\u2028", "\\u2028"),
    "\u2029": ("\\u2029", "\\u2029"),
}


@pytest.mark.parametrize("character", list(SEPARATORS), ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_every_format_escapes_every_control_and_line_separator(character: str) -> None:
    """A path carrying the character, in an access line of each format: written escaped (the
    text format as Python writes it, JSON as \\uXXXX), so the line stays one line; JSON's read
    back gives the client's text whole. Before: C1, U+0085, U+009B, U+2028 and U+2029 raw."""
    text_escape, json_escape = SEPARATORS[character]
    fields = {
        "request_id": "abc",
        "method": "GET",
        "route": "unmatched",
        "path": f"/x{character}y",
        "status": 404,
        "duration_ms": 0.25,
        "bytes_in": 0,
        "bytes_out": 9,
        "reserved_bytes": 0,
    }
    record = logging.makeLogRecord(
        {"name": "tensor_ops.access", "levelname": "INFO", "msg": "request", **fields}
    )
    text = TextFormatter().format(record)
    assert f"GET /x{text_escape}y 404" in text, text
    line = observability.json_line(0.0, "info", "tensor_ops.access", "request", fields)
    assert f'"path":"/x{json_escape}y"' in line, line
    for written in (text, line):
        assert not any(char in written for char in SEPARATORS), repr(written)
        assert written.splitlines() == [written]
    assert json.loads(line)["path"] == f"/x{character}y"


def test_a_bad_log_format_is_refused_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app"],
        cwd=ROOT,
        env={
            **os.environ,
            "TENSOR_OPS_PORT": "0",
            "TENSOR_OPS_GRPC_PORT": "0",
            "TENSOR_OPS_LOG_FORMAT": "xml",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    record = json.loads(lines[0])
    assert record["level"] == "error"
    assert record["message"] == (
        "cannot start: TENSOR_OPS_LOG_FORMAT = 'xml': Input should be 'auto', 'json' or 'text'"
    )


def test_an_integer_past_64_bits_is_written_as_it_is() -> None:
    """orjson writes no integer past 64 bits; a line holding one is still one JSON object."""
    line = observability.json_line(0.0, "info", "tensor_ops.access", "request", {"n": 10**39})
    assert json.loads(line)["n"] == 10**39
    assert "\n" not in line
