"""Headless Chromium for the browser tests, offline: its flags, a launch, a page server, preflights."""

import contextlib
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a machine with no internet: nothing may reach out, so nothing waits on it.
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long one step in the browser (a click, a fetch, a wait) may take, in milliseconds.
STEP_MS = 15000

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"
)


@contextlib.contextmanager
def chromium() -> Iterator["Browser"]:
    """Debian's Chromium, headless and offline, closed on the way out (also on failure)."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only browser tests need it

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def fresh_page(browser: "Browser") -> "Page":
    """A page in a context of its own: no cookies, stored authorizations or cached preflights
    shared with the test's other pages."""
    page = browser.new_context().new_page()
    page.set_default_timeout(STEP_MS)
    return page


class PageServer:
    """One HTML page served at ``/`` from a free port of 127.0.0.1, by a thread: its URL is an
    origin of its own."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class OnePage(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path == "/"
                self.send_response(200 if found else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test's output is about the service, not this page

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OnePage)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "PageServer":
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class Preflights:
    """The CORS preflights a page's requests caused (what was asked, what was answered, header
    names lower-cased), and the requests CORS stopped (Chromium's reason for each).

    Playwright's request and response events leave preflights out; Chromium's DevTools
    protocol reports them as responses of type ``Preflight``.
    """

    def __init__(self, page: "Page") -> None:
        self.answers: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self._asked: dict[str, dict[str, str]] = {}
        session = page.context.new_cdp_session(page)
        session.on("Network.requestWillBeSent", self._sent)
        session.on("Network.responseReceived", self._received)
        session.on("Network.loadingFailed", self._failed)
        session.send("Network.enable")

    def _sent(self, event: dict[str, Any]) -> None:
        if event["request"]["method"] == "OPTIONS":
            self._asked[event["requestId"]] = lowered(event["request"]["headers"])

    def _received(self, event: dict[str, Any]) -> None:
        if event.get("type") == "Preflight":
            response = event["response"]
            self.answers.append(
                {
                    "url": response["url"],
                    "request": self._asked.get(event["requestId"], {}),
                    "status": response["status"],
                    "headers": lowered(response["headers"]),
                }
            )

    def _failed(self, event: dict[str, Any]) -> None:
        if "corsErrorStatus" in event:
            self.failures.append(event["corsErrorStatus"])


def lowered(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
