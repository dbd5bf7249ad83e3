"""A grammar-based fuzzer over HTTP headers and query strings: Content-Type, Content-Encoding
(with bodies that are, or are not, so encoded), Content-Length (lying, non-ASCII digits, huge,
negative, said twice), Accept, X-Request-ID, and query parameters, on every op route and
transport, around bodies that are otherwise valid.

Every answer is a 4xx in its route's error shape or a 200, never a 5xx, never a traceback in the
log.
"""

import gzip
import zlib
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.driver import RawHeaders, Service, check, fuzz_settings
from tests.fuzz.grammar import (
    ODD_DIGITS,
    b64,
    json_text,
    npy_bytes,
    npz_bytes,
    number_header_value,
    odd_text_values,
)

_V2_HEAD = json_text(
    {
        "inputs": [
            {"name": "data", "shape": [2, 2], "datatype": "FP32", "parameters": {
                "binary_data_size": 16}},
            {"name": "indices", "shape": [1], "datatype": "INT64", "data": [1]},
            {"name": "axis", "shape": [], "datatype": "INT64", "data": [0]},
        ]
    }
)  # fmt: skip
#: One valid request per route and transport: (path, media type, body, extra headers).
_REQUESTS: list[tuple[str, bytes, bytes, RawHeaders]] = [
    ("/roll", b"application/json", json_text({"data": [1, 2, 3], "shift": 1, "axes": 0}), []),
    (
        "/gather",
        b"application/json",
        json_text({"data": b64(npy_bytes(np.eye(2))), "indices": [1], "axis": 0}),
        [],
    ),
    (
        "/roll",
        b"application/x-npz",
        npz_bytes({"data": npy_bytes([1, 2]), "shift": npy_bytes(1), "axes": npy_bytes(0)}),
        [],
    ),
    (
        "/v2/models/roll/infer",
        b"application/json",
        json_text(
            {
                "inputs": [
                    {"name": "data", "shape": [2], "datatype": "INT8", "data": [1, 2]},
                    {"name": "shift", "shape": [], "datatype": "INT64", "data": [1]},
                    {"name": "axes", "shape": [], "datatype": "INT64", "data": [0]},
                ]
            }
        ),
        [],
    ),
    (
        "/v2/models/gather/infer",
        b"application/octet-stream",
        _V2_HEAD + np.arange(4, dtype="<f4").tobytes(),
        [(b"inference-header-content-length", str(len(_V2_HEAD)).encode())],
    ),
]

_MEDIA = [
    b"application/json",
    b"application/JSON",
    b"application/json; charset=utf-8",
    b" application/json ;",
    b"application/x-npz",
    b"application/x-npy",
    b"application/octet-stream",
    b"application/json, text/plain",
    b"text/plain",
    b"multipart/form-data; boundary=x",
    b"application/x-www-form-urlencoded",
    b"*/*",
    b"application/json\xff",
    b"\xc3\xa9/json",
]
_ENCODINGS = [b"identity", b"gzip", b"deflate", b"x-gzip", b"GZIP", b" gzip ", b"gzip, gzip", b"br"]
_QUERY_VALUES = [
    b"0",
    b"1",
    b"-1",
    b"",
    b"+1",
    b"1.0",
    b"9" * 19,
    b"9" * 30,
    b"9" * 5000,
    b"-" + b"9" * 19,
    b"%D9%A1",
    b"%C2%B2",
    b"%00",
    b"%FF",
    b"true",
    b"bfloat16",
    b"float32",
    b"x" * 300,
]


def _encoded(body: bytes, encoding: bytes, honest: bool) -> bytes:
    name = encoding.strip().lower()
    if not honest:
        return body
    if name in (b"gzip", b"x-gzip"):
        return gzip.compress(body)
    if name == b"gzip, gzip":
        return gzip.compress(gzip.compress(body))
    if name == b"deflate":
        return zlib.compress(body)
    return body


_OTHER_NAMES = [
    b"authorization",
    b"transfer-encoding",
    b"expect",
    b"connection",
    b"content-type",
    b"content-encoding",
    b"x-\xff",
    b"",
]
_QUERY_NAMES = [b"batch_dims", b"dtype", b"axis", b"shift", b"", b"batch_dims[]"]


