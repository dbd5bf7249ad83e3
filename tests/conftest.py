"""Fixtures shared by the test modules: the app, an ASGI client, helpers to compare bits."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.main import create_app
from app.settings import Settings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def bits(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as unsigned integers of its width, native order: equal bits compare equal."""
    native = array.astype(array.dtype.newbyteorder("="))
    return native.view(f"u{array.dtype.itemsize}")


def assert_same_bits(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same shape, same element type, same bits (NaN payloads and -0.0 included)."""
    assert actual.shape == expected.shape
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    np.testing.assert_array_equal(bits(actual), bits(expected))
