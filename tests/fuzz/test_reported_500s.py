"""The inputs issue 11 reported answered 500 with a traceback, each as its own test, and more
of the same classes that the fuzzers and the review of the fix found.

Each case must get its 4xx, in its route's error shape, with nothing logged at ERROR.
"""

import struct
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.settings import Settings
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import MAX_NBYTES, decode_npy, numpy_can_hold
from tests.fuzz.driver import Answer, Service, check
from tests.fuzz.grammar import b64, json_text, npy_bytes, npz_bytes

JSON = [(b"content-type", b"application/json")]
NPZ = [(b"content-type", b"application/x-npz")]
HEADER_LENGTH = b"inference-header-content-length"


def npy_header(descr: str, shape: str, payload: bytes = b"", fortran: str = "False") -> bytes:
    """An ``.npy`` file with the header literal given piece by piece, padded as NumPy pads."""
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}".encode()
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload


def tensor(name: str, shape: list[int], datatype: str, data: list[Any]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def v2_call(
    fuzz: Service, app: str, model: str, inputs: list[dict[str, Any]], binary: bool = False
) -> Answer:
    """An infer request; with ``binary``, every empty input sent as 0 bytes of binary data."""
    if binary:
        for item in inputs:
            if item.get("data") == []:
                del item["data"]
                item["parameters"] = {"binary_data_size": 0}
    head = json_text({"inputs": inputs})
    headers = list(JSON)
    if binary:
        headers.append((HEADER_LENGTH, str(len(head)).encode()))
    return fuzz.call(app, "POST", f"/v2/models/{model}/infer", headers, head)


def refused(fuzz: Service, answer: Answer, status: int, v2: bool, *words: str) -> str:
    """Check ``answer`` is ``status`` in its route's shape, its message holding ``words``."""
    check(fuzz, answer, v2=v2, case="reported 500s and their classes")
    assert answer.status == status, answer.body[:500]
    payload = answer.json()
    message: str = payload["error"] if v2 else payload["detail"][0]["msg"]
    for word in words:
        assert word in message, message
    return message


APPS = pytest.mark.parametrize("app", ["default", "widest"])
BINARY = pytest.mark.parametrize("binary", [False, True], ids=["json-data", "binary-data"])


# -- 1. a /v2 shape whose nonzero dimensions overflow, beside a 0 -------------------------------


@APPS
@BINARY
@pytest.mark.parametrize(
    ("shape", "status"),
    [
        # 2**93 is no 64-bit integer: the envelope refuses it (JSON gives it to pydantic as a
        # float), 422, before any shape is judged.
        ([0, 2**93], 422),
        # The same class within 64 bits: nonzero dimensions spanning past 2**63 - 1 bytes.
        ([0, 2**63 - 1], 413),
        ([0, 2**61, 2**61], 413),
        ([2**64 - 1, 0], 413),
    ],
)
def test_v2_shape_0_by_2_to_the_93_is_refused(
    fuzz: Service, app: str, binary: bool, shape: list[int], status: int
) -> None:
    inputs = [
        tensor("data", shape, "FP32", []),
        tensor("shift", [], "INT64", [1]),
        tensor("axes", [], "INT64", [0]),
    ]
    message = refused(fuzz, v2_call(fuzz, app, "roll", inputs, binary), status, True)
    assert message.startswith(("data:", "inputs.0.shape")), message


@BINARY
def test_v2_empty_shape_past_numpy_is_refused_under_the_widest_limits(
    fuzz: Service, binary: bool
) -> None:
    # Every dimension within TENSOR_OPS_MAX_DIMENSION (2**63 - 1): only NumPy's limit is left.
    inputs = [
        tensor("data", [0, 2**62, 2**62], "INT8", []),
        tensor("indices", [1], "INT64", [0]),
        tensor("axis", [], "INT64", [0]),
    ]
    refused(fuzz, v2_call(fuzz, "widest", "gather", inputs, binary), 413, True, "NumPy")


@APPS
def test_v2_rank_past_numpy_is_refused(fuzz: Service, app: str) -> None:
    inputs = [
        tensor("data", [0] * 65, "FP32", []),
        tensor("shift", [], "INT64", [1]),
        tensor("axes", [], "INT64", [0]),
    ]
    refused(fuzz, v2_call(fuzz, app, "roll", inputs), 413, True, "rank 65")


# -- 2. .npy headers whose Gather output overflows -----------------------------------------------

# Each legal alone (no data, nonzero dimensions spanning 2**60 and 2**62 bytes); the output,
# (2**30, 2**30, 0, 2**31, 2**31), spans 2**122.
_EMPTY_DATA = npy_header("'|i1'", "(1073741824, 1073741824, 0)")
_EMPTY_INDICES = npy_header("'|i1'", "(0, 2147483648, 2147483648)")


@APPS
@pytest.mark.parametrize("accept", [b"application/json", b"application/x-npy"])
def test_npy_headers_whose_gather_output_overflows_in_json(
    fuzz: Service, app: str, accept: bytes
) -> None:
    body = json_text({"data": b64(_EMPTY_DATA), "indices": b64(_EMPTY_INDICES), "axis": 2})
    answer = fuzz.call(app, "POST", "/gather", [*JSON, (b"accept", accept)], body)
    refused(fuzz, answer, 413, False, "the output", "NumPy")


@APPS
def test_npy_headers_whose_gather_output_overflows_in_npz(fuzz: Service, app: str) -> None:
    body = npz_bytes({"data": _EMPTY_DATA, "indices": _EMPTY_INDICES, "axis": npy_bytes(2)})
    refused(fuzz, fuzz.call(app, "POST", "/gather", NPZ, body), 413, False, "the output")


@APPS
@BINARY
def test_v2_shapes_whose_gather_output_overflows(fuzz: Service, app: str, binary: bool) -> None:
    inputs = [
        tensor("data", [2**30, 2**30, 0], "INT8", []),
        tensor("indices", [0, 2**31, 2**31], "INT8", []),
        tensor("axis", [], "INT64", [2]),
    ]
    refused(fuzz, v2_call(fuzz, app, "gather", inputs, binary), 413, True, "the output")


@APPS
@pytest.mark.parametrize("binary_output", [False, True], ids=["json-answer", "binary-answer"])
def test_bfloat16_output_past_numpy_once_widened_for_json(
    fuzz: Service, app: str, binary_output: bool
) -> None:
    # Found by the fuzzer: 2-byte elements whose nonzero dimensions span 2**62 bytes are legal,
    # but a JSON answer carries bfloat16 as float32, twice as wide (json_ready, json_can_carry).
    inputs = [
        tensor("data", [0, 2**31 - 1, 2**30 + 1], "BF16", []),
        tensor("shift", [], "INT64", [0]),
        tensor("axes", [], "INT64", [0]),
    ]
    request: dict[str, Any] = {"inputs": inputs}
    if binary_output:
        request["outputs"] = [{"name": "output", "parameters": {"binary_data": True}}]
    answer = fuzz.call(app, "POST", "/v2/models/roll/infer", JSON, json_text(request))
    refused(fuzz, answer, 413, True, "the output", "the widest an answer may carry it in")


def test_npy_header_with_a_zero_beside_an_overflow_is_refused() -> None:
    # (0, 2**62) of int16: no element, and still no array NumPy can make ("array is too big").
    with pytest.raises(TensorError, match="overflows"):
        decode_npy(npy_header("'<i2'", "(0, 4611686018427387904)"))
    assert not numpy_can_hold((0, 2**62), 2)
    assert numpy_can_hold((0, 2**62), 1)
    assert not numpy_can_hold((0, 2**93), 1)
    assert not numpy_can_hold((1,) * 65, 1)
    assert numpy_can_hold((0, MAX_NBYTES), 1)


@pytest.mark.parametrize(
    ("descr", "shape", "fortran"),
    [
        ("0x" + "f" * 4000, "()", "False"),
        ("'<f4'", "(0x" + "f" * 4000 + ",)", "False"),
        ("'<f4'", "(0, 0x" + "f" * 4000 + ")", "False"),
        ("'<f4'", "(-0x" + "f" * 4000 + ",)", "False"),
        ("'<f4'", "(0x" + "f" * 4000 + ", 'a')", "False"),
        ("'<f4'", "()", "0x" + "f" * 4000),
        ("'M8[10000000000000000000000s]'", "()", "False"),
    ],
    ids=["descr", "dimension", "dimension-beside-0", "negative", "non-int", "fortran", "datetime"],
)
def test_npy_header_values_too_long_to_print_are_refused(
    fuzz: Service, descr: str, shape: str, fortran: str
) -> None:
    # Python will not write an integer of more than 4300 digits as text: a message quoting one
    # raised ValueError, a 500.
    raw = npy_header(descr, shape, fortran=fortran)
    with pytest.raises(TensorError) as caught:
        decode_npy(raw)
    assert len(caught.value.message) < 300
    body = json_text({"data": b64(raw), "shift": 1, "axes": 0})
    answer = fuzz.call("default", "POST", "/roll", JSON, body)
    check(fuzz, answer, v2=False, case="reported 500s and their classes")
    assert answer.status in (400, 422)


# -- 3. non-ASCII digits in numeric headers ------------------------------------------------------

#: '١٢' (Arabic-Indic twelve) as UTF-8 bytes, and '²' as the Latin-1 byte ASGI servers decode:
#: str.isdigit() is True for both; int('²') raises.
ODD_DIGITS = [
    pytest.param("\u0661\u0662".encode(), id="arabic-indic-utf8"),
    pytest.param(b"\xb2", id="superscript-two-latin1"),
    pytest.param(b"1\xb2", id="one-superscript-two"),
    pytest.param("\uff11\uff12".encode(), id="fullwidth-utf8"),
]


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_non_ascii_digits_in_inference_header_content_length(fuzz: Service, digits: bytes) -> None:
    headers = [*JSON, (HEADER_LENGTH, digits)]
    answer = fuzz.call("default", "POST", "/v2/models/roll/infer", headers, b'{"inputs": []}')
    refused(fuzz, answer, 400, True, "Inference-Header-Content-Length")


@pytest.mark.parametrize("digits", ODD_DIGITS)
@pytest.mark.parametrize("path", ["/roll", "/v2/models/roll/infer"])
def test_non_ascii_digits_in_content_length(fuzz: Service, digits: bytes, path: str) -> None:
    headers = [*JSON, (b"content-length", digits)]
    body = json_text({"data": [1, 2], "shift": 1, "axes": 0})
    refused(fuzz, fuzz.call("default", "POST", path, headers, body), 400, path.startswith("/v2"))


@pytest.mark.parametrize("name", [b"content-length", HEADER_LENGTH])
def test_digit_strings_too_long_for_int_in_numeric_headers(fuzz: Service, name: bytes) -> None:
    headers = [*JSON, (name, b"9" * 5000)]
    answer = fuzz.call("default", "POST", "/v2/models/roll/infer", headers, b'{"inputs": []}')
    check(fuzz, answer, v2=True, case="reported 500s and their classes")


# -- 5. an output rank above NumPy's limit under TENSOR_OPS_MAX_RANK=64 --------------------------

_RANK_64 = np.zeros((1,) * 64, dtype=np.float32)


@pytest.mark.parametrize("form", ["npy", "npz", "v2-json", "v2-binary"])
def test_gather_output_rank_65_under_max_rank_64(fuzz: Service, form: str) -> None:
    # data of rank 64, indices of rank 2, axis 0: the output has 64 - 1 + 2 = 65 dimensions.
    indices = np.zeros((1, 1), dtype=np.int64)
    if form == "npy":
        body = json_text({"data": b64(npy_bytes(_RANK_64)), "indices": [[0]], "axis": 0})
        answer = fuzz.call("widest", "POST", "/gather", JSON, body)
    elif form == "npz":
        members = {"data": npy_bytes(_RANK_64), "indices": npy_bytes(indices), "axis": npy_bytes(0)}
        answer = fuzz.call("widest", "POST", "/gather", NPZ, npz_bytes(members))
    else:
        inputs = [
            tensor("data", [1] * 64, "FP32", [0.0]),
            tensor("indices", [1, 1], "INT64", [0]),
            tensor("axis", [], "INT64", [0]),
        ]
        if form == "v2-binary":
            inputs[0] = {
                "name": "data",
                "shape": [1] * 64,
                "datatype": "FP32",
                "parameters": {"binary_data_size": 4},
            }
            head = json_text({"inputs": inputs})
            headers = [*JSON, (HEADER_LENGTH, str(len(head)).encode())]
            answer = fuzz.call(
                "widest", "POST", "/v2/models/gather/infer", headers, head + bytes(4)
            )
        else:
            answer = v2_call(fuzz, "widest", "gather", inputs)
    refused(fuzz, answer, 413, form.startswith("v2"), "the output would have rank 65")


def test_gather_output_rank_above_the_setting(fuzz: Service) -> None:
    # Under the default TENSOR_OPS_MAX_RANK (32): data of rank 32 and indices of rank 2.
    data = np.zeros((1,) * 32, dtype=np.int8)
    body = json_text({"data": b64(npy_bytes(data)), "indices": [[0]], "axis": 0})
    answer = fuzz.call("default", "POST", "/gather", JSON, body)
    refused(fuzz, answer, 413, False, "rank 33", "TENSOR_OPS_MAX_RANK")


# -- settings NumPy cannot honour are refused at start-up ----------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_bytes", 2**70),
        ("max_body_bytes", 2**63),
        ("max_dimension", 2**63),
        ("memory_budget_bytes", 2**64),
        ("offload_bytes", 10**30),
    ],
)
def test_settings_past_numpy_are_refused(field: str, value: int) -> None:
    make: Any = Settings  # a field named at run time
    with pytest.raises(ValidationError) as caught:
        make(**{field: value})
    message = str(caught.value)
    assert f"TENSOR_OPS_{field.upper()}" in message
    assert "2**63 - 1" in message
    make(**{field: MAX_NBYTES})  # the largest accepted


def test_settings_from_the_environment_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSOR_OPS_MAX_OUTPUT_BYTES", "1180591620717411303424")
    with pytest.raises(ValidationError, match="TENSOR_OPS_MAX_OUTPUT_BYTES"):
        Settings()


def test_max_rank_above_numpy_is_refused() -> None:
    with pytest.raises(ValidationError, match="max_rank"):
        Settings(max_rank=65)


def test_infinite_graceful_timeout_is_refused() -> None:
    with pytest.raises(ValidationError, match="graceful_timeout"):
        Settings(graceful_timeout=float("inf"))
