"""Calls through system shared memory (``shared_memory=True``), for a client on the service's
host: the tensors go through a POSIX shared memory object instead of the socket.

Each call creates an object sized for its inputs and output, registers it with the service
(Triton's shared memory extension, over HTTP: ``/v2/systemsharedmemory``), sends a request that
names the region in each tensor's parameters (``/v2`` JSON, or gRPC ``ModelInfer``), copies the
output out of the region, then unregisters and removes the object, whatever happened. An op
whose outputs the client cannot size ahead (any but Roll and Gather) sends its inputs so and
gets its outputs in the answer, as binary data.
"""

import contextlib
import json
import uuid
from collections.abc import Generator, Mapping
from multiprocessing import shared_memory
from typing import Any, Protocol
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from tensor_ops_client._actions import SendGrpc, Wait
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._grpc import infer_output
from tensor_ops_client._http import HttpRequest, data_type, infer_path, read_output
from tensor_ops_client._raw import raw_input, raw_output
from tensor_ops_client._retry import Attempts, Retry
from tensor_ops_wire.ops import AttributeValue, parameter_value

#: Tensors start at multiples of this many bytes in the object (the widest element).
ALIGN = 8
REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"


class _Client(Protocol):
    @property
    def transport(self) -> str: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def _auth(self) -> dict[str, str]: ...

    def _http_plan(self, request: HttpRequest, attempts: Attempts, read: Any) -> Any: ...


def output_shape(
    op: str, arrays: Mapping[str, npt.NDArray[Any]], attributes: Mapping[str, AttributeValue]
) -> tuple[int, ...] | None:
    """The output's shape, as the service will make it (None: an op this client cannot size,
    or inputs the service will refuse anyway)."""
    data = arrays.get("data")
    if data is None:
        return None
    if op == "roll":
        return tuple(data.shape)
    if op == "gather":
        indices, axis = arrays.get("indices"), arrays.get("axis")
        if indices is None or axis is None or axis.size != 1:
            return None
        batch_dims = int(attributes.get("batch_dims", 0))  # type: ignore[arg-type]
        at = int(axis.reshape(-1)[0])
        at = at + data.ndim if at < 0 else at
        batch_dims = batch_dims + indices.ndim if batch_dims < 0 else batch_dims
        if not 0 <= at < data.ndim:
            return None
        return (*data.shape[:at], *indices.shape[batch_dims:], *data.shape[at + 1 :])
    return None


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def shared_memory_plan(
    client: _Client,
    op: str,
    arrays: Mapping[str, npt.NDArray[Any]],
    attributes: Mapping[str, AttributeValue],
    attempts: Attempts,
    version: str | None = None,
) -> Generator[Any, Any, Any]:
    """One op call through a region made for it (see the module's documentation); ``version``
    the op's version (None: the newest)."""
    shape = output_shape(op, arrays, attributes)
    data = arrays.get("data")
    # An op whose outputs this client cannot size: its inputs go through the region, its
    # outputs come back in the answer.
    sized = shape is not None and data is not None
    output_bytes = int(np.prod(shape, dtype=np.int64)) * data.itemsize if sized else 0  # type: ignore[arg-type, union-attr]
    places: list[tuple[str, Any, npt.NDArray[Any], int]] = []
    offset = 0
    for name, value in arrays.items():
        element, contents = raw_input(name, value)
        places.append((name, element, contents, offset))
        offset = _aligned(offset + contents.nbytes)
    output_offset = offset
    total = max(1, output_offset + output_bytes)
    memory = shared_memory.SharedMemory(create=True, size=total)
    region = f"tensor-ops-client-{uuid.uuid4().hex}"
    path = f"/v2/systemsharedmemory/region/{quote(region)}"
    try:
        shared = memory.buf
        assert shared is not None
        buffer = np.frombuffer(shared, np.uint8)
        inputs = []
        for name, element, contents, at in places:
            buffer[at : at + contents.nbytes] = contents.reshape(-1)
            inputs.append(
                {
                    "name": name,
                    "shape": list(arrays[name].shape),
                    "datatype": element.kserve,
                    "parameters": {REGION: region, BYTE_SIZE: contents.nbytes, OFFSET: at},
                }
            )
        del buffer
        register = {"key": "/" + memory.name, "offset": 0, "byte_size": total}
        yield from _json_call(client, f"{path}/register", register, attempts)
        try:
            if not sized:
                return (
                    yield from _answered_call(
                        client, op, inputs, arrays, attributes, attempts, version
                    )
                )
            output = {REGION: region, BYTE_SIZE: output_bytes, OFFSET: output_offset}
            if client.transport == "grpc":
                yield from _grpc_call(client, op, inputs, output, attributes, attempts, version)
            else:
                head: dict[str, Any] = {
                    "inputs": inputs,
                    "outputs": [{"name": "output", "parameters": output}],
                }
                if attributes:
                    head["parameters"] = {
                        name: parameter_value(value) for name, value in attributes.items()
                    }
                yield from _json_call(client, infer_path(op, version), head, attempts)
            assert shape is not None and data is not None
            view = shared[output_offset : output_offset + output_bytes]
            result = np.array(raw_output(view, data.dtype, shape), copy=True)
            view.release()
            return result
        finally:
            # The object is removed below whatever the service says.
            with contextlib.suppress(TensorOpsError):
                yield from _json_call(client, f"{path}/unregister", None, Attempts(Retry.of(False)))
    finally:
        with contextlib.suppress(BufferError):  # a view still held by a failure's frame
            memory.close()
        memory.unlink()


