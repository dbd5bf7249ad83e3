"""``POST /verify/{op}``: the op's request plus a candidate in, a verdict out (JSON and ``.npz``
bodies); the op's own refusals unchanged; the candidate's bytes within the memory budget."""

import hashlib
import io
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.cases import META_LIMIT, decode_case, encode_case
from tensor_ops_wire.errors import TensorError, WireFault
from tensor_ops_wire.npy import encode_npy, encode_npy_base64

pytestmark = pytest.mark.anyio

NPZ = {"content-type": "application/x-npz"}


def _output(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    (output,) = answer.json()["outputs"]
    result: dict[str, Any] = output
    return result


async def test_a_right_candidate_is_equal_in_json_form(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/verify/roll",
        json={
            "data": [[1, 2, 3], [4, 5, 6]],
            "shift": 1,
            "axes": 1,
            "outputs": {"output": [[3, 1, 2], [6, 4, 5]]},
        },
    )
    assert answer.json()["equal"] is True
    assert answer.json()["rule"] == {"bit_equal": True}
    assert _output(answer)["compared"] == 6


async def test_a_nan_payload_and_a_negative_zero_are_told_and_can_be_forgiven(
    client: httpx.AsyncClient,
) -> None:
    data = np.array([np.nan, 0.0, 1.5], dtype=np.float32)
    candidate = np.roll(data, 1)
    candidate.view(np.uint32)[1] |= 1  # the NaN's payload
    candidate[2] = -0.0
    body = {
        "data": encode_npy_base64(data),
        "shift": 1,
        "axes": 0,
        "outputs": {"output": encode_npy_base64(candidate)},
    }
    output = _output(await client.post("/verify/roll", json=body))
    assert (output["mismatches"], output["nan_payload_only"], output["signed_zero_only"]) == (
        2,
        1,
        1,
    )
    assert [item["index"] for item in output["first"]] == [[1], [2]]
    assert output["first"][0]["got_bits"] == "0x7fc00001"
    forgiving = {**body, "tolerance": {"nan_payload": "ignore", "signed_zero": "ignore"}}
    answer = await client.post("/verify/roll", json=forgiving)
    assert answer.json()["equal"] is True
    assert answer.json()["rule"]["nan_payload"] == "ignore"


async def test_a_case_file_is_an_npz_body(client: httpx.AsyncClient) -> None:
    data = np.arange(12, dtype=ml_dtypes.bfloat16).reshape(3, 4)
    inputs: dict[str, Any] = {"data": data, "indices": np.array([2, 0]), "axis": np.int64(1)}
    right = data[:, [2, 0]]
    wrong = right.copy()
    wrong.view(np.uint16)[0, 1] ^= 1
    equal = await client.post(
        "/verify/gather", content=encode_case("gather", inputs, {"output": right}), headers=NPZ
    )
    assert equal.json()["equal"] is True
    assert _output(equal)["expected_dtype"] == "bfloat16"
    differs = await client.post(
        "/verify/gather", content=encode_case("gather", inputs, {"output": wrong}), headers=NPZ
    )
    output = _output(differs)
    assert output["mismatches"] == 1 and output["max_ulp"] == 1
    assert output["first"][0]["index"] == [0, 1]


@pytest.mark.parametrize(
    ("candidate", "shape_equal", "dtype_equal"),
    [
        (np.array([3, 1, 2], dtype=np.int32), True, False),
        (np.array([[3, 1, 2]], dtype=np.int64), False, True),
        (np.array([3, 1], dtype=np.int64), False, True),
    ],
)
async def test_a_wrong_shape_or_type_is_a_verdict(
    client: httpx.AsyncClient, candidate: np.ndarray, shape_equal: bool, dtype_equal: bool
) -> None:
    inputs: dict[str, Any] = {
        "data": np.array([1, 2, 3]),
        "shift": np.int64(1),
        "axes": np.int64(0),
    }
    answer = await client.post(
        "/verify/roll", content=encode_case("roll", inputs, {"output": candidate}), headers=NPZ
    )
    output = _output(answer)
    assert answer.json()["equal"] is False
    assert (output["shape_equal"], output["dtype_equal"]) == (shape_equal, dtype_equal)


async def test_missing_and_extra_outputs_are_verdicts(client: httpx.AsyncClient) -> None:
    body = {"data": [1, 2], "shift": 1, "axes": 0, "outputs": {"out": [2, 1]}}
    verdict = (await client.post("/verify/roll", json=body)).json()
    assert verdict["equal"] is False
    assert [(item["name"], item["why"]) for item in verdict["outputs"]] == [
        ("output", "the candidate has no output of this name"),
        ("out", "the op has no output of this name"),
    ]


@pytest.mark.parametrize(
    "request_body",
    [
        {"data": [1, 2], "shift": 1, "axes": 3},
        {"data": [1, 2], "shift": [1, 2], "axes": 0},
        {"data": [1, 2], "shift": 1.5, "axes": 0},
        {"data": [1, 2], "shift": 1},
        {"data": [1, 2], "shift": 1, "axes": 0, "axis": 0},
        {"data": "bm90IG5weQ==", "shift": 1, "axes": 0},
    ],
)
async def test_a_request_the_op_refuses_is_the_ops_own_refusal(
    client: httpx.AsyncClient, request_body: dict[str, Any]
) -> None:
    own = await client.post("/roll", json=request_body)
    verify = await client.post("/verify/roll", json={**request_body, "outputs": {"output": [1]}})
    assert own.status_code in (400, 422)
    assert (verify.status_code, verify.json()) == (own.status_code, own.json())


async def test_the_ops_refusal_of_an_npz_case_has_the_ops_status(client: httpx.AsyncClient) -> None:
    inputs: dict[str, Any] = {"data": np.array([1, 2]), "shift": np.float32(1), "axes": np.int64(0)}
    answer = await client.post(
        "/verify/roll",
        content=encode_case("roll", inputs, {"output": np.array([1, 2])}),
        headers=NPZ,
    )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "shift"]


