"""Reading request bodies: content type, size limits before and while reading, a read timeout,
gzip/deflate and memory reservation."""

import zlib

import anyio
import numpy as np
from starlette.requests import ClientDisconnect, Request

from app.errors import Fault, ServiceError, quote
from app.pipeline.admission import Reservation
from app.pipeline.threads import run_sized
from app.settings import Settings

JSON_TYPE = "application/json"
NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
#: A request body: bytes as they came, or a view of the buffer they were read into.
Body = bytes | bytearray | memoryview
# Bodies of a declared length from this size on are read into one preallocated buffer.
_PREALLOCATED = 1 << 20
_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def media_type(request: Request) -> str:
    """The request's media type, lower-cased, without parameters ('' when absent)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def wants_npy(request: Request) -> bool:
    """True when the client asked for the raw ``.npy`` of the output."""
    return NPY_TYPE in request.headers.get("accept", "").lower()


def _too_large(size: str, limit: int) -> ServiceError:
    return ServiceError(
        Fault.TOO_LARGE,
        ("body",),
        f"request body of {size} is larger than the limit of {limit} bytes "
        "(raise it with TENSOR_OPS_MAX_BODY_BYTES)",
    )


async def read_body(request: Request, settings: Settings, reservation: Reservation) -> Body:
    """The whole body, decompressed, with its memory reserved before it is held.

    413 as soon as the body (or what it inflates to) is known to pass the limit: from
    ``Content-Length`` before reading, while reading a chunked body, while inflating. 408 when
    the client sends nothing for ``TENSOR_OPS_BODY_TIMEOUT`` seconds.
    """
    limit = settings.max_body_bytes
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "") and encoding not in _ENCODINGS:
        raise ServiceError(
            Fault.UNSUPPORTED_ENCODING,
            ("header", "content-encoding"),
            f"Content-Encoding {quote(encoding)} is not supported; use gzip, deflate or none",
        )
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ServiceError(
                Fault.BAD_HEADER, ("header", "content-length"), "Content-Length is not a number"
            )
        if int(declared) > limit:
            raise _too_large(f"{int(declared)} bytes", limit)
        await reservation.grow_to(int(declared))
    if declared is not None and int(declared) >= _PREALLOCATED:
        body: Body = await _read_declared(request, int(declared), settings.body_timeout)
    else:
        body = await _read_growing(request, limit, reservation, settings.body_timeout)
    if encoding in _ENCODINGS:
        await reservation.grow_to(len(body) + limit)
        inflated = await run_sized(
            len(body) > settings.offload_bytes, _inflate, body, encoding, limit
        )
        return inflated
    return body


async def _read_declared(request: Request, length: int, timeout: float) -> memoryview:
    # A body of known length goes into one NumPy buffer, which takes huge pages: a bytearray
    # grown chunk by chunk takes a page fault every 4 KiB (~50 ms per 64 MiB on this kind of VM).
    buffer = np.empty(length, dtype=np.uint8)
    view = buffer.data
    filled = 0
    with anyio.CancelScope() as waiting:
        waiting.deadline = anyio.current_time() + timeout
        try:
            async for chunk in request.stream():
                if filled + len(chunk) > length:
                    raise ServiceError(
                        Fault.BAD_LENGTH, ("body",), "the body is longer than its Content-Length"
                    )
                view[filled : filled + len(chunk)] = chunk
                filled += len(chunk)
                waiting.deadline = anyio.current_time() + timeout
        except ClientDisconnect:
            raise ServiceError(
                Fault.DISCONNECTED, ("body",), "the client went away mid-body"
            ) from None
    if waiting.cancelled_caught:
        raise _timed_out(timeout)
    return view[:filled]


async def _read_growing(
    request: Request, limit: int, reservation: Reservation, timeout: float
) -> bytearray:
    body = bytearray()
    # One cancel scope for the whole body, its deadline pushed back at each chunk: a client
    # that stops sending for TENSOR_OPS_BODY_TIMEOUT seconds is cut off.
    with anyio.CancelScope() as waiting:
        waiting.deadline = anyio.current_time() + timeout
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _too_large(f"more than {limit} bytes", limit)
                if len(body) > reservation.held:
                    # A chunked body: reserve ahead, doubling, so waits and checks stay few.
                    await reservation.grow_to(min(limit, 2 * len(body)))
                waiting.deadline = anyio.current_time() + timeout
        except ClientDisconnect:
            raise ServiceError(
                Fault.DISCONNECTED, ("body",), "the client went away mid-body"
            ) from None
    if waiting.cancelled_caught:
        raise _timed_out(timeout)
    return body


def _timed_out(timeout: float) -> ServiceError:
    return ServiceError(
        Fault.TIMEOUT,
        ("body",),
        f"no part of the body arrived for {timeout} s (TENSOR_OPS_BODY_TIMEOUT)",
    )


def _inflate(body: Body, encoding: str, limit: int) -> bytearray:
    inflater = zlib.decompressobj(_ENCODINGS[encoding])
    try:
        # Inflate at most limit + 1 bytes: a bomb is refused as soon as it passes the limit.
        out = bytearray(inflater.decompress(body, limit + 1))
    except zlib.error:
        raise ServiceError(
            Fault.BAD_ENCODING, ("body",), f"the body is not valid {encoding} data"
        ) from None
    if len(out) > limit:
        raise ServiceError(
            Fault.TOO_LARGE,
            ("body",),
            f"the body inflates past the limit of {limit} bytes (raise it with "
            "TENSOR_OPS_MAX_BODY_BYTES)",
        )
    if not inflater.eof:
        raise ServiceError(Fault.BAD_ENCODING, ("body",), f"the {encoding} body is truncated")
    return out
