"""The NumPy ``.npy`` format, raw and as base64: read without pickle, written in one copy."""

import ast
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.b64 import b64decode, b64encode
from tensor_ops_wire.dtypes import BFLOAT16, canonical_bools, shown
from tensor_ops_wire.errors import unacceptable, undecodable

MAGIC = b"\x93NUMPY"
#: The longest header accepted, as NumPy's own ``max_header_size`` default.
MAX_HEADER_BYTES = 10_000
#: NumPy cannot hold arrays of more dimensions than this.
MAX_RANK = 64
#: The most bytes (and so elements) one NumPy array can span: the largest ``np.intp``.
MAX_NBYTES = int(np.iinfo(np.intp).max)
_HEADER_KEYS = {"descr", "fortran_order", "shape"}
_ALIGNMENT = 64
# base64 is handled in pieces of this many characters (a multiple of 4), i.e. _RAW_PIECE bytes.
_BASE64_PIECE = 1 << 19
_RAW_PIECE = _BASE64_PIECE // 4 * 3


def decode_npy(
    buffer: bytes | bytearray | memoryview,
) -> npt.NDArray[Any]:
    """The array in the bytes of an ``.npy`` file, without copying its data.

    The header is parsed as a Python literal (never unpickled) and checked before any array
    exists: known keys only, a plain element type, a shape of non-negative integers whose byte
    size is exactly the length of the payload. The result is a read-only view of ``buffer``
    (but for bool data holding a byte other than 0 or 1: a copy, every nonzero byte made 1).
    Element types are not judged here beyond being plain (2-byte void is kept, for bfloat16).
    """
    view = memoryview(buffer).cast("B")
    if len(view) < 10 or view[:6] != MAGIC:
        raise undecodable("not an .npy file: it does not start with the .npy magic string")
    major, minor = view[6], view[7]
    if major == 1:
        header_length = int.from_bytes(view[8:10], "little")
        start = 10
    elif major in (2, 3):
        if len(view) < 12:
            raise undecodable("truncated .npy file: the header length is cut off")
        header_length = int.from_bytes(view[8:12], "little")
        start = 12
    else:
        raise undecodable(f".npy format version {major}.{minor} is not supported (1.0, 2.0, 3.0)")
    if header_length > MAX_HEADER_BYTES:
        raise undecodable(
            f".npy header of {header_length} bytes is longer than the {MAX_HEADER_BYTES} allowed"
        )
    payload_start = start + header_length
    if payload_start > len(view):
        raise undecodable(
            f"truncated .npy file: the header announces {header_length} bytes, "
            f"{len(view) - start} are there"
        )
    header = _parse_header(bytes(view[start:payload_start]), "utf-8" if major == 3 else "latin-1")
    dtype = _header_dtype(header["descr"])
    shape = _header_shape(header["shape"])
    fortran_order = header["fortran_order"]
    if not isinstance(fortran_order, bool):
        raise undecodable(
            f".npy header: fortran_order must be True or False, got {shown(fortran_order)}"
        )
    if not numpy_can_hold(shape, dtype.itemsize):
        raise undecodable(
            f".npy header announces shape {shown(shape)}, which overflows 64-bit sizes "
            "(no array can have it)"
        )
    count = math.prod(shape)
    expected = count * dtype.itemsize
    actual = len(view) - payload_start
    if actual != expected:
        raise undecodable(
            f".npy header announces shape {shown(shape)} of {dtype.name}, which is {expected} "
            f"bytes, but the payload has {actual} bytes"
        )
    # A bool byte other than 0 or 1 is true and becomes 1 (a copy only then), on every transport.
    flat = canonical_bools(np.frombuffer(view, dtype=dtype, count=count, offset=payload_start))
    if fortran_order:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def spanned_bytes(shape: Sequence[int], itemsize: int) -> int:
    """The bytes the nonzero dimensions of ``shape`` span at ``itemsize`` bytes an element, in
    Python integers, stopping early once past ``MAX_NBYTES`` (the product of a long shape of
    huge numbers is never computed in full).

    This, not the array's size, is what NumPy holds to its limit: it refuses an empty
    ``(0, 2**62)`` int16 array ("array is too big") as surely as a full one.
    """
    total = itemsize
    for size in shape:
        if size:
            total *= size
            if total > MAX_NBYTES:
                return total
    return total


