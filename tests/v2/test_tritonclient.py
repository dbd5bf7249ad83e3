"""The official ``tritonclient.http`` against a real server: /v2 works with it unchanged."""

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from app.ops import gather, roll
from app.registry import REGISTRY, versions
from tests.support import (
    DTYPES,
    GATHER_BATCH_CASES,
    INTEGER_TYPES,
    ROLL_SHIFT_AXES,
    assert_same_bits,
    sample,
)

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]

# Inputs and outputs go as Triton binary data or as JSON "data": every pairing of the two.
MODES = [(True, True), (True, False), (False, True), (False, False)]


def mode_id(binary_in: bool, binary_out: bool) -> str:
    return f"{'bin' if binary_in else 'json'}-in-{'bin' if binary_out else 'json'}-out"


def type_and_mode_cases() -> list[Any]:
    cases = []
    for name in DTYPES:
        for binary_in, binary_out in MODES:
            # tritonclient refuses BF16 in JSON ("BF16 inputs must be sent as binary data over
            # HTTP"): set_data_from_numpy raises before any request, so there is no such request.
            if name == "BF16" and not binary_in:
                continue
            cases.append(
                pytest.param(
                    name, binary_in, binary_out, id=f"{name}-{mode_id(binary_in, binary_out)}"
                )
            )
    return cases


def make_input(name: str, array: Array, binary: bool) -> Any:
    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def run(
    triton: Any,
    model: str,
    arrays: dict[str, Array],
    *,
    binary_in: bool = True,
    binary_out: bool = True,
    **options: Any,
) -> tuple[Array, dict[str, Any]]:
    """The output of one infer call and the response's JSON header."""
    inputs = [make_input(name, array, binary_in) for name, array in arrays.items()]
    outputs = [httpclient.InferRequestedOutput("output", binary_data=binary_out)]
    result = triton.infer(model, inputs, outputs=outputs, **options)
    response: dict[str, Any] = result.get_response()
    output: Array = result.as_numpy("output")
    return output, response


def check_output(
    output: Array, response: dict[str, Any], model: str, expected: Array, binary_out: bool
) -> None:
    assert_same_bits(output, expected)
    assert response["model_name"] == model
    assert response["model_version"] == str(REGISTRY[response["model_name"]].version)
    [tensor] = response["outputs"]
    assert tensor["name"] == "output"
    assert tensor["datatype"] == np_to_triton_dtype(expected.dtype)
    assert tensor["shape"] == list(expected.shape)
    if binary_out:
        assert tensor["parameters"] == {"binary_data_size": expected.nbytes}
        assert "data" not in tensor
    else:
        assert len(tensor["data"]) == expected.size


@pytest.fixture(scope="module")
def triton(live_url: str) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(live_url.removeprefix("http://"))
    yield client
    client.close()


def test_server_is_live_and_ready(triton: Any) -> None:
    assert triton.is_server_live() is True
    assert triton.is_server_ready() is True


def test_server_metadata_lists_binary_tensor_data(triton: Any) -> None:
    metadata = triton.get_server_metadata()
    assert metadata["name"] == "tensor-ops"
    assert metadata["version"] == importlib.metadata.version("tensor-ops")
    assert "binary_tensor_data" in metadata["extensions"]


@pytest.mark.parametrize(
    ("model", "inputs", "index_types"),
    [
        (
            "roll",
            ["data", "shift", "axes"],
            {"shift": ["INT32", "INT64"], "axes": ["INT32", "INT64"]},
        ),
        ("gather", ["data", "indices", "axis"], {"indices": INTEGER_TYPES, "axis": INTEGER_TYPES}),
    ],
)
@pytest.mark.parametrize("version", ["", "newest"])
def test_model_metadata(
    triton: Any, model: str, inputs: list[str], index_types: dict[str, list[str]], version: str
) -> None:
    asked = str(REGISTRY[model].version) if version else ""
    metadata = triton.get_model_metadata(model, model_version=asked)
    assert metadata["name"] == model
    # Every version the service serves, oldest first (gather: 1, 7, 8).
    assert metadata["versions"] == [str(number) for number in versions(model)]
    assert [tensor["name"] for tensor in metadata["inputs"]] == inputs
    for tensor in metadata["inputs"]:
        allowed = index_types.get(tensor["name"], list(DTYPES))
        assert tensor["parameters"]["datatypes"] == allowed
        assert tensor["datatype"] in allowed
    [output] = metadata["outputs"]
    assert output["name"] == "output"
    assert output["parameters"]["datatypes"] == list(DTYPES)


