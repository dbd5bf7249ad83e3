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

from app.ops.declaration import INT
from app.registry import REGISTRY
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

#: The newest version of each op (its route), each index-like input and integer attribute.
LONG_INPUTS = [(op.name, name) for op in REGISTRY.values() for name in index_like(op)]
INTEGER_ATTRIBUTES = [
    (op.name, item.name) for op in REGISTRY.values() for item in op.attributes if item.kind == INT
]

pytestmark = pytest.mark.e2e  # the system tier by tests/conftest.py's list
__all__ = ["worker"]  # the matrix's fixture, used here too


def npz_request(op_name: str, arrays: dict[str, Any], attributes: dict[str, Any]) -> Request:
    # Each attribute in its query form ("1,0,1" for a list, "true" for a boolean).
    query = "&".join(f"{key}={query_text(value)}" for key, value in attributes.items())
    return Request(
        f"/{op_name}?{query}" if query else f"/{op_name}",
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


@pytest.mark.parametrize(("op_name", "name"), LONG_INPUTS)
def test_an_index_like_input_of_4_million_elements(worker: Worker, op_name: str, name: str) -> None:
    op = REGISTRY[op_name]
    item = op.input_for(name)
    assert item is not None
    arrays, attributes = first_example(op)
    arrays[name] = long_input(op, name, arrays.get(name))
    reply, _ = checked(worker, "npz", npz_request(op_name, arrays, attributes), f"{op_name}.{name}")
    assert reply.status_code < 500, reply.text
    if item.limit:
        assert reply.status_code in (413, 422), reply.text
        [problem] = reply.json()["detail"]
        assert problem["loc"] == ["body", name]
        assert "4000000 elements" in problem["msg"], problem


@pytest.mark.parametrize(("op_name", "name"), INTEGER_ATTRIBUTES)
def test_an_integer_attribute_at_2_to_31(worker: Worker, op_name: str, name: str) -> None:
    op = REGISTRY[op_name]
    arrays, attributes = first_example(op)
    attributes[name] = 2**31
    cell = f"{op_name}.{name}-2to31"
    reply, _ = checked(worker, "npz", npz_request(op_name, arrays, attributes), cell)
    assert reply.status_code in (413, 422), reply.text
    [problem] = reply.json()["detail"]
    assert problem["loc"][-1] == name and str(2**31) in problem["msg"], problem


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
