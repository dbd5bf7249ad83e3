"""What a call's plan asks its client to do (``SendHttp``, ``SendGrpc``, ``Wait``), and what
an HTTP answer is: the vocabulary shared by the plans (``_core``, ``_shm``) and the clients
that carry them out."""

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from tensor_ops_client._http import HttpRequest

R = TypeVar("R")


@dataclass
class SendHttp:
    """Make one HTTP request; the result is an ``HttpAnswer``."""

    request: HttpRequest
    timeout: float | None


@dataclass
class HttpAnswer:
    status: int
    headers: httpx.Headers
    body: bytearray


@dataclass
class SendGrpc:
    """Make one ``ModelInfer`` call of these bytes; the result is the answer's bytes."""

    message: bytes
    timeout: float | None


@dataclass
class Wait:
    """Sleep this many seconds; the result is None."""

    seconds: float


Action = SendHttp | SendGrpc | Wait
#: A call's course: yields actions, is sent their results, returns the call's result.
Plan = Generator[Action, Any, R]
