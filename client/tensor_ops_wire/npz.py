"""The NumPy ``.npz`` format (a zip of ``.npy`` members): read with sizes checked first, written."""

import io
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.crc import crc32
from tensor_ops_wire.dtypes import shown
from tensor_ops_wire.errors import TensorError, WireFault, too_large, unacceptable, undecodable
from tensor_ops_wire.npy import decode_npy, npy_pieces

_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"
#: An archive's directory is read only if it holds at most this many members: zipfile makes an
#: object of every one (some 600 bytes each, from 46 bytes on the wire), and no op has more
#: than a few inputs.
MAX_MEMBERS = 64
_ENTRY = struct.Struct("<4s24xHHH12x")  # signature, name, extra and comment lengths
_ENTRY_SIGNATURE = b"PK\x01\x02"


class _ViewFile(io.RawIOBase):
    """A read-only file over a buffer, without the copy ``io.BytesIO`` makes of a bytearray."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: len(self._view)}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        chunk = self._view[self._position : self._position + len(buffer)]
        buffer[: len(chunk)] = chunk
        self._position += len(chunk)
        return len(chunk)


def refuse_many_members(body: bytes | bytearray | memoryview, names: tuple[str, ...]) -> None:
    """Refuse an archive whose directory lists more than ``MAX_MEMBERS`` members, before
    zipfile reads it all: the directory is found as zipfile finds it (its own end-record
    reader, the same offsets) and its entries are walked, counted up to the limit and no
    further. What this cannot walk, zipfile cannot read either: left to it, to refuse."""
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:  # not this Python's zipfile: its own reading is all there is
        return
    try:
        record = end_record(_ViewFile(body))
    except (OSError, ValueError, struct.error):
        return
    if not record:
        return
    # zipfile's end record: size at 5, offset at 6, where the record lies at 9.
    size, location = record[5], record[9]
    start = location - size
    if record[0] == zipfile.stringEndArchive64:  # type: ignore[attr-defined]
        start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator  # type: ignore[attr-defined]
    if start < 0:
        return
    view = memoryview(body).cast("B")
    end = min(start + size, len(view))
    position = start
    count = 0
    while position + _ENTRY.size <= end:
        signature, name, extra, comment = _ENTRY.unpack(view[position : position + _ENTRY.size])
        if signature != _ENTRY_SIGNATURE:
            return
        count += 1
        if count > MAX_MEMBERS:
            raise TensorError(
                f".npz archive holds more than {MAX_MEMBERS} members; expected {', '.join(names)}",
                WireFault.UNEXPECTED,
            )
        position += _ENTRY.size + name + extra + comment


def decode_npz(
    body: bytes | bytearray | memoryview,
    names: tuple[str, ...],
    *,
    max_bytes: int,
    optional: tuple[str, ...] = (),
    variadic: str | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """The arrays of an ``.npz`` archive whose members are exactly ``names`` (``name.npy``),
    with any of ``optional`` and, when ``variadic`` names a stem, any ``<stem>_<n>``.

    Every member's size is read from the archive's directory and checked against ``max_bytes``
    (all members together) before anything is decompressed; a member whose data does not match
    its declared size or checksum is refused. Stored members are decoded without a copy.
    """
    refuse_many_members(body, names)
    try:
        archive = zipfile.ZipFile(_ViewFile(body))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        raise undecodable("not an .npz archive: the body is not a readable zip file") from None
    by_name: dict[str, zipfile.ZipInfo] = {}
    for info in members:
        name = info.filename.removesuffix(".npy")
        if name in by_name:
            raise undecodable(f".npz archive holds member {shown(name)} twice")
        by_name[name] = info
    unexpected = sorted(
        name
        for name in set(by_name) - set(names) - set(optional)
        if not (variadic is not None and _is_numbered(name, variadic))
    )
    if unexpected:
        raise TensorError(
            f".npz member {shown(unexpected[0])} is not an input; expected {', '.join(names)}",
            WireFault.UNEXPECTED,
            field=unexpected[0],  # a location: the server cuts it as it cuts every one
        )
    missing = [name for name in names if name not in by_name]
    if missing:
        raise TensorError(
            f".npz archive has no member {missing[0]!r}", WireFault.MISSING, field=missing[0]
        )
    total = sum(info.file_size for info in members)
    if total > max_bytes:
        raise too_large(
            f".npz members hold {total} bytes uncompressed, above the limit of {max_bytes} bytes "
            "(raise it with TENSOR_OPS_MAX_BODY_BYTES)"
        )
    arrays = {}
    given = [name for name in by_name if name not in names]
    for name in (*names, *given):
        try:
            arrays[name] = decode_npy(_member_bytes(archive, body, by_name[name]))
        except TensorError as error:
            error.field = name
            raise
    return arrays


def _is_numbered(name: str, stem: str) -> bool:
    """Whether ``name`` is ``<stem>_<n>`` (a variadic input's member: ``data_0``)."""
    head, _, number = name.rpartition("_")
    return head == stem and number.isascii() and number.isdigit()


def member_names(
    body: bytes | bytearray | memoryview, expected: tuple[str, ...]
) -> tuple[str, ...]:
    """The names of an ``.npz`` archive's members (``.npy`` cut off), in the archive's order,
    read from its directory (at most ``MAX_MEMBERS``, ``expected`` saying what they may be):
    for archives whose members are not known in advance (a case file's ``input.<name>``)."""
    refuse_many_members(body, expected)
    try:
        members = zipfile.ZipFile(_ViewFile(body)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        raise undecodable("not an .npz archive: the body is not a readable zip file") from None
    return tuple(info.filename.removesuffix(".npy") for info in members)


def member_size(body: bytes | bytearray | memoryview, name: str) -> int:
    """The size the directory declares for member ``name`` (``.npy`` cut off) once inflated,
    the largest if it is listed twice; 0 when it is absent or the body is no zip. The inflating
    never goes past it (``decode_npz``), so a member can be refused on its size unread."""
    try:
        members = zipfile.ZipFile(_ViewFile(body)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        return 0
    sizes = [info.file_size for info in members if info.filename.removesuffix(".npy") == name]
    return max(sizes, default=0)


def inflated_size(body: bytes | bytearray | memoryview, names: tuple[str, ...]) -> int:
    """What the compressed members of an ``.npz`` declare they inflate to (0 if not a zip).

    Stored members are read in place and cost nothing more; the declared sizes bound the rest,
    as ``decode_npz`` never inflates past them. An archive of too many members is refused
    (``refuse_many_members``) before its directory is read.
    """
    refuse_many_members(body, names)
    try:
        members = zipfile.ZipFile(_ViewFile(body)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        return 0
    return sum(info.file_size for info in members if info.compress_type != zipfile.ZIP_STORED)


def _member_bytes(
    archive: zipfile.ZipFile, body: bytes | bytearray | memoryview, info: zipfile.ZipInfo
) -> memoryview:
    if info.flag_bits & 0x1:
        raise unacceptable(f".npz member {shown(info.filename)} is encrypted")
    if info.compress_type == zipfile.ZIP_STORED:
        # Stored data lies in the body as is, after the member's local header: slice it.
        start = info.header_offset
        header = body[start : start + _LOCAL_HEADER.size]
        if len(header) < _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
            raise undecodable(f".npz member {shown(info.filename)} has no valid local header")
        name_length, extra_length = _LOCAL_HEADER.unpack(header)[1:]
        begin = start + _LOCAL_HEADER.size + name_length + extra_length
        data = memoryview(body)[begin : begin + info.file_size]
        if info.compress_size != info.file_size or len(data) != info.file_size:
            raise undecodable(f".npz member {shown(info.filename)} is truncated")
        if crc32(data, 0) != info.CRC:
            raise undecodable(f".npz member {shown(info.filename)} fails its CRC check")
        return data
    if info.compress_type != zipfile.ZIP_DEFLATED:
        raise unacceptable(
            f".npz member {shown(info.filename)} uses a compression other than deflate or none"
        )
    try:
        # zipfile stops at the declared size and checks the CRC: a lying header cannot inflate.
        return memoryview(archive.read(info))
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError):
        raise undecodable(f".npz member {shown(info.filename)} is corrupt") from None


#: A member's size or offset past this is written in zip64's extra fields (zipfile's own limit,
#: within a signed 32-bit reader's reach).
ZIP64_LIMIT = (1 << 31) - 1
_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s4B4H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR64 = struct.Struct("<4sLQL")
#: Every member's time: 1980-01-01 00:00, zip's first day, so that the same arrays make the
#: same bytes.
_DOS_TIME, _DOS_DATE = 0, (1 << 5) | 1
_UTF8_NAME = 0x800
_UNIX = 3
_READ_WRITE = 0o600 << 16


class Pieces:
    """A body as a list of buffers, sent one after the other: an array's data is one of them,
    a view of the array's memory, so an archive of large arrays costs no copy of them."""

    def __init__(self, buffers: list[bytes | memoryview]) -> None:
        self.buffers = buffers
        self.size = sum(len(buffer) for buffer in buffers)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.buffers)


def npz_pieces(arrays: Mapping[str, npt.ArrayLike]) -> Pieces:
    """An uncompressed ``.npz`` archive (as ``np.savez`` writes: a zip of ``<name>.npy``
    members) as pieces: headers, each array's ``.npy`` header and its data. The data is a view
    of the array where it is in the file's layout (``npy_pieces``); the archive is valid only
    while the arrays are unchanged."""
    buffers: list[bytes | memoryview] = []
    directory: list[bytes] = []
    offset = 0
    for name, given in arrays.items():
        head, data = npy_pieces(np.asarray(given))
        size = len(head) + len(data)
        crc = crc32(data, crc32(head, 0))
        filename, flags = _filename(name)
        large = size > ZIP64_LIMIT
        local_extra = struct.pack("<2H2Q", 1, 16, size, size) if large else b""
        needed = 45 if large else 20
        shown_size = 0xFFFFFFFF if large else size
        local = _LOCAL.pack(
            _LOCAL_SIGNATURE, needed, flags, zipfile.ZIP_STORED, _DOS_TIME, _DOS_DATE, crc,
            shown_size, shown_size, len(filename), len(local_extra),
        )  # fmt: skip
        buffers += [local, filename, local_extra, head, data]
        central_extra = []
        if large:
            central_extra += [size, size]
        if offset > ZIP64_LIMIT:
            central_extra.append(offset)
        extra = struct.pack(f"<2H{len(central_extra)}Q", 1, 8 * len(central_extra), *central_extra)
        extra = extra if central_extra else b""
        needed = 45 if central_extra else 20
        entry = _CENTRAL.pack(
            _ENTRY_SIGNATURE, needed, _UNIX, needed, 0, flags, zipfile.ZIP_STORED, _DOS_TIME,
            _DOS_DATE, crc, shown_size, shown_size, len(filename), len(extra), 0, 0, 0,
            _READ_WRITE, min(offset, 0xFFFFFFFF),
        )  # fmt: skip
        directory.append(entry + filename + extra)
        offset += len(local) + len(filename) + len(local_extra) + size
    start = offset
    length = sum(len(entry) for entry in directory)
    buffers += directory
    count = len(directory)
    if count >= 0xFFFF or start > ZIP64_LIMIT or length > ZIP64_LIMIT:
        buffers.append(_END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, length, start))
        buffers.append(_LOCATOR64.pack(b"PK\x06\x07", 0, start + length, 1))
    end = _END.pack(
        b"PK\x05\x06", 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
        min(length, 0xFFFFFFFF), min(start, 0xFFFFFFFF), 0,
    )  # fmt: skip
    buffers.append(end)
    return Pieces(buffers)


def _filename(name: str) -> tuple[bytes, int]:
    member = f"{name}.npy"
    try:
        return member.encode("ascii"), 0
    except UnicodeEncodeError:
        return member.encode("utf-8"), _UTF8_NAME


def encode_npz(arrays: Mapping[str, npt.ArrayLike]) -> bytes:
    """An uncompressed ``.npz`` archive (as ``np.savez`` writes) with one member per array, in
    one piece (``npz_pieces``, joined: one copy of the data)."""
    return bytes(npz_pieces(arrays))
