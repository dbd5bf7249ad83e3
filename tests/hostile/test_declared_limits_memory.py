"""Issue 42's proof against a real worker (system tier: some forty requests of 32 MiB): for
every op of the registry, each index-like input at 4,000,000 elements and each integer
attribute at 2**31, sent as an ``.npz`` body (and the count attributes over gRPC too), is
answered with a 4xx naming the field where the op declares a limit (never a 5xx otherwise),
and the worker's RSS grows within docs/limits.md's rule: 1.25 x the request's reservation +
16 MiB (the memory matrix's machinery: RSS sampled every millisecond and the kernel's VmHWM)."""

import time
from typing import Any

import grpc
import numpy as np
import pytest

from app.ops.declaration import INT, INTS, Op
from app.registry import REGISTRY, every_version
from tensor_ops_wire.ops import query_text
from tests.hostile.test_memory_matrix import (
    MiB,
    Request,
    Row,
    Worker,
    access_line,
    watched,
    worker,
)
from tests.pipeline.test_declared_limits import first_example, index_like, long_input
from tests.support import npz_bytes
from tests.transports.test_edge_shapes import _grpc_message

#: Every version of every op (its route /<op>/v<N>), each index-like input, integer attribute
#: and integer-list attribute.
OPS = {op.spec: op for op in every_version()}
LONG_INPUTS = [(op.spec, name) for op in OPS.values() for name in index_like(op)]
INTEGER_ATTRIBUTES = [
    (op.spec, item.name) for op in OPS.values() for item in op.attributes if item.kind == INT
]
INTEGER_LISTS = [
    (op.spec, item.name) for op in OPS.values() for item in op.attributes if item.kind == INTS
]

pytestmark = pytest.mark.e2e  # the system tier by tests/conftest.py's list
__all__ = ["worker"]  # the matrix's fixture, used here too


def npz_request(route: str, arrays: dict[str, Any], attributes: dict[str, Any]) -> Request:
    # Each attribute in its query form ("1,0,1" for a list, "true" for a boolean).
    query = "&".join(f"{key}={query_text(value)}" for key, value in attributes.items())
    return Request(
        f"/{route}?{query}" if query else f"/{route}",
        npz_bytes(False, **arrays),
        {"content-type": "application/x-npz"},
    )


def checked(worker: Worker, transport: str, request: Request, cell: str) -> tuple[Any, Row]:
    """``request`` sent with its RSS watched; its reply and its row (growth against reserved)."""
    request_id = f"limits-{cell}-{time.monotonic_ns()}"
    request.headers["x-request-id"] = request_id
    sent = watched(worker, transport, request, request_id)
    line = access_line(worker.process, request_id)
    row = Row(
        cell=cell, reserved=int(line["reserved_bytes"]), growth=sent.growth,
        sampled=sent.sampled - sent.baseline,
        hwm=None if sent.hwm is None else sent.hwm - sent.baseline, seconds=sent.seconds,
        body=len(request.content), status=sent.reply.status_code, problem=None,
    )  # fmt: skip
    print(f"\n{row.line()}", end="")
    assert row.growth <= row.bound, (
        f"{cell}: RSS grew {row.growth / MiB:.1f} MiB against {row.reserved / MiB:.1f} MiB "
        f"reserved (bound {row.bound / MiB:.1f} MiB)\n{row.line()}"
    )
    return sent.reply, row


def route(op: Op) -> str:
    return f"{op.name}/v{op.version}"


@pytest.mark.parametrize(("spec", "name"), LONG_INPUTS)
def test_an_index_like_input_of_4_million_elements(worker: Worker, spec: str, name: str) -> None:
    op = OPS[spec]
    item = op.input_for(name)
    assert item is not None
    arrays, attributes = first_example(op)
    arrays[name] = long_input(op, name, arrays.get(name))
    reply, _ = checked(worker, "npz", npz_request(route(op), arrays, attributes), f"{spec}.{name}")
    assert reply.status_code < 500, reply.text
    if item.limit:
        assert reply.status_code in (413, 422), reply.text
        [problem] = reply.json()["detail"]
        assert problem["loc"] == ["body", name]
        assert "4000000 elements" in problem["msg"], problem


@pytest.mark.parametrize(("spec", "name"), INTEGER_ATTRIBUTES)
def test_an_integer_attribute_at_2_to_31(worker: Worker, spec: str, name: str) -> None:
    op = OPS[spec]
    arrays, attributes = first_example(op)
    attributes[name] = 2**31
    cell = f"{spec}.{name}-2to31"
    reply, _ = checked(worker, "npz", npz_request(route(op), arrays, attributes), cell)
    assert reply.status_code in (413, 422), reply.text
    [problem] = reply.json()["detail"]
    assert problem["loc"][-1] == name and str(2**31) in problem["msg"], problem


@pytest.mark.parametrize("value", [2**31, 2**62])
@pytest.mark.parametrize(("spec", "name"), INTEGER_LISTS)
def test_each_element_of_an_integer_list_at_2_to_31_and_2_to_62(
    worker: Worker, spec: str, name: str, value: int
) -> None:
    """A list attribute (sizes, strides, pads, masks) whose every element is huge: answered
    (a stride past the data takes one patch) or refused naming it, within the reservation."""
    op = OPS[spec]
    arrays, attributes = first_example(op)
    given = attributes.get(name)
    attributes[name] = [value] * max(2, len(given) if isinstance(given, list | tuple) else 0)
    cell = f"{spec}.{name}-{value.bit_length() - 1}"
    reply, _ = checked(worker, "npz", npz_request(route(op), arrays, attributes), cell)
    assert reply.status_code in (200, 413, 422), reply.text
    if reply.status_code != 200:
        [problem] = reply.json()["detail"]
        assert problem["loc"][0] == "body" and problem["msg"], problem


@pytest.mark.parametrize("count", [2**23, 2**27])
def test_split_of_an_empty_tensor_over_grpc(worker: Worker, count: int) -> None:
    """Issue 42, 1: a 76-byte gRPC message, data [0, 2**23] split in 2**23 or 2**27, grew the
    worker 650 MiB (a 500 at 2**27 under a 4 GiB address space); now a prompt refusal."""
    arrays: dict[str, Any] = {
        "data": np.zeros((0, 2**23), np.float32),
        "axis": np.array(1, np.int64),
    }
    message = _grpc_message(REGISTRY["split"], arrays, {"num_splits": count})
    request = Request("", message.SerializeToString(), {})
    reply, _ = checked(worker, "grpc", request, f"split-grpc-{count}")
    assert reply.code is grpc.StatusCode.RESOURCE_EXHAUSTED, reply
    assert f"num_splits = {count} is above the limit of 1024" in reply.details, reply