@pytest.mark.parametrize(
    ("body", "status", "loc"),
    [
        ({"data": [1], "shift": 1, "axes": 0}, 422, ["body", "outputs"]),
        ({"data": [1], "shift": 1, "axes": 0, "outputs": [1]}, 422, ["body", "outputs"]),
        (
            {"data": [1], "shift": 1, "axes": 0, "outputs": {"output": "bad"}},
            400,
            ["body", "outputs", "output"],
        ),
        (
            {
                "data": [1],
                "shift": 1,
                "axes": 0,
                "outputs": {"output": [1]},
                "tolerance": {"ulp": -1},
            },
            422,
            ["body", "tolerance", "ulp"],
        ),
        (
            {
                "data": [1],
                "shift": 1,
                "axes": 0,
                "outputs": {"output": [1]},
                "tolerance": {"ulps": 1},
            },
            422,
            ["body", "tolerance", "ulps"],
        ),
        (
            # A client's key is one element of the location, dots and all (issue 42.6).
            {
                "data": [1],
                "shift": 1,
                "axes": 0,
                "outputs": {"output": [1]},
                "tolerance": {"u.l.p": 1},
            },
            422,
            ["body", "tolerance", "u.l.p"],
        ),
        (
            {"data": [1], "shift": 1, "axes": 0, "outputs": {"output": [1]}, "version": "3"},
            404,
            ["body", "version"],
        ),
        (
            {
                "data": [1],
                "shift": 1,
                "axes": 0,
                "outputs": {"output": {"data": [1], "dtype": "f99"}},
            },
            422,
            ["body", "outputs", "output", "dtype"],
        ),
    ],
)
async def test_a_bad_candidate_or_tolerance_is_refused_naming_it(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, loc: list[str]
) -> None:
    answer = await client.post("/verify/roll", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["detail"][0]["loc"] == loc


async def test_npz_case_refusals_name_their_member(client: httpx.AsyncClient) -> None:
    inputs: dict[str, Any] = {"data": np.array([1, 2]), "shift": np.int64(1), "axes": np.int64(0)}
    outputs = {"output": np.array([2, 1])}
    cases = [
        (encode_case("gather", inputs, outputs), 422, ["body", "meta", "op"]),
        (
            encode_case("roll", {**inputs, "extra": np.int64(0)}, outputs),
            422,
            ["body", "input.extra"],
        ),
        (
            encode_case("roll", {"data": inputs["data"], "shift": inputs["shift"]}, outputs),
            422,
            ["body", "input.axes"],
        ),
        (
            encode_case("roll", inputs, outputs, {"batch_dims": 1}),
            422,
            ["body", "meta", "attributes", "batch_dims"],
        ),
        (
            encode_case("roll", inputs, outputs, tolerance={"atol": -1}),
            422,
            ["body", "meta", "tolerance", "atol"],
        ),
        (
            encode_case("roll", inputs, outputs, tolerance={"a.tol": 1}),
            422,
            ["body", "meta", "tolerance", "a.tol"],
        ),
        (encode_case("roll", inputs, outputs, version="1"), 404, ["body", "meta", "version"]),
        (b"not a zip", 400, ["body"]),
    ]
    for body, status, loc in cases:
        answer = await client.post("/verify/roll", content=body, headers=NPZ)
        assert (answer.status_code, answer.json()["detail"][0]["loc"]) == (status, loc), answer.text


async def test_an_unknown_op_is_404_and_an_unknown_type_415(client: httpx.AsyncClient) -> None:
    missing = await client.post("/verify/nope", json={})
    assert missing.status_code == 404
    assert missing.json()["detail"][0]["type"] == "not_found"
    text = await client.post("/verify/roll", content=b"x", headers={"content-type": "text/plain"})
    assert text.status_code == 415


async def test_the_candidates_bytes_count_against_the_memory_budget() -> None:
    budget = 16 << 20
    app = create_app(Settings(memory_budget_bytes=budget))
    inputs: dict[str, Any] = {
        "data": np.zeros(4, dtype=np.uint8),
        "shift": np.int64(1),
        "axes": np.int64(0),
    }
    big = np.zeros(24 << 20, dtype=np.uint8)  # a candidate larger than the budget: never fits
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        small = encode_case("roll", inputs, {"output": np.zeros(4, dtype=np.uint8)})
        assert (await client.post("/verify/roll", content=small, headers=NPZ)).status_code == 200
        large = encode_case("roll", inputs, {"output": big})
        answer = await client.post("/verify/roll", content=large, headers=NPZ)
        assert answer.status_code == 413, answer.text


async def test_a_large_candidate_in_json_travels_as_base64(client: httpx.AsyncClient) -> None:
    data = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: its base64 is read as a view
    candidate = np.roll(data, 3)
    candidate[7] = np.nextafter(candidate[7], np.float32(np.inf))
    body = {
        "data": encode_npy_base64(data),
        "shift": 3,
        "axes": 0,
        "outputs": {"output": {"data": encode_npy_base64(candidate), "dtype": "float32"}},
    }
    output = _output(await client.post("/verify/roll", json=body))
    assert (output["mismatches"], output["max_ulp"], output["first"][0]["index"]) == (1, 1, [7])


@pytest.mark.parametrize(
    "outputs",
    [
        None,
        {"output": None},
        {"output": True},
        {"output": {"data": None}},
        {"output": {"dtype": "float32"}},
        {"output": {"data": [1], "dtype": None}},
        {"output": {"data": [1], "dtype": 5}},
        {"output": [[1], [2, 3]]},
        {"output": "k05VTVBZ"},
        {"x" * 10_000: [1]},
        {"output": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
    ],
)
async def test_odd_candidates_are_a_verdict_or_a_4xx_never_a_5xx(
    client: httpx.AsyncClient, outputs: Any
) -> None:
    body = {"data": [1.5, 2.5], "shift": 1, "axes": 0, "outputs": outputs}
    answer = await client.post("/verify/roll", json=body)
    assert answer.status_code in (200, 400, 413, 422), answer.text
    assert len(answer.content) < 2000  # nothing sent is echoed back at length


async def test_many_extra_outputs_are_counted_not_all_listed(client: httpx.AsyncClient) -> None:
    outputs = {f"extra_{number}": [1] for number in range(1000)}
    body = {"data": [1], "shift": 1, "axes": 0, "outputs": {"output": [1], **outputs}}
    verdict = (await client.post("/verify/roll", json=body)).json()
    assert verdict["equal"] is False
    assert len(verdict["outputs"]) == 11 and verdict["unlisted_outputs"] == 990


@pytest.mark.parametrize(
    "tolerance",
    [{"ulp": 2**64}, {"atol": 1e308, "rtol": 1e308}, {"ulp": 0, "atol": 0}, "ulp", 1, []],
)
async def test_odd_tolerances_are_applied_or_refused_never_a_5xx(
    client: httpx.AsyncClient, tolerance: Any
) -> None:
    body = {
        "data": [1.5, 2.5],
        "shift": 1,
        "axes": 0,
        "outputs": {"output": [2.5, 1.5]},
        "tolerance": tolerance,
    }
    answer = await client.post("/verify/roll", json=body)
    assert answer.status_code in (200, 422), answer.text


async def test_verify_needs_a_key_when_keys_are_on(tmp_path: Path) -> None:
    key = "k-verify-0123456789abcdef"
    keys = tmp_path / "keys"
    keys.write_text(f"{hashlib.sha256(key.encode()).hexdigest()} harness\n")
    app = create_app(Settings(api_keys_file=keys))
    body = {"data": [1, 2], "shift": 1, "axes": 0, "outputs": {"output": [2, 1]}}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        refused = await client.post("/verify/roll", json=body)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        admitted = await client.post(
            "/verify/roll", json=body, headers={"authorization": f"Bearer {key}"}
        )
        assert admitted.status_code == 200 and admitted.json()["equal"] is True


async def test_case_files_carry_every_kind_of_attribute_and_input(
    client: httpx.AsyncClient,
) -> None:
    """Issue 41's refusals of valid cases: a required or string attribute, Concat's numbered
    inputs, an optional input left out; each equal now, and a bad attribute refused naming it."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    index = np.array([1], dtype=np.int64)
    good: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
        ("reverse", {"data": x, "axis": index}, {"output": x[:, ::-1]}, {"mode": "index"}),
        (
            "split",
            {"data": x, "axis": np.int64(0)},
            {"output_0": x[:1], "output_1": x[1:]},
            {"num_splits": 2},
        ),
        ("concat", {"data_0": x, "data_1": x}, {"output": np.concatenate([x, x], 1)}, {"axis": 1}),
        (
            "slice",
            {"data": x, "start": index, "stop": np.array([3]), "step": index},
            {"output": x[1:]},
            {},
        ),
        (
            "pad",
            {"data": x, "pads_begin": np.array([0, 1]), "pads_end": np.array([0, 0])},
            {"output": np.pad(x, ((0, 0), (1, 0)))},
            {"pad_mode": "constant"},
        ),
    ]
    for op, inputs, outputs, attributes in good:
        answer = await client.post(
            f"/verify/{op}", content=encode_case(op, inputs, outputs, attributes), headers=NPZ
        )
        assert answer.status_code == 200, (op, answer.text)
        assert answer.json()["equal"] is True, (op, answer.json())
    refused: list[tuple[dict[str, Any], str]] = [
        ({"mode": "both"}, 'mode must be one of "index", "mask"'),
        ({"mode": 1}, "mode must be one of"),
        ({}, "missing attribute mode: reverse requires it"),
    ]
    for given, words in refused:
        body = encode_case("reverse", good[0][1], good[0][2], given)
        answer = await client.post("/verify/reverse", content=body, headers=NPZ)
        assert answer.status_code == 422, answer.text
        (problem,) = answer.json()["detail"]
        assert problem["loc"] == ["body", "meta", "attributes", "mode"]
        assert problem["msg"].startswith(words)


async def test_a_large_meta_is_refused_before_it_is_parsed(client: httpx.AsyncClient) -> None:
    """Issue 42.4: 29 MB of JSON in a case's meta, deflated to a few KiB, is refused on the
    archive's directory (413 at meta); it is never inflated nor parsed (the refusal allocates
    a fraction of a MiB while the meta's objects would take hundreds)."""
    text = b'{"format":"tensor-ops-case/1","op":"roll","attributes":{"x":[' + b"0," * 14_500_000
    text += b"0]}}"
    inputs = {"data": np.array([1, 2]), "shift": np.int64(1), "axes": np.int64(0)}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in inputs.items():
            archive.writestr(f"input.{name}.npy", bytes(encode_npy(np.asarray(array))))
        archive.writestr("output.output.npy", bytes(encode_npy(np.array([2, 1]))))
        meta = np.frombuffer(text, dtype=np.uint8)
        archive.writestr("meta.npy", bytes(encode_npy(meta)))
    body = buffer.getvalue()
    assert len(body) < 64 * 1024 and len(text) > 29_000_000
    tracemalloc.start()
    try:
        with pytest.raises(TensorError) as refused:
            decode_case(body, max_bytes=1 << 30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.kind is WireFault.TOO_LARGE and refused.value.field == "meta"
    assert f"more than a case's meta holds ({META_LIMIT})" in refused.value.message
    assert peak < 1 << 20
    answer = await client.post("/verify/roll", content=body, headers=NPZ)
    assert answer.status_code == 413, answer.text
    assert answer.json()["detail"][0]["loc"] == ["body", "meta"]
