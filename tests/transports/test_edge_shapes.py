"""Rank 0 and empty dimensions, and enumerated attributes' bad values, for every op of the
registry on every way in (issue 42, points 8 and 6): the JSON route (npy form, so the types are
exact), ``.npz`` bodies, ``/v2`` binary tensors and gRPC raw contents.

Each op's first example is made into edge requests by its declaration alone: every tensor of
data's type (data, updates, pad_value) a scalar, every input of one element a dimension empty,
every other index input a scalar; data empty along its first axis; the index tensors (indices)
empty. Where the op allows the request, every way in answers the outputs the pipeline makes of
it in-process, bit for bit (and never a 500); where it does not, every way in refuses it with a
4xx naming the same field."""

import io
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest

from app.errors import ServiceError
from app.main import create_app
from app.ops.declaration import LIMIT_RANK, Op
from app.ops.pad import MODES
from app.pipeline.jobs import Limits, make_job
from app.registry import REGISTRY
from app.settings import Settings
from tensor_ops_wire.dtypes import element_type_of
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.ops import parameter_value, query_text
from tests.support import (
    DTYPES,
    grpc_channel,
    grpc_serving,
    inference_stub,
    npy_b64,
    npz_bytes,
    v2_binary_body,
    v2_name,
)
from tests.transports.test_every_op import example_arrays

pytestmark = pytest.mark.anyio

Array = npt.NDArray[Any]
WAYS = ("json", "npz", "v2", "grpc")


def first_example(op: Op) -> tuple[dict[str, Array], dict[str, Any]]:
    value = next(iter(op.examples.values()))["value"]
    return example_arrays(op, dict(value))


def _scalar_of(array: Array) -> Array:
    return (array.reshape(-1)[:1] if array.size else np.zeros(1, array.dtype)).reshape(())


def edge_requests(op: Op) -> dict[str, dict[str, Array]]:
    """The op's edge requests, by name: its first example's inputs made rank 0 or empty."""
    base, _ = first_example(op)
    rank0: dict[str, Array] = {}
    empty_data = dict(base)
    empty_indices = dict(base)
    for name, array in base.items():
        item = op.input_for(name)
        assert item is not None
        if item.like_data:
            rank0[name] = _scalar_of(array)
            if array.ndim:
                empty_data[name] = array[:0]
        elif item.limit == LIMIT_RANK:
            rank0[name] = np.zeros(0, array.dtype)
        else:
            rank0[name] = _scalar_of(array)
            if not item.limit and array.ndim:
                empty_indices[name] = array[:0]
    made = {"rank0": rank0, "empty-data": empty_data}
    if any(empty_indices[name] is not base[name] for name in base):
        made["empty-indices"] = empty_indices
        made["all-empty"] = {
            name: empty_indices[name] if empty_indices[name] is not base[name] else array
            for name, array in empty_data.items()
        }
    return made


CASES = [
    pytest.param(op.name, variant, id=f"{op.name}-{variant}")
    for op in REGISTRY.values()
    for variant in edge_requests(op)
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")  # one app and gRPC server for the module: a hundred requests
async def app_and_stub() -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_app(Settings())
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
        grpc_serving(app) as address,
        grpc_channel(address) as channel,
    ):
        yield client, inference_stub(channel)


#: What a way in made of a request: ("ok", outputs) or ("refused", status, field, message).
Outcome = tuple[Any, ...]


def _field(message: str) -> str:
    """The field a V2 or gRPC refusal names: its message's location, before the first ": "."""
    return message.split(": ", 1)[0].rsplit(".", 1)[-1]


