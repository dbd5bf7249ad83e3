"""What the fuzzers share: apps called in process with raw bytes, the checks every answer must
pass, and a count of the cases run.

Requests go straight to the ASGI app (what ``httpx.ASGITransport`` does, without its header
normalisation), so a fuzzer can send any header bytes: a Content-Length that lies, digits that
are not ASCII, several values. Every answer must be below 500, in its route's error shape when it
is an error, and must leave nothing at ERROR level in the service's log (``internal_error`` logs
``unexpected error`` with its traceback for every 500).
"""

import asyncio
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from hypothesis import HealthCheck, currently_in_test_context, event, settings
from starlette.types import Message

from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.npy import MAX_NBYTES

#: ``TENSOR_OPS_FUZZ_EXAMPLES=20000`` runs each fuzzer that long on fresh random examples; unset,
#: each runs a fixed, derandomised set (the same cases on every run, in CI).
FUZZ_EXAMPLES = os.environ.get("TENSOR_OPS_FUZZ_EXAMPLES")

#: Cases run, by fuzzer, and the statuses they got; tests/fuzz/conftest.py prints them at the end
#: of the session.
CASES: Counter[str] = Counter()
STATUSES: dict[str, Counter[int]] = {}

#: A request's headers: raw name and value bytes, as an ASGI server hands them over.
RawHeaders = list[tuple[bytes, bytes]]

# Small enough that no fuzzed request makes a large output: past it, a 413 from the budget.
_BUDGET = 32 << 20


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings of a fuzzer: ``examples`` fixed cases in CI, or the environment's
    count of fresh ones."""
    return settings(
        max_examples=int(FUZZ_EXAMPLES) if FUZZ_EXAMPLES else examples,
        derandomize=not FUZZ_EXAMPLES,
        database=None,  # no .hypothesis directory left in the working tree
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        print_blob=True,
    )


#: The settings the fuzzers run under: the defaults, and the widest tensor limits the settings
#: accept (rank, dimension and output at NumPy's own), where any check the service forgets meets
#: NumPy's refusal (a 500). The memory budget is small, so that no case holds much memory.
FUZZ_SETTINGS = {
    "default": Settings(memory_budget_bytes=_BUDGET, log_level="warning"),
    "widest": Settings(
        max_rank=64,
        max_dimension=MAX_NBYTES,
        max_output_bytes=MAX_NBYTES,
        memory_budget_bytes=_BUDGET,
        log_level="warning",
    ),
}


@dataclass
class Answer:
    """A response: its status, headers (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _Errors(logging.Handler):
    """Keeps every record at ERROR or above."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Service:
    """The fuzz apps, one event loop to call them on, and what their loggers say at ERROR."""

    apps: dict[str, FastAPI]
    loop: asyncio.AbstractEventLoop
    errors: _Errors = field(default_factory=_Errors)

    def call(
        self,
        app: str,
        method: str,
        path: str,
        headers: RawHeaders,
        body: bytes,
        query: bytes = b"",
    ) -> Answer:
        """One request to ``app``, its body in one piece."""
        return self.loop.run_until_complete(
            asyncio.wait_for(_call(self.apps[app], method, path, headers, body, query), 60)
        )

    def logged_errors(self) -> list[str]:
        """What was logged at ERROR since the last call, tracebacks included; then forgets it."""
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        lines = [formatter.format(record) for record in self.errors.records]
        self.errors.records.clear()
        return lines


@contextmanager
def service() -> Iterator[Service]:
    """The fuzz apps, and what is logged at ERROR while they run: by the service (whose
    ``tensor_ops`` logger ``create_app`` configures, and which is put back as it was after), or
    by anything else that reaches the root logger (asyncio's unretrieved task errors, say)."""
    service_logger, root = logging.getLogger("tensor_ops"), logging.getLogger()
    saved = (service_logger.handlers[:], service_logger.level, service_logger.propagate)
    loop = asyncio.new_event_loop()
    running = Service({}, loop)
    try:
        running.apps = {name: create_app(chosen) for name, chosen in FUZZ_SETTINGS.items()}
        service_logger.addHandler(running.errors)
        root.addHandler(running.errors)
        yield running
    finally:
        root.removeHandler(running.errors)
        loop.close()
        handlers, level, propagate = saved
        service_logger.handlers[:] = handlers
        service_logger.setLevel(level)
        service_logger.propagate = propagate


async def _call(
    app: FastAPI, method: str, path: str, headers: RawHeaders, body: bytes, query: bytes
) -> Answer:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogateescape"),
        "query_string": query,
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in headers],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
        "state": {},
    }
    delivered = False
    answer = Answer(0, {}, b"")

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(0)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in message.get("headers", [])
            }
        elif message["type"] == "http.response.body":
            answer.body += bytes(message.get("body", b""))

    await app(scope, receive, send)
    return answer


def check(running: Service, answer: Answer, v2: bool, case: str) -> None:
    """The rules every answer keeps: no 5xx; an error in its route's shape, with its kind and a
    short message; a 200 that is what its media type says; nothing logged at ERROR."""
    if currently_in_test_context():
        event(f"status {answer.status}")
    _check(running, answer, v2)
    CASES[case] += 1  # counted once it passed
    STATUSES.setdefault(case, Counter())[answer.status] += 1


def _check(running: Service, answer: Answer, v2: bool) -> None:
    logged = running.logged_errors()
    assert not logged, "logged at ERROR:\n" + "\n".join(logged)
    assert 200 <= answer.status < 500, (answer.status, answer.body[:2000])
    if 300 <= answer.status < 400:  # a redirect (a trailing slash): where to, no body
        assert "location" in answer.headers
        return
    media = answer.headers.get("content-type", "")
    if answer.status >= 400:
        assert media.startswith("application/json"), (answer.status, media)
        payload = answer.json()
        assert isinstance(payload, dict)
        if v2:
            assert set(payload) == {"error"}, payload
            assert isinstance(payload["error"], str)
            assert payload["error"]
        else:
            assert set(payload) == {"detail"}, payload
            assert isinstance(payload["detail"], list)
            assert payload["detail"]
            for item in payload["detail"]:
                assert set(item) == {"loc", "msg", "type"}, item
                assert isinstance(item["loc"], list)
                assert isinstance(item["msg"], str)
                assert item["msg"]
                assert isinstance(item["type"], str)
        assert "Traceback" not in answer.body.decode("utf-8", "replace")
        return
    if media.startswith("application/json"):
        assert isinstance(answer.json(), dict)
    elif media.startswith("application/x-npy"):
        assert answer.body.startswith(b"\x93NUMPY")
    else:
        assert media.startswith("application/octet-stream"), media
        length = int(answer.headers["inference-header-content-length"])
        assert isinstance(json.loads(answer.body[:length]), dict)
