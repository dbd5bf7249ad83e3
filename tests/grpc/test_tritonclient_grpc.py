"""The official ``tritonclient.grpc`` against a real server: KServe V2 over gRPC, unchanged.

The conformance cases of the ``/v2`` suite (every element type, index types, ``batch_dims``,
scalars and empty tensors, request ids, refusals), with tensors as raw contents (what
tritonclient sends) and as typed contents (written into tritonclient's own request message),
answers compared bit for bit with the kernels.
"""

import importlib.metadata
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from app.ops import gather, roll
from app.registry import REGISTRY, versions
from tests.support import (
    DTYPES,
    GATHER_BATCH_CASES,
    INTEGER_TYPES,
    ROLL_SHIFT_AXES,
    ROOT,
    TYPED_CONTENTS,
    assert_same_bits,
    free_port,
    launch_server,
    sample,
    stop_server,
    v2_name,
)

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]

FORMS = ["raw", "typed"]


def type_and_form_cases() -> list[Any]:
    cases = []
    for name in DTYPES:
        for form in FORMS:
            # FP16 and BF16 have no typed contents in the protocol: raw only (refusal tested).
            if form == "typed" and name not in TYPED_CONTENTS:
                continue
            cases.append(pytest.param(name, form, id=f"{name}-{form}"))
    return cases


def as_sent(array: Array, form: str) -> Array:
    """``array`` as a Python client sends it: typed contents are written from Python numbers,
    and a float32 signalling NaN becomes a quiet one on its way to a Python float (the service
    keeps the bits it receives: tests/grpc/test_grpc.py sends one on the wire)."""
    if form == "raw" or array.dtype != np.float32:
        return array
    return np.array(array.reshape(-1).tolist(), dtype=array.dtype).reshape(array.shape)


def make_input(name: str, array: Array, form: str) -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    if form == "raw":
        tensor.set_data_from_numpy(array)
    else:
        # tritonclient has no setter for typed contents: its request message takes them as is.
        contents = getattr(tensor._get_tensor().contents, TYPED_CONTENTS[v2_name(array.dtype)])
        contents.extend(array.reshape(-1).tolist())
    return tensor


def run(
    triton: Any, model: str, arrays: dict[str, Array], *, form: str = "raw", **options: Any
) -> tuple[Array, Any]:
    """The output of one infer call, and the response message."""
    inputs = [make_input(name, array, form) for name, array in arrays.items()]
    result = triton.infer(model, inputs, **options)
    output: Array = result.as_numpy("output")
    return output, result.get_response()


def check_output(output: Array, response: Any, model: str, expected: Array) -> None:
    assert_same_bits(output, expected)
    assert response.model_name == model
    assert response.model_version == str(REGISTRY[model].version)
    [tensor] = response.outputs
    assert tensor.name == "output"
    assert tensor.datatype == np_to_triton_dtype(expected.dtype)
    assert list(tensor.shape) == list(expected.shape)
    # Raw contents, as Triton answers: one entry, the output's bytes.
    assert [len(raw) for raw in response.raw_output_contents] == [expected.nbytes]


@pytest.fixture(scope="module")
def grpc_address() -> Iterator[str]:
    port = free_port()
    _, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield f"127.0.0.1:{port}"
    stop_server(process)


@pytest.fixture(scope="module")
def triton(grpc_address: str) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(grpc_address)
    yield client
    client.close()


def test_server_is_live_and_ready(triton: Any) -> None:
    assert triton.is_server_live() is True
    assert triton.is_server_ready() is True


def test_server_metadata(triton: Any) -> None:
    metadata = triton.get_server_metadata()
    assert metadata.name == "tensor-ops"
    assert metadata.version == importlib.metadata.version("tensor-ops")