async def send(
    way: str,
    ways: tuple[httpx.AsyncClient, Any],
    op: Op,
    arrays: dict[str, Array],
    attributes: dict[str, Any],
) -> Outcome:
    client, stub = ways
    if way == "grpc":
        return await _grpc(stub, op, arrays, attributes)
    # An .npy file cannot say bfloat16 (its 2-byte void): the request's dtype does.
    bfloat16 = any(element_type_of(array.dtype).numpy == "bfloat16" for array in arrays.values())
    dtype = {"dtype": "bfloat16"} if bfloat16 else {}
    if way == "json":
        body = {name: npy_b64(array) for name, array in arrays.items()}
        response = await client.post(f"/{op.name}", json={**body, **attributes, **dtype})
    elif way == "npz":
        response = await client.post(
            f"/{op.name}",
            params={**{key: query_text(value) for key, value in attributes.items()}, **dtype},
            content=npz_bytes(False, **arrays),
            headers={"content-type": "application/x-npz"},
        )
    else:
        head = {
            "inputs": [
                {"name": name, "shape": list(array.shape), "datatype": v2_name(array.dtype)}
                for name, array in arrays.items()
            ],
            "parameters": {
                **{key: parameter_value(value) for key, value in attributes.items()},
                "binary_data_output": True,
            },
        }
        chunks = [np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
                  for array in arrays.values()]  # fmt: skip
        content, headers = v2_binary_body(head, chunks)
        response = await client.post(
            f"/v2/models/{op.name}/infer", content=content, headers=headers
        )
    if response.status_code != 200:
        if way == "v2":
            message = response.json()["error"]
            return ("refused", response.status_code, _field(message), message)
        [problem, *_] = response.json()["detail"]
        return ("refused", response.status_code, problem["loc"][-1], problem["msg"])
    return ("ok", _outputs(way, op, response))


def _outputs(way: str, op: Op, response: httpx.Response) -> list[Array]:
    if way == "json":
        body = response.json()
        entries = body["outputs"] if op.several_outputs else [body]
        return [np.load(io.BytesIO(_b64(entry["data"]))) for entry in entries]
    if way == "npz":
        if response.headers["content-type"].startswith("application/x-npz"):
            archive = np.load(io.BytesIO(response.content))
            return [archive[name] for name in archive.files]
        return [np.load(io.BytesIO(response.content))]
    length = int(response.headers["inference-header-content-length"])
    head = orjson.loads(response.content[:length])
    offset, got = length, []
    for output in head["outputs"]:
        size = output["parameters"]["binary_data_size"]
        dtype = DTYPES[output["datatype"]].newbyteorder("<")
        raw = np.frombuffer(response.content[offset : offset + size], dtype)
        got.append(raw.reshape(output["shape"]))
        offset += size
    return got


def _b64(text: str) -> bytes:
    import pybase64  # noqa: PLC0415

    return pybase64.b64decode(text)


def _grpc_message(op: Op, arrays: dict[str, Array], attributes: dict[str, Any]) -> Any:
    """A ``ModelInferRequest`` of ``arrays`` (raw contents) and ``attributes`` (parameters)."""
    message = pb.ModelInferRequest(model_name=op.name)
    for name, array in arrays.items():
        message.inputs.add(name=name, datatype=v2_name(array.dtype), shape=list(array.shape))
        little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
        message.raw_input_contents.append(little.tobytes())
    for name, given in attributes.items():
        value = parameter_value(given)  # a list as one "1,0,1" string
        if isinstance(value, bool):
            message.parameters[name].bool_param = value
        elif isinstance(value, int):
            message.parameters[name].int64_param = value
        else:
            message.parameters[name].string_param = str(value)
    return message


async def _grpc(stub: Any, op: Op, arrays: dict[str, Array], attributes: dict[str, Any]) -> Outcome:
    message = _grpc_message(op, arrays, attributes)
    try:
        response = await stub.ModelInfer(message)
    except grpc.aio.AioRpcError as error:
        code = error.code()
        status = 500 if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) else 400
        return ("refused", status, _field(error.details() or ""), error.details())
    got = []
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        dtype = DTYPES[tensor.datatype].newbyteorder("<")
        got.append(np.frombuffer(raw, dtype).reshape(tuple(tensor.shape)))
    return ("ok", got)


def in_process(op: Op, arrays: dict[str, Array], attributes: dict[str, Any]) -> Outcome:
    """What the pipeline makes of the request with no transport: its outputs, or its refusal."""
    try:
        given = {key: tuple(value) if isinstance(value, list) else value
                 for key, value in attributes.items()}  # fmt: skip
        job = make_job(op, arrays, {**op.attribute_defaults(), **given}, Limits.of(Settings()))
        outputs = job.outputs()  # a check the plan left to the kernel refuses here
    except ServiceError as error:
        problem = error.problems[0]
        return ("refused", problem.kind.status, problem.loc[-1], problem.msg)
    return ("ok", outputs)


