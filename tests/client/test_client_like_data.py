"""The inputs that hold values of the data's element type (``/info``'s ``like_data``: Pad's
``pad_value``, the scatters' ``updates``, Concat's ``data_N``, ...), given to the client as
numbers, take the data's type on every transport, as the JSON route types them: float32 data
with ``pad_value=0.5`` is padded with float32's 0.5. Driven by the registry: every op with such
an input, on an example of its spec, answers the client as it answers the JSON route."""

import base64
import io
from typing import Any

import httpx
import numpy as np
import pytest

from app.ops.declaration import Op
from app.registry import REGISTRY
from tensor_ops_client import TRANSPORTS
from tensor_ops_client import Transport as TransportName
from tensor_ops_wire.npy import decode_npy_base64
from tests.client.test_client_generic import client, server

pytestmark = pytest.mark.e2e
__all__ = ["server"]  # the module's fixture (gRPC on), shared with the generic client tests

FLOAT32 = np.dtype(np.float32)


def typed_inputs(op: Op) -> list[str]:
    """The inputs of ``op`` given the type of its type source (the data), the source left out."""
    return [
        item.name
        for item in op.inputs
        if item.like_data and item.name != op.output_type_from.removesuffix("_0")
    ]


#: Every op with an input typed as its data, beside the data (or Concat's ``data_N``).
OPS = [op.name for op in REGISTRY.values() if typed_inputs(op) or op.variadic is not None]


def numeric_example(op: Op) -> dict[str, Any]:
    """The op's first example whose values are numbers (no base64, no booleans), with every
    optional value input it leaves out given as 0.5 (Pad's ``pad_value``)."""
    for example in op.examples.values():
        value = dict(example["value"])
        if value.get("dtype", "float32") not in ("float32", "float64", "int64", "int32"):
            continue
        inputs, _ = split(op, value)
        if any(isinstance(item, str | bool) for item in inputs.values()):
            continue
        for item in op.inputs:
            if item.like_data and item.optional and item.name not in value:
                value[item.name] = 0.5
        return value
    raise AssertionError(f"{op.name}: no example of numbers")


def npy_base64(array: np.ndarray[Any, Any]) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def split(op: Op, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    attributes = {key: item for key, item in value.items() if op.attribute(key) is not None}
    inputs = {
        key: item
        for key, item in value.items()
        if key != "dtype" and key not in attributes and op.input_for(key) is not None
    }
    return inputs, attributes


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("op_name", OPS)
def test_value_inputs_take_the_data_type_as_on_the_json_route(
    server: tuple[str, str], op_name: str, transport: TransportName
) -> None:
    op = REGISTRY[op_name]
    value = numeric_example(op)
    inputs, attributes = split(op, value)
    source = op.output_type_from
    # The data an array of float32; every other input as the numbers of the example.
    given: dict[str, Any] = {
        name: np.array(item, FLOAT32) if name == source else item for name, item in inputs.items()
    }
    typed = [
        name
        for name in inputs
        if name != source
        and name.rstrip("0123456789").rstrip("_")
        in typed_inputs(op) + ([op.variadic.name] if op.variadic is not None else [])
    ]
    assert typed, f"{op_name}: the example gives no input typed as the data"
    # The reference: the JSON route, the data float32 .npy (so is its answer), the rest numbers.
    body = {key: item for key, item in value.items() if key != "dtype"}
    body[source] = npy_base64(given[source])
    answer = httpx.post(f"{server[0]}/{op_name}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    reference = answer.json()
    with client(server, transport) as service:
        output = service.call(op_name, given, attributes)
    outputs = output if isinstance(output, list) else [output]
    forms = reference.get("outputs", [reference])
    assert len(outputs) == len(forms)
    for got, form in zip(outputs, forms, strict=True):
        expected = decode_npy_base64(form["data"])
        assert got.dtype == expected.dtype == FLOAT32
        assert got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_float32_data_padded_with_a_python_half(
    server: tuple[str, str], transport: TransportName
) -> None:
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    with client(server, transport) as service:
        output = service.call(
            "pad",
            {"data": data, "pads_begin": [0, 1], "pads_end": [1, 0], "pad_value": 0.5},
            {"pad_mode": "constant"},
        )
    expected = np.array([[0.5, 0, 1], [0.5, 2, 3], [0.5, 0.5, 0.5]], np.float32)
    assert output.dtype == FLOAT32
    assert output.tobytes() == expected.tobytes()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_array_keeps_the_type_its_caller_gave(
    server: tuple[str, str], transport: TransportName
) -> None:
    """Only numbers are typed: a float64 array beside float32 data is the caller's choice, and
    the service's refusal of it is given as it is."""
    data = np.zeros((2, 2), np.float32)
    with client(server, transport) as service, pytest.raises(Exception) as refused:
        service.call(
            "pad",
            {"data": data, "pads_begin": [0, 1], "pads_end": [1, 0],
             "pad_value": np.float64(0.5)},
            {"pad_mode": "constant"},
        )  # fmt: skip
    assert "pad_value" in str(refused.value)
    assert "float64" in str(refused.value)
