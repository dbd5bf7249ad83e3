"""A grammar-based fuzzer over ``.npy`` files: magic, version, header length, the header's dict
(``descr``, ``fortran_order``, ``shape``), padding and payload, each bent in turn.

The files go through the wire decoder itself, as base64 in a JSON body (any input of Roll or
Gather, several at once, so that their shapes meet in the output), and as ``.npz`` members. The
decoder must give an array or a ``TensorError``; the service a 4xx or a 200, never a 5xx and
never a traceback in its log.
"""

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st

from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import decode_npy, decode_npy_base64
from tensor_ops_wire.npz import decode_npz
from tests.fuzz.driver import CASES, Service, check, fuzz_settings
from tests.fuzz.grammar import b64, json_text, npy_bytes, npy_files, npz_bytes

#: Valid inputs, for the inputs a case leaves alone.
_VALID: dict[str, dict[str, Any]] = {
    "roll": {"data": np.arange(6, dtype=np.float32).reshape(2, 3), "shift": 1, "axes": 0},
    "gather": {"data": np.arange(6, dtype=np.int8).reshape(2, 3), "indices": [1, 0], "axis": 1},
}
_JSON = [(b"content-type", b"application/json")]
_NPZ = [(b"content-type", b"application/x-npz")]


@fuzz_settings(400)
@given(raw=npy_files())
def test_decoder_gives_an_array_or_a_tensor_error(raw: bytes) -> None:
    decoders: list[Callable[[], npt.NDArray[Any]]] = [
        lambda: decode_npy(raw),
        lambda: decode_npy_base64(b64(raw)),
        lambda: decode_npz(npz_bytes({"data": raw}), ("data",), max_bytes=1 << 20)["data"],
    ]
    for decode in decoders:
        try:
            array = decode()
        except TensorError as error:
            assert error.message
            assert len(error.message) < 1000, error.message[:200]
        else:
            assert isinstance(array, np.ndarray)
    CASES["npy: wire decoder"] += 1


@st.composite
def _inputs(draw: st.DrawFn, op: str) -> dict[str, Any]:
    """Each input of ``op`` either fuzzed (an .npy file) or valid; at least one fuzzed, and the
    data and the indices both fuzzed now and then (their shapes meet in Gather's output)."""
    names = list(_VALID[op])
    fuzzed = draw(st.sets(st.sampled_from(names), min_size=1))
    if op == "gather" and draw(st.integers(0, 2)) == 0:
        fuzzed |= {"data", "indices"}
    return {
        name: draw(npy_files(index=name != "data")) if name in fuzzed else _VALID[op][name]
        for name in names
    }


@fuzz_settings(300)
@given(
    op=st.sampled_from(sorted(_VALID)),
    data=st.data(),
    app=st.sampled_from(["default", "widest"]),
    extra=st.sampled_from([{}, {"dtype": "bfloat16"}, {"dtype": "float32"}, {"batch_dims": 1}]),
    accept=st.sampled_from([b"application/json", b"application/x-npy"]),
)
def test_npy_in_json_bodies(
    fuzz: Service,
    op: str,
    data: st.DataObject,
    app: str,
    extra: dict[str, Any],
    accept: bytes,
) -> None:
    inputs = data.draw(_inputs(op))
    body: dict[str, Any] = {}
    for name, value in inputs.items():
        if isinstance(value, bytes):
            body[name] = b64(value)
        elif isinstance(value, np.ndarray):
            body[name] = b64(npy_bytes(value))
        else:
            body[name] = value
    if "batch_dims" in extra and op != "gather":
        extra = {}
    body.update(extra)
    answer = fuzz.call(app, "POST", f"/{op}", [*_JSON, (b"accept", accept)], json_text(body))
    check(fuzz, answer, v2=False, case="npy: base64 in JSON bodies")


@fuzz_settings(250)
@given(
    op=st.sampled_from(sorted(_VALID)),
    data=st.data(),
    app=st.sampled_from(["default", "widest"]),
    query=st.sampled_from([b"", b"batch_dims=1", b"dtype=bfloat16", b"batch_dims=-1"]),
)
def test_npy_as_npz_members(
    fuzz: Service, op: str, data: st.DataObject, app: str, query: bytes
) -> None:
    inputs = data.draw(_inputs(op))
    members = {
        name: value if isinstance(value, bytes) else npy_bytes(value)
        for name, value in inputs.items()
    }
    if op != "gather":
        query = query.replace(b"batch_dims=1", b"").replace(b"batch_dims=-1", b"")
    answer = fuzz.call(app, "POST", f"/{op}", _NPZ, npz_bytes(members), query=query)
    check(fuzz, answer, v2=False, case="npy: .npz members")


# Sizes each tensor can hold alone (in a few of them, for one-byte elements), whose products
# across data and indices pass what NumPy can index.
_EDGE_DIMS = st.lists(
    st.sampled_from([1, 2, 3, 2**10, 2**20, 2**30, 2**31, 2**32, 2**40]), min_size=1, max_size=4
)


@fuzz_settings(250)
@given(
    data_dims=_EDGE_DIMS,
    indices_dims=_EDGE_DIMS,
    zeros=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    descrs=st.tuples(
        st.sampled_from(["|i1", "<f4", "<u2", ">f8"]), st.sampled_from(["|i1", "<i8"])
    ),
    axis=st.integers(-4, 4),
    batch_dims=st.integers(-3, 3),
    npz=st.booleans(),
    app=st.sampled_from(["default", "widest"]),
)
def test_npy_empty_tensors_of_edge_shapes(
    fuzz: Service,
    data_dims: list[int],
    indices_dims: list[int],
    zeros: tuple[int, int],
    descrs: tuple[str, str],
    axis: int,
    batch_dims: int,
    npz: bool,
    app: str,
) -> None:
    """Gather's data and indices as honest .npy files of no data, a 0 beside edge sizes: each
    may be legal alone, and their dimensions meet in the output (data.rank - 1 + indices.rank
    of them, spanning up to the product of both)."""
    data_dims[min(zeros[0], len(data_dims) - 1)] = 0
    indices_dims[min(zeros[1], len(indices_dims) - 1)] = 0
    data = _empty_npy(descrs[0], data_dims)
    indices = _empty_npy(descrs[1], indices_dims)
    if npz:
        members = {"data": data, "indices": indices, "axis": npy_bytes(axis)}
        query = f"batch_dims={batch_dims}".encode()
        answer = fuzz.call(app, "POST", "/gather", _NPZ, npz_bytes(members), query=query)
    else:
        body = {"data": b64(data), "indices": b64(indices), "axis": axis, "batch_dims": batch_dims}
        answer = fuzz.call(app, "POST", "/gather", _JSON, json_text(body))
    check(fuzz, answer, v2=False, case="npy: empty tensors of edge shapes")


def _empty_npy(descr: str, shape: list[int]) -> bytes:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()
