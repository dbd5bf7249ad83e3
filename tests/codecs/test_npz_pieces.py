"""The ``.npz`` writer (``tensor_ops_wire.npz.npz_pieces``) and the base64 pieces of an
``.npy``: what NumPy, zipfile and the service's own reader read, the arrays' data sent from
their own memory, zip64 past its limit."""

import base64
import io
import zipfile
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from tensor_ops_wire import crc
from tensor_ops_wire import npz as npz_module
from tensor_ops_wire.cases import case_pieces, decode_case, encode_case
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import encode_npy, npy_base64_pieces
from tensor_ops_wire.npz import decode_npz, encode_npz, npz_pieces
from tests.support import assert_same_bits

ARRAYS: dict[str, npt.NDArray[Any]] = {
    "data": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "big_endian": np.arange(5, dtype=">i4"),
    "strided": np.arange(40, dtype=np.float64).reshape(5, 8)[:, ::3],
    "bf16": np.array([1.5, -0.0, np.nan], dtype=ml_dtypes.bfloat16),
    "empty": np.zeros((0, 3), np.int8),
    "scalar": np.array(7, np.int64),
    "naïve": np.array([True, False]),
}


def _expected(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """What an ``.npy`` reader gives back: little-endian, bfloat16 as its 2-byte bits."""
    if array.dtype == ml_dtypes.bfloat16:
        return array.view(np.uint16)
    return array.astype(array.dtype.newbyteorder("<"))


def _read_back(body: bytes) -> None:
    archive = zipfile.ZipFile(io.BytesIO(body))
    assert archive.testzip() is None  # every member's CRC right
    assert [info.filename for info in archive.infolist()] == [f"{name}.npy" for name in ARRAYS]
    loaded = np.load(io.BytesIO(body), allow_pickle=False)
    ours = decode_npz(body, tuple(ARRAYS), max_bytes=1 << 20)
    for name, array in ARRAYS.items():
        assert_same_bits(loaded[name], _expected(array))
        assert_same_bits(ours[name], _expected(array))


def test_what_numpy_zipfile_and_the_service_read() -> None:
    _read_back(encode_npz(ARRAYS))


def test_the_same_arrays_make_the_same_bytes() -> None:
    assert encode_npz(ARRAYS) == encode_npz(ARRAYS)
    assert bytes(npz_pieces(ARRAYS)) == encode_npz(ARRAYS)


def test_a_contiguous_array_is_sent_from_its_own_memory() -> None:
    data = ARRAYS["data"]
    pieces = npz_pieces({"data": data, "strided": ARRAYS["strided"]})
    views = [np.frombuffer(piece, np.uint8) for piece in pieces.buffers if len(piece)]
    assert any(np.shares_memory(view, data) for view in views)
    # A strided array cannot be: its data is one copy, in C order.
    assert not any(np.shares_memory(view, ARRAYS["strided"]) for view in views)
    assert len(pieces) == sum(len(piece) for piece in pieces.buffers) == len(bytes(pieces))


def test_zip64_fields_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sizes and offsets past the limit go in zip64's extra fields and end records, which
    NumPy, zipfile and the service read (the limit lowered: the same code as at 2 GiB)."""
    monkeypatch.setattr(npz_module, "ZIP64_LIMIT", 100)
    body = encode_npz(ARRAYS)
    assert b"PK\x06\x06" in body and b"PK\x06\x07" in body  # zip64 end record and locator
    infos = zipfile.ZipFile(io.BytesIO(body)).infolist()
    assert [info.header_offset for info in infos][1:] == sorted(
        info.header_offset for info in infos[1:]
    )
    assert all(info.file_size == info.compress_size for info in infos)
    _read_back(body)


def test_a_case_file_in_pieces_is_the_case_file() -> None:
    inputs = {"data": ARRAYS["data"], "shift": np.array(1), "axes": np.array(0)}
    outputs = {"output": np.roll(ARRAYS["data"], 1, 0)}
    pieces = case_pieces("roll", inputs, outputs, {"a": 1}, {"ulp": 1}, version="7")
    body = encode_case("roll", inputs, outputs, {"a": 1}, {"ulp": 1}, version="7")
    assert bytes(pieces) == body
    case = decode_case(body, max_bytes=1 << 20)
    assert (case.op, case.version, case.attributes, case.tolerance) == (
        "roll",
        "7",
        {"a": 1},
        {"ulp": 1},
    )
    assert_same_bits(case.outputs["output"], outputs["output"])


@pytest.mark.parametrize("name", list(ARRAYS))
def test_base64_pieces_join_to_the_file_s_base64(name: str) -> None:
    array = ARRAYS[name]
    whole = base64.b64encode(encode_npy(array).data)
    pieces = npy_base64_pieces(array)
    assert b"".join(pieces) == whole
    filled = [piece for piece in pieces if piece]
    assert all(b"=" not in piece for piece in filled[:-1])  # padding only at the end


def test_the_checksum_is_zip_s_crc_32_whichever_code_computes_it() -> None:
    # The service has ISA-L's code (its dependency isal); a client without its fast extra,
    # zlib's. Both give zip's CRC-32, chained from any value, on any buffer.
    assert crc.crc32 is not zlib.crc32
    rng = np.random.default_rng(5)
    block = memoryview(rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    buffers: list[bytes | memoryview] = [b"", b"\x00", b"123456789", block[3:], block[: 1 << 19]]
    for buffer in buffers:
        for start in (0, 1, 0xCBF43926, 0xFFFFFFFF):
            assert crc.crc32(buffer, start) == zlib.crc32(buffer, start)
    # zip's check value of the standard test string.
    assert crc.crc32(b"123456789", 0) == 0xCBF43926


@pytest.mark.parametrize("code", ["isal", "zlib"])
def test_either_checksum_writes_the_same_archive_and_finds_a_changed_byte(
    code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if code == "zlib":
        monkeypatch.setattr(npz_module, "crc32", zlib.crc32)
    body = bytearray(bytes(npz_pieces(ARRAYS)))
    assert bytes(body) == encode_npz(ARRAYS)
    _read_back(bytes(body))
    # One bit of the first member's data changed: refused by its CRC, naming the member.
    data = ARRAYS["data"].tobytes()
    at = bytes(body).index(data) + 5
    body[at] ^= 0x01
    with pytest.raises(TensorError) as refused:
        decode_npz(bytes(body), tuple(ARRAYS), max_bytes=1 << 20)
    assert "fails its CRC check" in str(refused.value)
    assert "data.npy" in str(refused.value)
