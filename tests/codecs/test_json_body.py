"""The JSON body parser that leaves long base64 strings in the body: same answers, no copies."""

from typing import Any

import numpy as np
import orjson
import pytest

from app.codecs.json_body import LONG_STRING, split_json_body
from app.errors import Fault, ServiceError
from tests.support import npy_b64


def test_long_strings_come_back_as_views_of_the_body() -> None:
    data = npy_b64(np.arange(1 << 15, dtype=np.float32))
    assert len(data) >= LONG_STRING
    body = bytearray(orjson.dumps({"shift": [1, 2], "data": data, "axes": [0, 1], "dtype": "f32"}))
    parsed = split_json_body(body)
    assert len(parsed.views) == 1
    assert len(parsed.text) < 200
    payload = parsed.parse()
    assert isinstance(payload["data"], memoryview)
    assert payload["data"].obj is body
    assert bytes(payload["data"]) == data.encode()
    assert payload["shift"] == [1, 2]
    assert payload["dtype"] == "f32"
    assert parsed.parsing_bytes() < len(body)


def test_same_result_as_a_plain_parse_for_every_shape_of_body() -> None:
    long = "A" * LONG_STRING
    documents: list[dict[str, Any]] = [
        {"a": long, "b": long, "c": 1},
        {"nested": {"x": long}, "list": [long, 1]},
        {"short": "x", "n": [1.5, True, None]},
        {'key with "quote"': 1, "data": long},
    ]
    for document in documents:
        body = orjson.dumps(document)
        payload = split_json_body(body).parse()
        restored = {
            key: bytes(value).decode() if isinstance(value, memoryview) else value
            for key, value in payload.items()
        }
        if "nested" in document:
            restored["nested"] = {"x": bytes(payload["nested"]["x"]).decode()}
            restored["list"] = [bytes(payload["list"][0]).decode(), 1]
        assert restored == document


def test_escaped_quotes_read_as_a_plain_parse_reads_them() -> None:
    text = "A" * LONG_STRING + '\\"' + "B" * 10
    body = b'{"data": "' + text.encode() + b'", "shift": 1}'
    parsed = split_json_body(body)
    assert parsed.escaped == (True,)  # cut out, but JSON decodes it: not a view
    payload = parsed.parse()
    assert payload["data"] == orjson.loads(body)["data"]
    assert payload["shift"] == 1


@pytest.mark.parametrize(
    ("body", "kind", "status"),
    [
        (b'{"data": "' + b"A" * LONG_STRING + b'"', Fault.JSON_INVALID, 400),
        (b"[" + b'"' + b"A" * LONG_STRING + b'"]', Fault.INVALID_FIELD, 422),
    ],
)
def test_errors_are_those_of_a_plain_parse(body: bytes, kind: Fault, status: int) -> None:
    with pytest.raises(ServiceError) as caught:
        split_json_body(body).parse()
    assert caught.value.kind is kind
    assert caught.value.status == status
    assert caught.value.problems[0].loc == ("body",)


def test_a_view_of_a_numpy_buffer_is_cut_the_same_way() -> None:
    data = npy_b64(np.arange(1 << 15, dtype=np.float32))
    raw = orjson.dumps({"data": data, "shift": [1, 2], "axes": [0, 1], "note": "a,b"})
    buffer = np.frombuffer(raw, dtype=np.uint8).copy()
    parsed = split_json_body(buffer.data)
    assert len(parsed.views) == 1
    payload = parsed.parse()
    assert bytes(payload["data"]) == data.encode()
    assert payload["note"] == "a,b"
    plain = split_json_body(bytearray(raw))
    assert parsed.parsing_bytes() == plain.parsing_bytes()
    # Without long strings the whole view is what orjson parses, commas counted in steps.
    small = np.frombuffer(orjson.dumps({"data": list(range(1000))}), dtype=np.uint8).copy()
    assert split_json_body(small.data).parse()["data"] == list(range(1000))
    assert split_json_body(small.data).parsing_bytes() >= 64 * 999