@pytest.mark.parametrize("model", ["roll", "gather"])
def test_model_is_ready(triton: Any, model: str) -> None:
    assert triton.is_model_ready(model) is True
    for number in versions(model):
        assert triton.is_model_ready(model, model_version=str(number)) is True
    assert triton.is_model_ready(model, model_version="2") is False


def test_unknown_model_is_a_404(triton: Any) -> None:
    assert triton.is_model_ready("conv") is False
    with pytest.raises(InferenceServerException) as caught:
        triton.get_model_metadata("conv")
    assert caught.value.status() == "404"
    assert "'conv' is not served here" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        triton.get_model_metadata("roll", model_version="8")
    assert caught.value.status() == "404"
    assert "no version '8'; versions: 7" in caught.value.message()
    data = np.arange(3, dtype=np.int32)
    with pytest.raises(InferenceServerException) as caught:
        run(triton, "conv", {"data": data, "shift": data, "axes": data})
    assert caught.value.status() == "404"


@pytest.mark.parametrize(("dtype", "binary_in", "binary_out"), type_and_mode_cases())
def test_roll_every_type(triton: Any, dtype: str, binary_in: bool, binary_out: bool) -> None:
    data = sample(dtype, (3, 5), finite=not (binary_in and binary_out), seed=1)
    shift = np.array([1, -7], dtype=np.int64)
    axes = np.array([0, -1], dtype=np.int32)
    output, response = run(
        triton,
        "roll",
        {"data": data, "shift": shift, "axes": axes},
        binary_in=binary_in,
        binary_out=binary_out,
    )
    check_output(output, response, "roll", roll(data, shift, axes), binary_out)


@pytest.mark.parametrize(("dtype", "binary_in", "binary_out"), type_and_mode_cases())
def test_gather_every_type(triton: Any, dtype: str, binary_in: bool, binary_out: bool) -> None:
    data = sample(dtype, (3, 4), finite=not (binary_in and binary_out), seed=2)
    # Axis 1 has length 4: -4..3 pick a column, 4 and -5 are out of range and give zeros.
    indices = np.array([[3, -1, 4], [-4, 0, -5]], dtype=np.int64)
    axis = np.array(1, dtype=np.int32)
    output, response = run(
        triton,
        "gather",
        {"data": data, "indices": indices, "axis": axis},
        binary_in=binary_in,
        binary_out=binary_out,
    )
    expected = gather(data, indices, axis)
    check_output(output, response, "gather", expected, binary_out)
    assert not output[:, 1, 2].any()  # index -5: a slice of zeros


@pytest.mark.parametrize(
    ("shift", "axes"),
    ROLL_SHIFT_AXES,
)
@pytest.mark.parametrize("binary_in", [True, False], ids=["bin", "json"])
def test_roll_shift_and_axes_types(triton: Any, shift: Array, axes: Array, binary_in: bool) -> None:
    data = sample("FP32", (2, 3, 5), finite=True, seed=3)
    output, response = run(
        triton, "roll", {"data": data, "shift": shift, "axes": axes}, binary_in=binary_in
    )
    check_output(output, response, "roll", roll(data, shift, axes), binary_out=True)


@pytest.mark.parametrize(
    ("data_shape", "indices", "axis", "batch_dims"),
    GATHER_BATCH_CASES,
)
@pytest.mark.parametrize(("binary_in", "binary_out"), MODES, ids=[mode_id(*m) for m in MODES])
def test_gather_batch_dims_parameter(
    triton: Any,
    data_shape: tuple[int, ...],
    indices: list[Any],
    axis: int,
    batch_dims: int,
    binary_in: bool,
    binary_out: bool,
) -> None:
    data = sample("INT64", data_shape, finite=True, seed=4)
    index_array = np.array(indices, dtype=np.int64)
    axis_array = np.array([axis], dtype=np.int64)
    output, response = run(
        triton,
        "gather",
        {"data": data, "indices": index_array, "axis": axis_array},
        binary_in=binary_in,
        binary_out=binary_out,
        parameters={"batch_dims": batch_dims},
    )
    expected = gather(data, index_array, axis_array, batch_dims)
    check_output(output, response, "gather", expected, binary_out)


