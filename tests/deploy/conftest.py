"""Fixtures of the deployment tests: one headless Chromium per module that asks for it."""

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.deploy.browser import chromium

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture(scope="module")
def browser() -> Iterator["Browser"]:
    with chromium() as launched:
        yield launched