@pytest.mark.parametrize(
    ("model", "inputs"),
    [("roll", ["data", "shift", "axes"]), ("gather", ["data", "indices", "axis"])],
)
@pytest.mark.parametrize("version", ["", "newest"])
def test_model_metadata(triton: Any, model: str, inputs: list[str], version: str) -> None:
    asked = str(REGISTRY[model].version) if version else ""
    metadata = triton.get_model_metadata(model, model_version=asked)
    assert metadata.name == model
    assert list(metadata.versions) == [str(number) for number in versions(model)]
    assert metadata.platform == "openvino_opset"
    assert [tensor.name for tensor in metadata.inputs] == inputs
    assert [list(tensor.shape) for tensor in metadata.inputs] == [[-1]] * 3
    [output] = metadata.outputs
    assert (output.name, output.datatype) == ("output", "FP32")


@pytest.mark.parametrize("model", ["roll", "gather"])
def test_model_is_ready(triton: Any, model: str) -> None:
    assert triton.is_model_ready(model) is True
    for number in versions(model):
        assert triton.is_model_ready(model, model_version=str(number)) is True


def test_unknown_model_or_version_is_not_found(triton: Any) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: triton.get_model_metadata("conv"),
        lambda: triton.is_model_ready("conv"),
        lambda: triton.get_model_metadata("roll", model_version="8"),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as caught:
            call()
        assert caught.value.status() == "StatusCode.NOT_FOUND"
    data = np.arange(3, dtype=np.int32)
    with pytest.raises(InferenceServerException) as caught:
        run(triton, "conv", {"data": data, "shift": data, "axes": data})
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    models = ", ".join(REGISTRY)
    assert caught.value.message() == f"model: model 'conv' is not served here; models: {models}"


@pytest.mark.parametrize(("dtype", "form"), type_and_form_cases())
def test_roll_every_type(triton: Any, dtype: str, form: str) -> None:
    data = as_sent(sample(dtype, (3, 5), finite=False, seed=1), form)
    shift = np.array([1, -7], dtype=np.int64)
    axes = np.array([0, -1], dtype=np.int32)
    output, response = run(triton, "roll", {"data": data, "shift": shift, "axes": axes}, form=form)
    check_output(output, response, "roll", roll(data, shift, axes))


@pytest.mark.parametrize(("dtype", "form"), type_and_form_cases())
def test_gather_every_type(triton: Any, dtype: str, form: str) -> None:
    data = as_sent(sample(dtype, (3, 4), finite=False, seed=2), form)
    indices = np.array([[3, -1, 4], [-4, 0, -5]], dtype=np.int64)
    axis = np.array(1, dtype=np.int32)
    output, response = run(
        triton, "gather", {"data": data, "indices": indices, "axis": axis}, form=form
    )
    check_output(output, response, "gather", gather(data, indices, axis))
    assert not output[:, 1, 2].any()  # index -5: a slice of zeros


@pytest.mark.parametrize("dtype", ["FP16", "BF16"])
def test_half_floats_have_no_typed_contents(triton: Any, dtype: str) -> None:
    data = sample(dtype, (4,), finite=True, seed=3)
    tensor = grpcclient.InferInput("data", [4], dtype)
    tensor._get_tensor().contents.fp32_contents.extend(data.astype(np.float32).tolist())
    index = np.array([0], np.int64)
    others = [make_input(name, index, "typed") for name in ("shift", "axes")]
    with pytest.raises(InferenceServerException) as caught:
        triton.infer("roll", [tensor, *others])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert caught.value.message() == (
        f"data: {dtype} has no typed contents in the protocol; send the tensor in "
        "raw_input_contents"
    )


@pytest.mark.parametrize(
    ("shift", "axes"),
    ROLL_SHIFT_AXES,
)
@pytest.mark.parametrize("form", FORMS)
def test_roll_shift_and_axes_types(triton: Any, shift: Array, axes: Array, form: str) -> None:
    data = sample("FP32", (2, 3, 5), finite=True, seed=3)
    output, response = run(triton, "roll", {"data": data, "shift": shift, "axes": axes}, form=form)
    check_output(output, response, "roll", roll(data, shift, axes))


