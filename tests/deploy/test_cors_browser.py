"""CORS in a real headless Chromium: a page of another origin calls the service, or is refused."""

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

from tests.deploy.browser import PageServer, Preflights, fresh_page, needs_chromium
from tests.support import launch_server, stop_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser

KEY = "k-cors-5d1e9b7a3c2f4e6081a9b3c5d7e9f1a2"
DATA = np.arange(12, dtype=np.int64).reshape(3, 4)
ROLL = {"data": DATA.tolist(), "shift": [1, -2], "axes": [0, 1]}
EXPECTED = np.roll(DATA, [1, -2], axis=[0, 1])

# What a web app does: call the service with fetch and read what came back, or the failure.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>a web app</title><link rel="icon" href="data:,">
<script>
async function callService(url, headers, body) {
  try {
    const answer = await fetch(url, {method: "POST", headers, body: JSON.stringify(body)});
    return {
      status: answer.status,
      body: await answer.json(),
      requestId: answer.headers.get("x-request-id"),
      wwwAuthenticate: answer.headers.get("www-authenticate"),
    };
  } catch (error) {
    return {error: String(error)};
  }
}
</script></head><body>a web app of another origin</body></html>
"""
CALL = "([url, headers, body]) => callService(url, headers, body)"


def listed(value: str) -> set[str]:
    """The names of a comma-separated header value, lower-cased."""
    return {part.strip().lower() for part in value.split(",") if part.strip()}


@pytest.fixture(scope="module")
def allowed_page() -> Iterator[PageServer]:
    with PageServer(PAGE) as server:
        yield server


@pytest.fixture(scope="module")
def other_page() -> Iterator[PageServer]:
    with PageServer(PAGE) as server:
        yield server


@pytest.fixture(scope="module")
def service_url(
    allowed_page: PageServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The service with API keys on and CORS allowing ``allowed_page``'s origin only."""
    keys = tmp_path_factory.mktemp("cors") / "keys"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} web-app\n")
    env = {
        "TENSOR_OPS_CORS_ORIGINS": allowed_page.origin,
        "TENSOR_OPS_API_KEYS_FILE": str(keys),
    }
    url, process = launch_server(env=env)
    try:
        yield url
    finally:
        stop_server(process)


@needs_chromium
def test_a_listed_origin_runs_a_roll_through_fetch(
    browser: "Browser", allowed_page: PageServer, service_url: str
) -> None:
    page = fresh_page(browser)
    preflights = Preflights(page)
    page.goto(allowed_page.origin + "/")
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {KEY}",
        "x-request-id": "browser-1",
    }
    answer: dict[str, Any] = page.evaluate(CALL, [f"{service_url}/roll", headers, ROLL])

    assert answer["status"] == 200, answer
    assert answer["body"]["data"] == EXPECTED.tolist()
    assert answer["body"]["shape"] == [3, 4]
    assert answer["body"]["dtype"] == "int64"
    assert answer["requestId"] == "browser-1"  # exposed, so the page can read it
    # The key, the id and the JSON type are not safelisted: the browser asked first.
    assert len(preflights.answers) == 1, preflights.answers
    preflight = preflights.answers[0]
    assert preflight["url"] == f"{service_url}/roll"
    assert listed(preflight["request"]["access-control-request-headers"]) == {
        "authorization",
        "content-type",
        "x-request-id",
    }
    assert preflight["status"] == 200
    allowed = preflight["headers"]
    assert allowed["access-control-allow-origin"] == allowed_page.origin
    assert listed(allowed["access-control-allow-methods"]) == {"get", "post"}
    assert {"authorization", "content-type", "x-request-id", "content-encoding"} <= listed(
        allowed["access-control-allow-headers"]
    )
    assert allowed["access-control-max-age"] == "600"
    assert preflights.failures == []


@needs_chromium
def test_an_origin_not_listed_is_blocked_by_the_browser(
    browser: "Browser", other_page: PageServer, service_url: str
) -> None:
    page = fresh_page(browser)
    preflights = Preflights(page)
    page.goto(other_page.origin + "/")
    headers = {
        "content-type": "application/json",
        "authorization": f"Bearer {KEY}",
        "x-request-id": "browser-blocked",
    }
    answer: dict[str, Any] = page.evaluate(CALL, [f"{service_url}/roll", headers, ROLL])

    assert answer == {"error": "TypeError: Failed to fetch"}
    assert len(preflights.answers) == 1, preflights.answers
    refused = preflights.answers[0]
    assert refused["status"] == 400
    assert "access-control-allow-origin" not in refused["headers"]
    # The browser stopped at the preflight (DevTools' report of the CORS error itself comes
    # late or not at all in headless Chromium, so the refusal is read from the answer above).

    preflight = httpx.options(
        f"{service_url}/roll",
        headers={
            "origin": other_page.origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type",
        },
        timeout=10,
    )
    assert preflight.status_code == 400
    assert preflight.text == "Disallowed CORS origin"
    assert "access-control-allow-origin" not in preflight.headers
    # A request sent anyway (not by a browser) is served, but says nothing a browser would
    # let the page read.
    sent_anyway = httpx.post(
        f"{service_url}/roll",
        json=ROLL,
        headers={"origin": other_page.origin, "authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert sent_anyway.json()["data"] == EXPECTED.tolist()
    assert "access-control-allow-origin" not in sent_anyway.headers


@needs_chromium
def test_a_listed_origin_reads_the_401_of_a_missing_or_wrong_key(
    browser: "Browser", allowed_page: PageServer, service_url: str
) -> None:
    page = fresh_page(browser)
    page.goto(allowed_page.origin + "/")
    url = f"{service_url}/roll"
    missing: dict[str, Any] = page.evaluate(CALL, [url, {"content-type": "application/json"}, ROLL])
    wrong: dict[str, Any] = page.evaluate(
        CALL,
        [url, {"content-type": "application/json", "authorization": "Bearer not-a-key"}, ROLL],
    )

    assert missing["status"] == 401, missing
    assert missing["body"]["detail"][0]["msg"] == (
        "a key is needed: send 'Authorization: Bearer <key>'"
    )
    assert missing["wwwAuthenticate"] == 'Bearer realm="tensor-ops"'
    assert len(missing["requestId"]) == 32
    assert wrong["status"] == 401, wrong
    assert wrong["body"]["detail"][0]["msg"] == "the key is not valid"
    assert wrong["wwwAuthenticate"] == 'Bearer realm="tensor-ops", error="invalid_token"'


def test_without_the_setting_no_origin_is_allowed(live_url: str) -> None:
    origin = "http://127.0.0.1:9"
    preflight = httpx.options(
        f"{live_url}/roll",
        headers={"origin": origin, "access-control-request-method": "POST"},
        timeout=10,
    )
    call = httpx.post(f"{live_url}/roll", json=ROLL, headers={"origin": origin}, timeout=10)

    # No CORS layer: OPTIONS is a method /roll does not have, and nothing is allowed.
    assert preflight.status_code == 405
    assert call.json()["data"] == EXPECTED.tolist()
    for answer in (preflight, call):
        assert not [name for name in answer.headers if name.startswith("access-control-")]