def numpy_can_hold(shape: Sequence[int], itemsize: int) -> bool:
    """True when NumPy can make an array of ``shape`` (non-negative Python integers) and
    ``itemsize``: at most ``MAX_RANK`` dimensions, its nonzero ones spanning at most
    ``MAX_NBYTES`` bytes, whether or not another dimension is 0."""
    return len(shape) <= MAX_RANK and spanned_bytes(shape, itemsize) <= MAX_NBYTES


#: One header parsed at a time in a process: CPython 3.11 keeps the depth of the AST it turns
#: into objects in one place for every thread, so a parse that another thread's parse interrupts
#: (a garbage collection in it runs a finalizer, and the finalizer lets the other thread run)
#: fails with "SystemError: AST constructor recursion depth mismatch". Decoding runs in worker
#: threads (the service's, ``tensor-ops verify --local --jobs``). Reentrant: a finalizer of the
#: same thread may decode too.
_PARSING = threading.RLock()


def _parse_header(raw: bytes, encoding: str) -> dict[str, object]:
    try:
        text = raw.decode(encoding).strip()
        with _PARSING:
            header = ast.literal_eval(text)
    except (
        UnicodeDecodeError,
        ValueError,
        SyntaxError,
        TypeError,
        OverflowError,
        MemoryError,
        RecursionError,
    ):
        raise undecodable(".npy header is not a Python dict literal") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise undecodable(
            ".npy header must be a dict with exactly the keys 'descr', 'fortran_order', 'shape'"
        )
    return header


def _header_dtype(descr: object) -> np.dtype[Any]:
    if not isinstance(descr, str):
        raise unacceptable(
            f".npy element type {shown(descr)} is not a plain type string (a structured type?); "
            "only plain numeric types and bool are supported"
        )
    try:
        dtype = np.dtype(descr)
    # Warning: a deprecated alias ('a') where warnings are errors.
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError, Warning):
        raise undecodable(f".npy header names an unknown element type {shown(descr)}") from None
    if dtype.hasobject:
        raise undecodable(
            ".npy file holds Python objects, which are pickled; pickles are never loaded"
        )
    plain_void = dtype.kind == "V" and dtype.itemsize == 2 and dtype.fields is None
    if (dtype.kind not in "biuf" and not plain_void) or dtype.subdtype is not None:
        raise unacceptable(
            f".npy element type {shown(descr)} is not supported; supported: bool, int8-64, "
            "uint8-64, float16, float32, float64, and bfloat16 as 2-byte elements"
        )
    return dtype


def _header_shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in shape
    ):
        raise undecodable(f".npy header: shape must be a tuple of integers, got {shown(shape)}")
    if len(shape) > MAX_RANK:
        raise unacceptable(f".npy shape has rank {len(shape)}; at most {MAX_RANK} is supported")
    if any(size < 0 for size in shape):
        raise undecodable(f".npy header: shape {shown(shape)} has a negative dimension")
    return shape


def npy_buffer(
    shape: tuple[int, ...], dtype: np.dtype[Any]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[Any]]:
    """The bytes of an ``.npy`` file with its header written, and the array its data goes in.

    A kernel can write its output straight into the returned array: the file is then complete,
    with no copy. Data is little-endian and in C order; bfloat16 is written as ``<u2`` (2-byte
    elements every ``.npy`` reader can load, to be viewed as bfloat16).
    """
    descr, layout = _file_layout(dtype)
    header = _header_bytes(descr, shape)
    buffer = np.empty(len(header) + math.prod(shape) * dtype.itemsize, dtype=np.uint8)
    buffer[: len(header)] = np.frombuffer(header, dtype=np.uint8)
    return buffer, buffer[len(header) :].view(layout).reshape(shape)


def _file_layout(dtype: np.dtype[Any]) -> tuple[str, np.dtype[Any]]:
    """The header's ``descr`` of an ``.npy`` file of ``dtype``, and its data's element layout."""
    if dtype == BFLOAT16:
        return "<u2", dtype
    if dtype.itemsize == 1:
        return dtype.str, dtype
    layout = dtype.newbyteorder("<")
    return layout.str, layout