@pytest.mark.parametrize(
    ("data_shape", "indices", "axis", "batch_dims"),
    GATHER_BATCH_CASES,
)
@pytest.mark.parametrize("form", FORMS)
def test_gather_batch_dims_parameter(
    triton: Any,
    data_shape: tuple[int, ...],
    indices: list[Any],
    axis: int,
    batch_dims: int,
    form: str,
) -> None:
    data = sample("INT64", data_shape, finite=True, seed=4)
    index_array = np.array(indices, dtype=np.int64)
    axis_array = np.array([axis], dtype=np.int64)
    output, response = run(
        triton,
        "gather",
        {"data": data, "indices": index_array, "axis": axis_array},
        form=form,
        parameters={"batch_dims": batch_dims},
    )
    check_output(output, response, "gather", gather(data, index_array, axis_array, batch_dims))


@pytest.mark.parametrize("index_type", INTEGER_TYPES)
@pytest.mark.parametrize("form", FORMS)
def test_gather_index_types(triton: Any, index_type: str, form: str) -> None:
    dtype = DTYPES[index_type]
    info = np.iinfo(dtype)
    values = [0, 2, info.max, info.max - 1] + ([-1, -3, info.min] if info.min else [3])
    if dtype == np.uint64:
        values += [2**63, 2**64 - 1]  # far out of range: zeros, never read as negative numbers
    indices = np.array(values, dtype=dtype)
    axis = np.array(0, dtype=dtype)
    data = sample("FP64", (4, 2), finite=False, seed=5)
    output, response = run(
        triton, "gather", {"data": data, "indices": indices, "axis": axis}, form=form
    )
    check_output(output, response, "gather", gather(data, indices, axis))


@pytest.mark.parametrize("form", FORMS)
def test_scalars_and_empty_tensors(triton: Any, form: str) -> None:
    scalar = np.array(-7, dtype=np.int16)
    empty = np.zeros((0, 3), dtype=np.float32)
    hollow = np.zeros((2, 0), dtype=np.uint8)
    matrix = sample("INT8", (3, 4), finite=True, seed=6)
    one = np.array(1, dtype=np.int64)
    zero = np.array(0, dtype=np.int64)
    cases: list[tuple[str, dict[str, Array], Array]] = [
        ("roll", {"data": scalar, "shift": one, "axes": zero}, roll(scalar, one, zero)),
        ("roll", {"data": empty, "shift": one, "axes": one}, roll(empty, one, one)),
        ("gather", {"data": matrix, "indices": one, "axis": one}, gather(matrix, one, one)),
        (
            "gather",
            {"data": matrix, "indices": np.zeros((0,), np.int32), "axis": zero},
            gather(matrix, np.zeros((0,), np.int32), zero),
        ),
        (
            "gather",
            {"data": hollow, "indices": np.array([0, -1], np.int64), "axis": one},
            np.zeros((2, 2), np.uint8),
        ),
    ]
    for model, arrays, expected in cases:
        output, response = run(triton, model, arrays, form=form)
        check_output(output, response, model, expected)


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_request_id_and_compressed_calls(triton: Any, compression: str | None) -> None:
    data = sample("FP32", (64, 16), finite=False, seed=7)
    indices = np.array([[63, -64, 64]], dtype=np.int16)
    axis = np.array(0, dtype=np.int8)
    arrays = {"data": data, "indices": indices, "axis": axis}
    output, response = run(
        triton,
        "gather",
        arrays,
        request_id=f"req-{compression}",
        compression_algorithm=compression,
        outputs=[grpcclient.InferRequestedOutput("output")],
    )
    assert response.id == f"req-{compression}"
    check_output(output, response, "gather", gather(data, indices, axis))