def _mostly(draw: st.DrawFn, usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> Any:
    """``usual`` three times in four, else ``odd``: a header is odd only now and then, so that
    what follows it (the body, the other headers) is still reached."""
    return draw(odd if draw(st.integers(0, 3)) == 0 else usual)


# Built once: a strategy built inside a composite is built again for every example.
_ODD = odd_text_values()
_ODD_MEDIA = st.one_of(st.none(), st.sampled_from(_MEDIA), _ODD)
_USUAL_ENCODING = st.sampled_from([None, None, None, b"gzip", b"deflate", b"identity"])
_ODD_ENCODING = st.one_of(st.sampled_from(_ENCODINGS), _ODD)
_USUAL_ACCEPT = st.sampled_from(
    [None, b"application/x-npy", b"application/json", b"*/*", b"APPLICATION/X-NPY"]
)
_USUAL_ID = st.sampled_from([None, b"abc-123"])
_OTHERS = st.lists(st.tuples(st.sampled_from(_OTHER_NAMES), _ODD), min_size=1, max_size=2)
_QUERY = st.lists(
    st.tuples(st.sampled_from(_QUERY_NAMES), st.sampled_from(_QUERY_VALUES)),
    min_size=1,
    max_size=2,
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, RawHeaders, bytes, bytes]:
    """A valid request with its headers and query bent: path, headers, body, query string."""
    path, honest_media, body, extra = draw(st.sampled_from(_REQUESTS))
    headers: RawHeaders = list(extra)
    media = _mostly(draw, st.just(honest_media), _ODD_MEDIA)
    if media is not None:
        headers.append((b"content-type", media))
    encoding = _mostly(draw, _USUAL_ENCODING, _ODD_ENCODING)
    if encoding is not None:
        headers.append((b"content-encoding", encoding))
        body = _encoded(body, encoding, honest=draw(st.integers(0, 3)) > 0)
    cut = draw(st.sampled_from([0, 0, 0, 0, 1, 9]))
    if cut:
        body = body[:-cut]
    if draw(st.integers(0, 3)) > 0:
        headers.append((b"content-length", number_header_value(draw, len(body))))
        if draw(st.integers(0, 9)) == 0:
            headers.append((b"content-length", str(len(body) + 1).encode()))
    accept = _mostly(draw, _USUAL_ACCEPT, _ODD)
    if accept is not None:
        headers.append((b"accept", accept))
    request_id = _mostly(draw, _USUAL_ID, _ODD)
    if request_id is not None:
        headers.append((b"x-request-id", request_id))
    if draw(st.integers(0, 4)) == 0:
        headers.extend(draw(_OTHERS))
    query = b""
    if draw(st.integers(0, 2)) == 0:
        query = b"&".join(name + b"=" + value for name, value in draw(_QUERY))
    return path, headers, body, query


@fuzz_settings(400)
@given(request=requests(), app=st.sampled_from(["default", "widest"]))
def test_http_headers(
    fuzz: Service, request: tuple[str, RawHeaders, bytes, bytes], app: str
) -> None:
    path, headers, body, query = request
    answer = fuzz.call(app, "POST", path, headers, body, query=query)
    check(fuzz, answer, v2=path.startswith("/v2"), case="http: headers and queries")


@fuzz_settings(100)
@given(
    path=st.sampled_from(
        [
            "/roll",
            "/gather",
            "/v2/models/roll/infer",
            "/v2/models/gather/infer",
            "/v2/models/roll",
            "/v2/models/gather/versions/1/ready",
            "/v2/models/\u00e9/infer",
            "/v2/models/" + "x" * 300 + "/infer",
            "/v2/models/roll/versions/" + "9" * 5000 + "/infer",
            "/v2/" + "\u0661" * 3,
            "/roll/",
            "/v2",
        ]
    ),
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    content_length=st.one_of(st.none(), st.sampled_from(ODD_DIGITS)),
)
def test_paths_and_methods(
    fuzz: Service, path: str, method: str, content_length: str | None
) -> None:
    headers: RawHeaders = [(b"content-type", b"application/json")]
    if content_length is not None:
        headers.append((b"content-length", content_length.encode("utf-8")))
    answer = fuzz.call("default", method, path, headers, b"{}")
    check(fuzz, answer, v2=path.startswith("/v2"), case="http: paths and methods")