@pytest.mark.parametrize("index_type", INTEGER_TYPES)
@pytest.mark.parametrize("binary_in", [True, False], ids=["bin", "json"])
def test_gather_index_types(triton: Any, index_type: str, binary_in: bool) -> None:
    dtype = DTYPES[index_type]
    info = np.iinfo(dtype)
    values = [0, 2, info.max, info.max - 1] + ([-1, -3, info.min] if info.min else [3])
    if dtype == np.uint64:
        values += [2**63, 2**64 - 1]  # far out of range: zeros, never read as negative numbers
    indices = np.array(values, dtype=dtype)
    axis = np.array(0, dtype=dtype)
    data = sample("FP64", (4, 2), finite=not binary_in, seed=5)
    output, response = run(
        triton, "gather", {"data": data, "indices": indices, "axis": axis}, binary_in=binary_in
    )
    check_output(output, response, "gather", gather(data, indices, axis), binary_out=True)


@pytest.mark.parametrize(("binary_in", "binary_out"), MODES, ids=[mode_id(*m) for m in MODES])
def test_scalars_and_empty_tensors(triton: Any, binary_in: bool, binary_out: bool) -> None:
    scalar = np.array(-7, dtype=np.int16)
    empty = np.zeros((0, 3), dtype=np.float32)
    hollow = np.zeros((2, 0), dtype=np.uint8)
    matrix = sample("INT8", (3, 4), finite=True, seed=6)
    one = np.array(1, dtype=np.int64)
    zero = np.array(0, dtype=np.int64)
    cases: list[tuple[str, dict[str, Array], Array]] = [
        ("roll", {"data": scalar, "shift": one, "axes": zero}, roll(scalar, one, zero)),
        ("roll", {"data": empty, "shift": one, "axes": one}, roll(empty, one, one)),
        # A scalar index drops the gathered axis.
        ("gather", {"data": matrix, "indices": one, "axis": one}, gather(matrix, one, one)),
        (
            "gather",
            {"data": matrix, "indices": np.zeros((0,), np.int32), "axis": zero},
            gather(matrix, np.zeros((0,), np.int32), zero),
        ),
        # Every index is out of the empty axis: zeros.
        (
            "gather",
            {"data": hollow, "indices": np.array([0, -1], np.int64), "axis": one},
            np.zeros((2, 2), np.uint8),
        ),
    ]
    for model, arrays, expected in cases:
        output, response = run(triton, model, arrays, binary_in=binary_in, binary_out=binary_out)
        check_output(output, response, model, expected, binary_out)


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary_in", [True, False], ids=["bin", "json"])
def test_request_id_and_compressed_requests(
    triton: Any, compression: str | None, binary_in: bool
) -> None:
    data = sample("FP32", (64, 16), finite=not binary_in, seed=7)
    indices = np.array([[63, -64, 64]], dtype=np.int16)
    axis = np.array(0, dtype=np.int8)
    inputs = [
        make_input(name, array, binary_in)
        for name, array in (("data", data), ("indices", indices), ("axis", axis))
    ]
    # No outputs asked for: tritonclient then asks for every output as binary data.
    result = triton.infer(
        "gather",
        inputs,
        request_id=f"req-{compression}-{binary_in}",
        request_compression_algorithm=compression,
        response_compression_algorithm=compression,
    )
    response = result.get_response()
    assert response["id"] == f"req-{compression}-{binary_in}"
    check_output(
        result.as_numpy("output"), response, "gather", gather(data, indices, axis), binary_out=True
    )


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_large_binary_request(triton: Any, compression: str | None) -> None:
    # 1 MiB of data: over the size above which the service decodes and computes off its loop.
    data = sample("FP32", (256, 1024), finite=False, seed=8)
    shift = np.array([-100, 1000], dtype=np.int64)
    axes = np.array([0, 1], dtype=np.int64)
    output, response = run(
        triton,
        "roll",
        {"data": data, "shift": shift, "axes": axes},
        request_compression_algorithm=compression,
    )
    check_output(output, response, "roll", roll(data, shift, axes), binary_out=True)