def npy_pieces(array: npt.NDArray[Any]) -> tuple[bytes, memoryview]:
    """The ``.npy`` file of ``array`` as its header and its data, the data a view of the
    array's own memory when it is laid out as the file's (C order, little-endian): no copy of
    it is made, and the array must not change until the pieces are used."""
    descr, layout = _file_layout(array.dtype)
    if array.flags.c_contiguous and array.dtype == layout:
        return _header_bytes(descr, array.shape), array.reshape(-1).view(np.uint8).data
    whole = encode_npy(array)  # the data copied once, into the file's layout
    start = whole.size - array.nbytes
    return whole[:start].tobytes(), whole[start:].data


def encode_npy(array: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """The bytes of an ``.npy`` file (format 1.0, or 2.0 for very long headers) holding ``array``,
    written with one copy of the data."""
    buffer, target = npy_buffer(array.shape, array.dtype)
    np.copyto(target, array, casting="equiv")
    return buffer


def _header_bytes(descr: str, shape: tuple[int, ...]) -> bytes:
    literal = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    for version, prefix_length in ((1, 10), (2, 12)):
        padding = -(prefix_length + len(literal) + 1) % _ALIGNMENT
        text = (literal + " " * padding + "\n").encode("latin-1")
        if version == 1 and len(text) >= 1 << 16:
            continue
        size = len(text).to_bytes(2 if version == 1 else 4, "little")
        return MAGIC + bytes((version, 0)) + size + text
    raise AssertionError("unreachable: a version 2.0 header always fits")


def decode_npy_base64(text: str | memoryview) -> npt.NDArray[Any]:
    """The array in a standard base64 (RFC 4648, padded) ``.npy`` string."""
    raw = _decode_base64(text)
    return decode_npy(raw.data if isinstance(raw, np.ndarray) else raw)


def _decode_base64(text: str | memoryview) -> npt.NDArray[np.uint8] | bytes:
    # Piece by piece into one NumPy buffer: each piece's bytes object is small and reused by the
    # allocator, and NumPy's large buffer takes huge pages, where one large bytes object would
    # take a page fault every 4 KiB (as long as the decoding itself, on this kind of machine).
    try:
        if isinstance(text, str) or len(text) <= _BASE64_PIECE:
            decoded: bytes = b64decode(text, validate=True)
            return decoded
        out = np.empty(len(text) // 4 * 3, dtype=np.uint8)
        filled = 0
        for start in range(0, len(text), _BASE64_PIECE):
            piece = text[start : start + _BASE64_PIECE]
            if start + _BASE64_PIECE < len(text) and piece[-1] == ord("="):
                raise ValueError("padding before the end")
            decoded = b64decode(piece, validate=True)
            out[filled : filled + len(decoded)] = np.frombuffer(decoded, dtype=np.uint8)
            filled += len(decoded)
    except (ValueError, TypeError):
        raise undecodable(
            "not valid base64: expected the standard alphabet (A-Z a-z 0-9 + /) with '=' padding"
        ) from None
    return out[:filled]


class Base64Stream:
    """The standard base64 of a buffer, encoded piece by piece as it is sent.

    Never the whole encoding at once: its pieces (512 KiB each) are made as the response goes
    out, so they cost neither the memory of the full text nor a page fault every 4 KiB of it.
    """

    def __init__(self, buffer: npt.NDArray[np.uint8]) -> None:
        self.data = buffer.data

    def __len__(self) -> int:
        return 4 * math.ceil(len(self.data) / 3)

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), _RAW_PIECE):
            encoded: bytes = b64encode(self.data[start : start + _RAW_PIECE])
            yield encoded


def npy_base64_pieces(array: npt.NDArray[Any]) -> list[bytes]:
    """The standard base64 of the ``.npy`` bytes of ``array``, as pieces to be sent one after
    the other: the header with the data's first bytes up to a multiple of three, then the rest
    of the data encoded from the array's own memory (``npy_pieces``: no copy of the data when
    it is laid out as the file's). Base64 of a whole number of 3-byte groups ends without
    padding, so the pieces' concatenation is the base64 of the whole file."""
    header, data = npy_pieces(array)
    lead = -len(header) % 3
    return [b64encode(header + data[:lead]), b64encode(data[lead:])]


def encode_npy_base64(array: npt.NDArray[Any]) -> str:
    """The standard base64 of the ``.npy`` bytes of ``array``."""
    encoded: bytes = b64encode(encode_npy(array).data)
    return encoded.decode("ascii")
