"""The .npy codec: every version and order, no pickle, headers checked against the payload."""

import base64
import gc
import io
import pickle
import struct
import threading

import ml_dtypes
import numpy as np
import pytest

from app.errors import from_wire
from tensor_ops_wire import npy as npy_module
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import (
    Base64Stream,
    decode_npy,
    decode_npy_base64,
    encode_npy,
    encode_npy_base64,
)
from tests.support import assert_same_bits, header_npy, npy_bytes

SAMPLES = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array(2.5),
    np.zeros((0, 3), dtype=np.int8),
    np.array([True, False, True]),
    np.arange(6, dtype=np.uint64).reshape(1, 2, 3) * (2**62),
    np.array([np.nan, -0.0, np.inf], dtype=np.float16),
]


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_reads_every_format_version(version: tuple[int, int], sample: int) -> None:
    array = SAMPLES[sample]
    assert_same_bits(decode_npy(npy_bytes(array, version)), array)


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">f8", "<f4", "|i1"])
def test_reads_either_byte_order(dtype: str) -> None:
    array = np.arange(6, dtype=dtype).reshape(2, 3)
    decoded = decode_npy(npy_bytes(array))
    assert decoded.dtype == np.dtype(dtype)
    assert decoded.tolist() == array.tolist()


def test_reads_fortran_order() -> None:
    array = np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    decoded = decode_npy(npy_bytes(array))
    assert decoded.tolist() == array.tolist()


def test_decoding_does_not_copy_the_payload() -> None:
    raw = npy_bytes(np.arange(1000, dtype=np.float64))
    decoded = decode_npy(raw)
    assert not decoded.flags.owndata
    assert not decoded.flags.writeable


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_writes_what_numpy_reads(sample: int) -> None:
    array = SAMPLES[sample]
    loaded = np.load(io.BytesIO(bytes(encode_npy(array))))
    assert_same_bits(loaded, array)


def test_writes_big_endian_input_as_little_endian() -> None:
    array = np.arange(4, dtype=">f4")
    loaded = np.load(io.BytesIO(bytes(encode_npy(array))))
    assert loaded.dtype == np.dtype("<f4")
    assert loaded.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_writes_bfloat16_as_two_byte_unsigned() -> None:
    array = np.array([1.5, -2.0, np.nan], dtype=ml_dtypes.bfloat16)
    loaded = np.load(io.BytesIO(bytes(encode_npy(array))))
    assert loaded.dtype == np.dtype("<u2")
    assert_same_bits(loaded.view(ml_dtypes.bfloat16), array)


def test_header_is_aligned_to_64_bytes() -> None:
    encoded = encode_npy(np.zeros((3, 5)))
    header_length = struct.unpack("<H", encoded[8:10].tobytes())[0]
    assert (10 + header_length) % 64 == 0


def test_base64_round_trip() -> None:
    array = np.arange(10, dtype=np.int16)
    text = encode_npy_base64(array)
    assert base64.b64decode(text) == bytes(encode_npy(array))
    assert decode_npy_base64(text).tolist() == array.tolist()


def test_pickled_objects_are_never_loaded() -> None:
    raw = npy_bytes(np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(TensorError, match="pickle") as caught:
        decode_npy(raw)
    assert from_wire(caught.value, None).status == 400


def test_a_raw_pickle_is_not_an_npy() -> None:
    with pytest.raises(TensorError, match="magic") as caught:
        decode_npy(pickle.dumps(np.arange(3)))
    assert from_wire(caught.value, None).status == 400


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"", "magic"),
        (b"\x93NUMPY", "magic"),
        (b"\x93NUMPY\x04\x00\x10\x00", "version 4.0"),
        (b"\x93NUMPY\x01\x00\xff\xff{}", "longer than"),
        (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'", "truncated"),
        (header_npy("__import__('os').system('true')", b""), "dict literal"),
        (header_npy("{'descr': '<f4', 'fortran_order': False}", b""), "exactly the keys"),
        (
            header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", b""),
            "keys",
        ),
        (
            header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", b"\0" * 8),
            "16 bytes",
        ),
        (
            header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", b"\0" * 8),
            "4 bytes",
        ),
        (header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", b""), "negative"),
        (
            header_npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1180591620717411303424,)}", b""
            ),
            "overflows",
        ),
        (
            header_npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2305843009213693952)}", b""
            ),
            "overflows",
        ),
        (header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': ('a',)}", b""), "integers"),
        (header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': 3}", b""), "tuple"),
        (header_npy("{'descr': '<f4', 'fortran_order': 1, 'shape': ()}", b"\0" * 4), "True or"),
        (header_npy("{'descr': 'zz', 'fortran_order': False, 'shape': ()}", b""), "unknown"),
        (header_npy("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", b"", 2), "0 bytes"),
        (header_npy("(" * 5000 + ")" * 5000, b""), "dict literal"),
    ],
)
def test_malformed_files_are_refused_with_400(raw: bytes, words: str) -> None:
    with pytest.raises(TensorError, match=words) as caught:
        decode_npy(raw)
    assert from_wire(caught.value, None).status == 400


