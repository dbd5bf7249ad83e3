"""The docs UI's Authorize button with API keys on, in a real headless Chromium, offline."""

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from app.registry import REGISTRY
from tests.deploy.browser import STEP_MS, fresh_page, needs_chromium
from tests.support import launch_server, stop_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

KEY = "k-docs-9a8b7c6d5e4f30211f2e3d4c5b6a7980"


@pytest.fixture(scope="module")
def keyed_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("docs-keys") / "keys"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} docs-ui\n")
    url, process = launch_server(env={"TENSOR_OPS_API_KEYS_FILE": str(keys)})
    try:
        yield url
    finally:
        stop_server(process)


def roll_operation(page: "Page") -> "Locator":
    return page.locator(
        ".opblock-post", has=page.locator(".opblock-summary-path", has_text="/roll")
    ).first


def execute_roll(page: "Page") -> tuple[str, str]:
    """Try it out and Execute on POST /roll: the status and the body the UI shows."""
    operation = roll_operation(page)
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    body = operation.locator(".live-responses-table .response-col_description pre.microlight").first
    body.wait_for(timeout=STEP_MS)
    cells = operation.locator(".live-responses-table .response-col_status").all_inner_texts()
    statuses = [cell.strip() for cell in cells if cell.strip().isdigit()]
    return statuses[0], body.inner_text()


def watch_requests(page: "Page", origin: str) -> list[str]:
    elsewhere: list[str] = []
    page.on(
        "request",
        lambda request: (
            None if request.url.startswith((origin, "data:")) else elsewhere.append(request.url)
        ),
    )
    return elsewhere


@needs_chromium
def test_authorize_sends_the_key_with_try_it_out(
    browser: "Browser", keyed_url: str, tmp_path: Path
) -> None:
    page = fresh_page(browser)
    elsewhere = watch_requests(page, keyed_url)
    page.goto(f"{keyed_url}/docs", wait_until="networkidle")
    page.get_by_role("button", name="Authorize").first.click()
    dialog = page.locator(".modal-ux")
    dialog.locator("input").first.fill(KEY)
    dialog.locator("button.modal-btn.auth.authorize").click()
    dialog.locator("button.modal-btn.auth.btn-done").click()
    status, shown = execute_roll(page)
    page.screenshot(path=str(tmp_path / "docs-authorized.png"))
    assert status == "200", shown
    answer = json.loads(shown)
    assert answer["data"] == REGISTRY["roll"].examples["example_1"]["x-expected-output"]
    # The curl line the UI shows carries the header it sent.
    curl = roll_operation(page).locator(".curl-command").inner_text()
    assert f"Authorization: Bearer {KEY}" in curl
    assert elsewhere == [], "the docs page must not load anything from elsewhere"


@needs_chromium
def test_without_authorizing_try_it_out_gets_401(browser: "Browser", keyed_url: str) -> None:
    page = fresh_page(browser)
    page.goto(f"{keyed_url}/docs", wait_until="networkidle")
    status, shown = execute_roll(page)
    assert status == "401", shown
    detail = json.loads(shown)["detail"][0]
    assert detail["loc"] == ["header", "authorization"]
    assert detail["type"] == "unauthenticated"


@needs_chromium
def test_no_authorize_button_when_keys_are_off(browser: "Browser", live_url: str) -> None:
    page = fresh_page(browser)
    page.goto(f"{live_url}/docs", wait_until="networkidle")
    roll_operation(page).wait_for()
    assert page.get_by_role("button", name="Authorize").count() == 0