def same_bits(got: list[Array], expected: list[Array]) -> bool:
    if len(got) != len(expected):
        return False
    for actual, wanted in zip(got, expected, strict=True):
        if actual.shape != wanted.shape or actual.dtype.itemsize != wanted.dtype.itemsize:
            return False
        # bfloat16 comes back in npy form as the 2-byte words it is (npy has no name for it).
        if element_type_of(wanted.dtype).numpy != "bfloat16" and (
            actual.dtype.newbyteorder("=") != wanted.dtype.newbyteorder("=")
        ):
            return False
        width = wanted.dtype.itemsize
        if not np.array_equal(
            np.ascontiguousarray(actual).view(f"u{width}"),
            np.ascontiguousarray(wanted).view(f"u{width}"),
        ):
            return False
    return True


@pytest.mark.parametrize(("op_name", "variant"), CASES)
async def test_rank_0_and_empty_inputs_on_every_way_in(
    app_and_stub: tuple[httpx.AsyncClient, Any], op_name: str, variant: str
) -> None:
    op = REGISTRY[op_name]
    arrays = edge_requests(op)[variant]
    _, attributes = first_example(op)
    expected = in_process(op, arrays, attributes)
    for way in WAYS:
        got = await send(way, app_and_stub, op, arrays, attributes)
        if expected[0] == "ok":
            assert got[0] == "ok", f"{way}: {got}"
            assert same_bits(got[1], expected[1]), (way, got[1], expected[1])
        else:
            assert got[0] == "refused" and 400 <= got[1] < 500, f"{way}: {got}"
            assert got[2] == expected[2], (way, got, expected)


@pytest.mark.parametrize("dtype", sorted(set(DTYPES.values()), key=str))
async def test_a_scalar_padded_is_the_scalar(
    app_and_stub: tuple[httpx.AsyncClient, Any], dtype: np.dtype[Any]
) -> None:
    """Issue 42, 8: Pad-12 of a rank-0 tensor with empty pads answers the scalar (it was a
    500), pad_value or not, every element type, every mode (pad_value in constant mode only)."""
    op = REGISTRY["pad"]
    scalar = np.array(7, np.float64).astype(dtype)
    for mode, with_value in [*((mode, False) for mode in MODES), ("constant", True)]:
        arrays = {"data": scalar, "pads_begin": np.zeros(0, np.int64),
                  "pads_end": np.zeros(0, np.int32)}  # fmt: skip
        if with_value:
            arrays["pad_value"] = np.zeros((), dtype)
        for way in WAYS:
            got = await send(way, app_and_stub, op, arrays, {"pad_mode": mode})
            assert got[0] == "ok", f"{way}, {mode}, pad_value {with_value}: {got}"
            assert same_bits(got[1], [scalar]), (way, mode, with_value, got[1])


ENUMERATED = [
    (op.name, item.name) for op in REGISTRY.values() for item in op.attributes if item.choices
]
#: Bad values of an enumerated attribute and how the refusal tells them (the query carries
#: every value as text).
BAD_VALUES = [("bogus", '"bogus"'), (5, "an integer"), ("", '""')]


@pytest.mark.parametrize(("value", "told"), BAD_VALUES)
@pytest.mark.parametrize(("op_name", "name"), ENUMERATED)
async def test_an_enumerated_attribute_s_bad_value_is_refused_with_its_values(
    app_and_stub: tuple[httpx.AsyncClient, Any], op_name: str, name: str, value: Any, told: str
) -> None:
    op = REGISTRY[op_name]
    declared = op.attribute(name)
    assert declared is not None
    arrays, attributes = first_example(op)
    values = ", ".join(f'"{choice}"' for choice in declared.choices)
    for way in WAYS:
        got = await send(way, app_and_stub, op, arrays, {**attributes, name: value})
        # gRPC's INVALID_ARGUMENT is told here as 400 (``_grpc``); HTTP's status is 422.
        assert got[0] == "refused" and got[1] == (400 if way == "grpc" else 422), f"{way}: {got}"
        assert got[2] == name, (way, got)
        message = got[3]
        assert f"{name} must be one of {values}; got " in message, (way, message)
        wanted = f'"{value}"' if way == "npz" else told
        assert message.endswith(wanted), (way, message)
        assert "send an integer" not in message
