"""Inflating gzip (every member) and deflate bodies and messages piece by piece, each piece
reserved before it is made, the limit holding over all of it: HTTP bodies and gRPC messages."""

import zlib

from app.errors import Fault, ServiceError
from app.pipeline.admission import Reservation
from app.pipeline.run import Body
from app.pipeline.threads import run_sized
from app.settings import Settings

#: The codings undone, by name: zlib's window bits for each.
ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# Inflated bodies grow by pieces of this size, each reserved before it is made.
_INFLATE_STEP = 8 << 20
_GZIP_MAGIC = b"\x1f\x8b"


async def inflate(
    body: Body,
    encoding: str,
    settings: Settings,
    reservation: Reservation,
    limit: int | None = None,
    what: str = "body",
) -> bytearray:
    """Every member of a gzip (RFC 1952) or zlib (RFC 1950) body, inflated piece by piece.

    Input goes in by slices and output comes out by pieces, each reserved before it is made;
    the limit (``TENSOR_OPS_MAX_BODY_BYTES`` unless given) holds over all members together.
    Bytes after the last member that do not begin another gzip member are refused (a deflate
    body has one stream). ``what`` names the thing inflated in messages (a gRPC message).
    """
    if limit is None:
        limit = settings.max_body_bytes
    view = memoryview(body).cast("B")
    offload = len(view) > settings.offload_bytes
    out = bytearray()
    inflater = zlib.decompressobj(ENCODINGS[encoding])
    position = 0
    tail: bytes | memoryview = b""
    produced = True
    while True:
        if inflater.eof:
            rest = len(inflater.unused_data) + len(view) - position
            if not rest:
                return out
            head = (inflater.unused_data + view[position : position + 2].tobytes())[:2]
            if encoding == "deflate" or head != _GZIP_MAGIC:
                raise ServiceError(
                    Fault.BAD_ENCODING,
                    ("body",),
                    f"the {encoding} {what} has {rest} bytes after its last member",
                )
            tail = inflater.unused_data
            inflater = zlib.decompressobj(ENCODINGS[encoding])
        if not tail:
            if position < len(view):
                tail = view[position : position + _INFLATE_STEP]
                position += len(tail)
            elif not produced:  # nothing left to feed, and the last call made nothing
                raise ServiceError(
                    Fault.BAD_ENCODING, ("body",), f"the {encoding} {what} is truncated"
                )
        step = min(limit + 1 - len(out), _INFLATE_STEP)
        await reservation.grow_to(len(view) + len(out) + step + _INFLATE_STEP)
        piece = await run_sized(offload, _inflate_piece, inflater, tail, step, encoding, what)
        produced = bool(piece)
        out += piece
        if len(out) > limit:
            raise ServiceError(
                Fault.TOO_LARGE,
                ("body",),
                f"the {what} inflates past the limit of {limit} bytes (raise it with "
                "TENSOR_OPS_MAX_BODY_BYTES)",
            )
        tail = inflater.unconsumed_tail


def _inflate_piece(
    inflater: "zlib._Decompress", data: bytes | memoryview, most: int, encoding: str, what: str
) -> bytes:
    try:
        return inflater.decompress(data, most)
    except zlib.error:
        raise ServiceError(
            Fault.BAD_ENCODING, ("body",), f"the {what} is not valid {encoding} data"
        ) from None