def test_versioned_infer(triton: Any) -> None:
    arrays: dict[str, Array] = {
        "data": np.arange(5, dtype=np.int8),
        "shift": np.array(2, np.int64),
        "axes": np.array(0, np.int64),
    }
    output, response = run(triton, "roll", arrays, model_version="7")
    assert output.tolist() == [3, 4, 0, 1, 2]
    assert response["model_version"] == str(REGISTRY[response["model_name"]].version)
    with pytest.raises(InferenceServerException) as caught:
        run(triton, "roll", arrays, model_version="2")
    assert caught.value.status() == "404"
    assert "has no version '2'" in caught.value.message()


def test_unknown_output_is_refused(triton: Any) -> None:
    inputs = [
        make_input("data", np.zeros(2, np.float16), True),
        make_input("indices", np.zeros(1, np.int32), True),
        make_input("axis", np.zeros((), np.int32), True),
    ]
    with pytest.raises(InferenceServerException) as caught:
        triton.infer("gather", inputs, outputs=[httpclient.InferRequestedOutput("out")])
    assert caught.value.status() == "422"
    assert caught.value.message() == "unknown output 'out'; the output is 'output'"


def test_no_request_id_means_no_id(triton: Any) -> None:
    data = np.arange(4, dtype=np.uint32)
    arrays = {"data": data, "shift": np.array(1, np.int32), "axes": np.array(0, np.int32)}
    output, response = run(triton, "roll", arrays)
    assert "id" not in response
    assert output.tolist() == [3, 0, 1, 2]


F32 = np.arange(6, dtype=np.float32).reshape(2, 3)
I32 = np.array([0], dtype=np.int32)


@pytest.mark.parametrize(
    ("model", "arrays", "parameters", "binary_in", "status", "words"),
    [
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": np.array([2], np.int32)},
            None,
            True,
            "422",
            "axes[0] = 2 is out of range for data of rank 2",
            id="axes-out-of-range",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": np.array([1.0], np.float32), "axes": I32},
            None,
            True,
            "422",
            "shift: shift must be of type int32 or int64, got float32",
            id="fp32-shift",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": np.array([1, 1], np.int64), "axes": I32},
            None,
            False,
            "422",
            "shift: if shift is a 1D tensor, axes must be a 1D tensor of the same size",
            id="shift-axes-lengths",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": I32},
            {"batch_dims": 1},
            True,
            "422",
            "takes no batch_dims",
            id="roll-batch-dims",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": np.array([[0]], np.int64), "axis": np.array(1, np.int64)},
            {"batch_dims": 3},
            True,
            "422",
            "batch_dims: batch_dims = 3 is out of range",
            id="batch-dims-out-of-range",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": I32, "axis": np.array(0.0, np.float64)},
            None,
            True,
            "422",
            "axis: axis must be of an integer type",
            id="fp64-axis",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": np.array([0.5], np.float16), "axis": I32},
            None,
            False,
            "422",
            "indices: indices must be of an integer type",
            id="fp16-indices",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": I32, "axis": np.array(-3, np.int64)},
            None,
            True,
            "422",
            "axis: axis = -3 is out of range for data of rank 2",
            id="axis-out-of-range",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": I32, "axis": I32},
            {"batch_dims": "1"},
            True,
            "422",
            "parameters.batch_dims: must be an int64 integer",
            id="string-batch-dims",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32},
            None,
            True,
            "422",
            "missing input 'axes'; roll takes data, shift, axes",
            id="missing-input",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": I32, "axis": I32},
            None,
            False,
            "422",
            "unknown input 'axis'; roll takes data, shift, axes",
            id="unknown-input",
        ),
        pytest.param(
            "roll",
            {"data": np.array([np.nan], np.float32), "shift": I32, "axes": I32},
            None,
            False,
            "400",
            "request is not valid JSON",
            # tritonclient writes a JSON NaN as the bare token NaN, which is not JSON.
            id="json-nan",
        ),
    ],
)
def test_refused(
    triton: Any,
    model: str,
    arrays: dict[str, Array],
    parameters: dict[str, Any] | None,
    binary_in: bool,
    status: str,
    words: str,
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        run(triton, model, arrays, binary_in=binary_in, parameters=parameters)
    assert caught.value.status() == status
    assert words in caught.value.message()
    # The service keeps answering after a refusal.
    assert triton.is_server_ready() is True
