"""The docs UI in a real headless Chromium, offline: open /docs, try the Roll example, read it."""

import json
import shutil
from pathlib import Path

import pytest

from app.registry import REGISTRY

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


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_roll_example_runs_in_the_docs_ui(live_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only this test needs it

    requests_elsewhere: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.on(
                "request",
                lambda request: (
                    None
                    if request.url.startswith(live_url) or request.url.startswith("data:")
                    else requests_elsewhere.append(request.url)
                ),
            )
            page.goto(f"{live_url}/docs", wait_until="networkidle")
            operation = page.locator(
                ".opblock-post", has=page.locator(".opblock-summary-path", has_text="/roll")
            ).first
            operation.locator(".opblock-summary").click()
            operation.get_by_role("button", name="Try it out").click()
            operation.get_by_role("button", name="Execute").click()
            body = operation.locator(
                ".live-responses-table .response-col_description pre.microlight"
            ).first
            body.wait_for(timeout=15000)
            shown = json.loads(body.inner_text())
            cells = operation.locator(
                ".live-responses-table .response-col_status"
            ).all_inner_texts()
            statuses = [cell.strip() for cell in cells if cell.strip().isdigit()]
            page.screenshot(path=str(tmp_path / "docs.png"))
        finally:
            browser.close()
    assert statuses == ["200"]
    assert shown["data"] == REGISTRY["roll"].examples["example_1"]["x-expected-output"]
    assert shown["shape"] == [4, 3]
    assert requests_elsewhere == [], "the docs page must not load anything from elsewhere"