def _answered_call(
    client: _Client,
    op: str,
    inputs: list[dict[str, Any]],
    arrays: Mapping[str, npt.NDArray[Any]],
    attributes: Mapping[str, AttributeValue],
    attempts: Attempts,
    version: str | None = None,
) -> Generator[Any, Any, Any]:
    """A call whose inputs are in the region and whose outputs come in the answer."""
    if client.transport == "grpc":
        answer = yield from _grpc_call(client, op, inputs, None, attributes, attempts, version)
        return infer_output(answer)
    parameters = {name: parameter_value(value) for name, value in attributes.items()}
    head = {"inputs": inputs, "parameters": {**parameters, "binary_data_output": True}}
    request = HttpRequest(
        "POST",
        infer_path(op, version),
        json.dumps(head, separators=(",", ":")).encode(),
        {"content-type": "application/json", **client._auth},
        answer="v2",
        data_dtype=data_type(arrays),
    )
    return (
        yield from client._http_plan(
            request, attempts, lambda got: read_output(request, got.body, got.headers)
        )
    )


def _json_call(
    client: _Client, url: str, body: Any, attempts: Attempts
) -> Generator[Any, Any, None]:
    content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    headers = {"content-type": "application/json", **client._auth}
    request = HttpRequest("POST", url, content, headers)
    yield from client._http_plan(request, attempts, lambda answer: None)


def _grpc_call(
    client: _Client,
    op: str,
    inputs: list[dict[str, Any]],
    output: dict[str, Any] | None,
    attributes: Mapping[str, AttributeValue],
    attempts: Attempts,
    version: str | None = None,
) -> Generator[Any, Any, Any]:
    """One ModelInfer, its inputs in the region; its output there too when ``output`` says
    where (else in the answer, which is returned)."""
    from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: PLC0415

    request = pb.ModelInferRequest(model_name=op, model_version=version or "")
    _set_parameters(
        request.parameters, {name: parameter_value(value) for name, value in attributes.items()}
    )
    for item in inputs:
        tensor = request.inputs.add(
            name=item["name"], datatype=item["datatype"], shape=item["shape"]
        )
        _set_parameters(tensor.parameters, item["parameters"])
    if output is not None:
        _set_parameters(request.outputs.add(name="output").parameters, output)
    message = request.SerializeToString()
    while True:
        try:
            return (yield SendGrpc(message, attempts.timeout(client.timeout)))
        except TensorOpsError as error:
            wait = attempts.wait_after(error)
            if wait is None:
                raise
        yield Wait(wait)


def _set_parameters(parameters: Any, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        if isinstance(value, str):
            parameters[name].string_param = value
        elif isinstance(value, bool):
            parameters[name].bool_param = value
        else:
            parameters[name].int64_param = value