@pytest.mark.parametrize("descr", ["<c8", "<U3", "|S2", "<M8[s]", "[('a', '<f4')]", "<V4"])
def test_unsupported_element_types_are_refused_with_422(descr: str) -> None:
    literal = descr if descr.startswith("[") else repr(descr)
    raw = header_npy(f"{{'descr': {literal}, 'fortran_order': False, 'shape': ()}}", b"\0" * 16)
    with pytest.raises(TensorError) as caught:
        decode_npy(raw)
    assert from_wire(caught.value, None).status == 422


def test_rank_above_the_limit_is_refused() -> None:
    # The service's own rank limit is checked with every other limit (app/pipeline/jobs.py);
    # the codec refuses what NumPy cannot hold.
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1," * 65 + ")}"
    with pytest.raises(TensorError, match="rank 65") as caught:
        decode_npy(header_npy(header, b"\0" * 4))
    assert from_wire(caught.value, None).status == 422


@pytest.mark.parametrize("text", ["QUJD=", "QUJ", "QU JD", "not base64!", "QUJD\n"])
def test_bad_base64_is_refused(text: str) -> None:
    with pytest.raises(TensorError) as caught:
        decode_npy_base64(text)
    assert from_wire(caught.value, None).status == 400


def test_large_base64_decodes_piece_by_piece_exactly() -> None:
    array = np.random.default_rng(4).standard_normal(300_000)  # 2.4 MB: several pieces
    text = base64.b64encode(npy_bytes(array)).decode()
    assert_same_bits(decode_npy_base64(memoryview(text.encode())), array)


def test_padding_inside_a_long_base64_string_is_refused() -> None:
    # "QQ==" is valid alone; at the end of one 512 KiB piece with more after it, it is not.
    text = b"A" * ((1 << 19) - 4) + b"QQ==" + b"QUJD" * 10
    with pytest.raises(TensorError, match="base64") as caught:
        decode_npy_base64(memoryview(text))
    assert from_wire(caught.value, None).status == 400


def test_base64_stream_equals_one_piece_encoding() -> None:
    raw = np.random.default_rng(5).integers(0, 256, (1 << 20) + 7, dtype=np.uint8)
    stream = Base64Stream(raw)
    pieces = list(stream)
    assert len(pieces) > 1
    assert b"".join(pieces) == base64.b64encode(raw.tobytes())
    assert len(stream) == len(b"".join(pieces))


def _parsed_with_an_interruption(raw: bytes, threshold: int) -> list[object]:
    """What two parses of ``raw`` give (a result or an error each) when a garbage collection
    after ``threshold`` allocations inside the first lets a second thread parse meanwhile."""
    arrived, parsed = threading.Event(), threading.Event()
    results: list[object] = []

    def parse() -> None:
        try:
            results.append(npy_module._parse_header(raw, "latin1"))
        except Exception as error:
            results.append(error)

    def other() -> None:
        arrived.wait(5)
        parse()
        parsed.set()

    class Interrupting:
        """Garbage whose collection lets the other thread parse meanwhile."""

        def __init__(self) -> None:
            self.cycle = self

        def __del__(self) -> None:
            arrived.set()
            parsed.wait(0.02)

    thread = threading.Thread(target=other)
    thread.start()
    gc.collect(0)  # the young generation emptied: the threshold counts from here
    before = gc.get_threshold()
    gc.disable()
    Interrupting()
    gc.set_threshold(
        threshold, 1_000_000, 1_000_000
    )  # young collections only: the others walk the whole heap
    gc.enable()
    try:
        parse()
    finally:
        gc.set_threshold(*before)
        arrived.set()
        thread.join()
    return results


def test_headers_parsed_in_two_threads_at_once_are_both_read() -> None:
    """A header's parse interrupted by another thread's (a garbage collection inside it runs a
    finalizer that lets the other thread run, as the service's and ``verify --jobs``' worker
    threads may) is read whole by both: on CPython 3.11 the second parse broke the first
    (SystemError: AST constructor recursion depth mismatch). The collection is made to fall
    at each point of the parse by a low threshold."""
    raw = b"{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % b", ".join(
        b"%d" % size for size in range(40)
    )
    expected = {"descr": "<f4", "fortran_order": False, "shape": tuple(range(40))}
    for threshold in range(1, 30):
        results = _parsed_with_an_interruption(raw, threshold)
        assert results == [expected, expected], (threshold, results)
