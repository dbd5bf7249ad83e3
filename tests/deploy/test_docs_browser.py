"""The docs UI in a real headless Chromium, offline: open /docs, try the Roll example, read it."""

import json
from pathlib import Path

from app.registry import REGISTRY
from tests.deploy.browser import STEP_MS, chromium, needs_chromium


@needs_chromium
def test_roll_example_runs_in_the_docs_ui(live_url: str, tmp_path: Path) -> None:
    requests_elsewhere: list[str] = []
    with chromium() as browser:
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
        body.wait_for(timeout=STEP_MS)
        shown = json.loads(body.inner_text())
        cells = operation.locator(".live-responses-table .response-col_status").all_inner_texts()
        statuses = [cell.strip() for cell in cells if cell.strip().isdigit()]
        page.screenshot(path=str(tmp_path / "docs.png"))
    assert statuses == ["200"]
    assert shown["data"] == REGISTRY["roll"].examples["example_1"]["x-expected-output"]
    assert shown["shape"] == [4, 3]
    assert requests_elsewhere == [], "the docs page must not load anything from elsewhere"
