"""Standard base64 (RFC 4648): pybase64's SIMD codec when installed, the standard library's else.

The server always has pybase64 (4-5x faster on large ``.npy`` payloads); the client keeps its
dependencies to httpx and numpy, and takes pybase64 with its ``fast`` extra.
"""

import base64
from types import ModuleType
from typing import Any

#: Anything with the buffer protocol (collections.abc.Buffer from Python 3.12).
Buffer = bytes | bytearray | memoryview | Any

pybase64: ModuleType | None
try:
    import pybase64
except ImportError:  # the client without its fast extra
    pybase64 = None


def b64decode(text: str | Buffer, *, validate: bool = True) -> bytes:
    """The bytes of standard, padded base64 ``text``; ValueError when it is not that."""
    if pybase64 is not None:
        decoded: bytes = pybase64.b64decode(text, validate=validate)
        return decoded
    if isinstance(text, str):
        text = text.encode("ascii")  # UnicodeEncodeError is a ValueError, as pybase64's
    return base64.b64decode(text, validate=validate)


def b64encode(data: Buffer) -> bytes:
    """The standard, padded base64 of ``data``."""
    if pybase64 is not None:
        encoded: bytes = pybase64.b64encode(data)
        return encoded
    return base64.b64encode(data)