def test_no_request_id_means_an_empty_id(triton: Any) -> None:
    data = np.arange(4, dtype=np.uint32)
    arrays = {"data": data, "shift": np.array(1, np.int32), "axes": np.array(0, np.int32)}
    output, response = run(triton, "roll", arrays)
    assert response.id == ""
    assert output.tolist() == [3, 0, 1, 2]


def test_versioned_infer(triton: Any) -> None:
    arrays: dict[str, Array] = {
        "data": np.arange(5, dtype=np.int8),
        "shift": np.array(2, np.int64),
        "axes": np.array(0, np.int64),
    }
    output, _ = run(triton, "roll", arrays, model_version="7")
    assert output.tolist() == [3, 4, 0, 1, 2]
    with pytest.raises(InferenceServerException) as caught:
        run(triton, "roll", arrays, model_version="2")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert "has no version '2'" in caught.value.message()


def test_a_64_mib_tensor_round_trips(triton: Any) -> None:
    data = np.random.default_rng(9).standard_normal((4096, 4096), dtype=np.float32)
    shift = np.array([1000, -3], dtype=np.int64)
    axes = np.array([0, 1], dtype=np.int64)
    output, response = run(triton, "roll", {"data": data, "shift": shift, "axes": axes})
    check_output(output, response, "roll", roll(data, shift, axes))


F32 = np.arange(6, dtype=np.float32).reshape(2, 3)
I32 = np.array([0], dtype=np.int32)


@pytest.mark.parametrize(
    ("model", "arrays", "parameters", "code", "message"),
    [
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": np.array([2], np.int32)},
            None,
            "INVALID_ARGUMENT",
            "axes: axes[0] = 2 is out of range for data of rank 2 (allowed values: [-2, 1])",
            id="axes-out-of-range",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": np.array([1.0], np.float32), "axes": I32},
            None,
            "INVALID_ARGUMENT",
            "shift: shift must be of type int32 or int64, got float32",
            id="fp32-shift",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": I32},
            {"batch_dims": 1},
            "INVALID_ARGUMENT",
            "batch_dims: model 'roll' takes no batch_dims parameter",
            id="roll-batch-dims",
        ),
        pytest.param(
            "gather",
            {"data": F32, "indices": I32, "axis": I32},
            {"batch_dims": "1"},
            "INVALID_ARGUMENT",
            "parameters.batch_dims: must be an int64 integer",
            id="string-batch-dims",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32},
            None,
            "INVALID_ARGUMENT",
            "axes: missing input 'axes'; roll takes data, shift, axes",
            id="missing-input",
        ),
        pytest.param(
            "roll",
            {"data": F32, "shift": I32, "axes": I32, "axis": I32},
            None,
            "INVALID_ARGUMENT",
            "axis: unknown input 'axis'; roll takes data, shift, axes",
            id="unknown-input",
        ),
    ],
)
@pytest.mark.parametrize("form", FORMS)
def test_refused(
    triton: Any,
    model: str,
    arrays: dict[str, Array],
    parameters: dict[str, Any] | None,
    code: str,
    message: str,
    form: str,
) -> None:
    typed = (v2_name(array.dtype) in TYPED_CONTENTS for array in arrays.values())
    if form == "typed" and not all(typed):
        pytest.skip("no typed contents for this element type")
    with pytest.raises(InferenceServerException) as caught:
        run(triton, model, arrays, form=form, parameters=parameters)
    assert caught.value.status() == f"StatusCode.{code}"
    assert caught.value.message() == message
    assert triton.is_server_ready() is True


def test_kserve_grpc_client_calls_both_models(grpc_address: str) -> None:
    """KServe's own ``InferenceGRPCClient`` on a sample of the cases (its protobuf messages
    collide with tritonclient's in one process, so it runs in its own)."""
    script = ROOT / "tests" / "kserve_grpc_sample.py"
    done = subprocess.run(
        [sys.executable, str(script), grpc_address],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("kserve sample: "), done.stdout
